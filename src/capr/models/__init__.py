"""Models: text encoders (and, with later issues, trainable retrieval models)."""

from capr.models.encoder import Backend, Encoder, EncoderConfig

__all__ = ["Backend", "Encoder", "EncoderConfig"]
