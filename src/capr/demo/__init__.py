

from pathlib import Path


def demo_corpus_dir() -> Path:
    """The bundled demo corpus: synthetic clinical notes and health articles."""
    from importlib.resources import files

    return Path(str(files("capr") / "demo" / "corpus"))
