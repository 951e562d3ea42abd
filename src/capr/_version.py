"""capr's version: a leaf, so every layer can record it without importing the package's public front."""

__version__ = "0.1.0"
