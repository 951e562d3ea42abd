"""Configuration of the CDV (contextual discourse vectors) model and its trainer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class CDVArgs:
    encoder: str = "minilm"  # frozen sentence encoder: "minilm" (bundled), any HF id or local path
    encoder_backend: str = "torch"  # torch | onnx | onnx-int8 | static
    sentence_max_length: int = 128
    lstm_hidden: int = 128  # per direction (CPU: the BiLSTM backward pass dominates a step)
    discourse_dim: int = 256  # the contextual discourse vector (dense tanh layer after the BiLSTM)
    dropout: float = 0.2
    huber_delta: float = 2.0  # pseudo-Huber loss (the CDV paper's robust loss)
    contrastive_weight: float = 0.0  # optional in-batch softmax term over the batch's distinct label vectors
    contrastive_scale: float = 20.0
    title_weight: float = 0.5  # share of the entity target given to the document's title entity
    max_entities: int = 6  # entity labels of a passage that enter its entity target
    batch_docs: int = 16
    max_sentences: int = 128  # training windows over longer documents
    lr: float = 1e-3
    weight_decay: float = 1e-4
    max_steps: int = 2000
    time_budget_min: float | None = None
    dev_fraction: float = 0.05
    dev_queries: int = 256
    eval_every: int = 100
    patience: int = 5
    seed: int = 13
    device: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CDVArgs":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})
