"""Humeau et al.'s poly-encoder as CAPR uses it (Eq. 2): m learned codes attend over the passage's token
embeddings to give m passage vectors (cacheable at indexing); the query vector attends over those. This is the
model itself, loadable from a folder with its card; the trainer subclasses it to add the training loss."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from capr.models.loading import local_path, quiet_transformers


class PolySettings(Protocol):
    """What the poly-encoder reads of its configuration (PolyConfig, or the trainer's TrainArgs)."""

    max_length: int
    query_max_length: int
    poly_codes: int
    query_marker: str
    passage_marker: str


@dataclass
class PolyConfig:
    max_length: int = 128  # passage tokens
    query_max_length: int = 48
    poly_codes: int = 16
    query_marker: str = "[QUERY] "
    passage_marker: str = "[PASSAGE] "

    @classmethod
    def from_card(cls, card: dict[str, Any]) -> "PolyConfig":
        """The settings a trained poly-encoder was trained with, from its capr.json."""
        a = card.get("args") or {}
        return cls(max_length=int(card.get("max_length") or 256), query_max_length=int(a.get("query_max_length", 48)),
                   poly_codes=int(a.get("poly_codes", 16)), query_marker=a.get("query_marker", "[QUERY] "),
                   passage_marker=a.get("passage_marker", "[PASSAGE] "))


class PolyEncoder(nn.Module):
    def __init__(self, source: str, config: PolySettings, device: torch.device) -> None:
        """`source`: a Hugging Face encoder (to start training from) or a trained poly-encoder folder (its codes
        are read from poly_codes.pt)."""
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        quiet_transformers()
        src = local_path(source)
        self.args, self.device = config, device
        self.tokenizer = AutoTokenizer.from_pretrained(src)
        self.encoder = AutoModel.from_pretrained(src)
        d = self.encoder.config.hidden_size
        # Small codes give near-uniform attention: at step 0 every code is the passage's mean token vector,
        # i.e. the poly-encoder starts as the mean-pooling bi-encoder it is built from.
        self.codes = nn.Parameter(torch.randn(config.poly_codes, d) * 0.02)
        codes_file = Path(src) / "poly_codes.pt"
        if codes_file.exists():
            self.codes.data = torch.load(codes_file, map_location="cpu")
        self.to(device)

    def _hidden(self, texts: Sequence[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        enc = {k: v.to(self.device) for k, v in enc.items()}
        return self.encoder(**enc).last_hidden_state, enc["attention_mask"]

    def embed_queries(self, texts: Sequence[str]) -> torch.Tensor:
        h, m = self._hidden([self.args.query_marker + t for t in texts], self.args.query_max_length)
        m = m.unsqueeze(-1).float()
        return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

    def passage_codes(self, texts: Sequence[str]) -> torch.Tensor:
        """[n, m, d] — what the index stores per passage."""
        h, mask = self._hidden([self.args.passage_marker + t for t in texts], self.args.max_length)
        att = torch.einsum("md,nld->nml", self.codes, h)
        att = att.masked_fill(~mask.bool().unsqueeze(1), float("-inf"))
        return torch.einsum("nml,nld->nmd", att.softmax(-1), h)

    @staticmethod
    def interact(q: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """q [Q, d], codes [P, m, d] → cosine [Q, P] between each query and its attention summary of a passage."""
        w = torch.einsum("qd,pmd->qpm", q, codes).softmax(-1)
        ctx = torch.einsum("qpm,pmd->qpd", w, codes)
        return F.cosine_similarity(q.unsqueeze(1), ctx, dim=-1)

    def save(self, out_dir: Path) -> dict[str, Any]:
        """Weights, tokenizer and codes; returns what the card must carry for the model to be read back."""
        self.encoder.save_pretrained(str(out_dir))
        self.tokenizer.save_pretrained(str(out_dir))
        tmp = out_dir / "poly_codes.pt.tmp"
        torch.save(self.codes.detach().cpu(), tmp)
        os.replace(tmp, out_dir / "poly_codes.pt")
        return {"query_prefix": self.args.query_marker, "passage_prefix": self.args.passage_marker,
                "poly_codes": self.args.poly_codes, "query_max_length": self.args.query_max_length}


__all__ = ["PolyConfig", "PolyEncoder", "PolySettings"]
