"""The CDV network (Arnold et al., WWW 2020): frozen sentence embeddings + structural flags → BiLSTM over the
whole document → a dense tanh discourse vector per sentence → an entity head and an aspect head, each regressing
the embedding of the sentence's labels. Queries are embedded with the same sentence encoder, so a query never
re-encodes documents: sentence score = mean of cos(entity, decoded entity) and cos(aspect, decoded aspect)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from capr.cdv.args import CDVArgs
from capr.cdv.data import N_FLAGS, DocSentences
from capr.errors import CaprError
from capr.models.card import CARD_FILE, read_card

WEIGHTS_FILE = "cdv.pt"


class CDVNet(nn.Module):
    def __init__(self, in_dim: int, target_dim: int, args: CDVArgs) -> None:
        super().__init__()
        self.lstm = nn.LSTM(in_dim + N_FLAGS, args.lstm_hidden, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(args.dropout)
        self.discourse = nn.Linear(2 * args.lstm_hidden, args.discourse_dim)
        self.entity_hidden = nn.Linear(args.discourse_dim, target_dim)
        self.entity_out = nn.Linear(target_dim, target_dim)
        self.aspect_hidden = nn.Linear(args.discourse_dim, target_dim)
        self.aspect_out = nn.Linear(target_dim, target_dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (docs, sentences, in_dim + flags) → entity and aspect vectors (docs, sentences, target_dim)."""
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=x.shape[1])
        z = torch.tanh(self.discourse(self.drop(h)))
        # the L2-normalised bottleneck before each output layer keeps the regression well conditioned
        e = self.entity_out(F.normalize(torch.tanh(self.entity_hidden(z)), dim=-1))
        a = self.aspect_out(F.normalize(torch.tanh(self.aspect_hidden(z)), dim=-1))
        return e, a


def _encoder(args: CDVArgs):
    from capr.models.encoder import Encoder, EncoderConfig, parse_backend

    return Encoder(EncoderConfig(model=args.encoder, backend=parse_backend(args.encoder_backend),
                                 max_length=args.sentence_max_length))


class CDVModel:
    """A trained CDV network with its sentence encoder."""

    def __init__(self, net: CDVNet, args: CDVArgs, encoder: Any = None, card: dict[str, Any] | None = None) -> None:
        self.net = net
        self.args = args
        self.encoder = encoder or _encoder(args)
        self.card = card or {}
        self.device = next(net.parameters()).device

    @property
    def stamp(self) -> str:
        """Identifies the weights, for caches of document vectors."""
        return self.card.get("weights_sha1", "")[:16] or "untrained"

    @classmethod
    def load(cls, model_dir: str | Path, device: str | None = None) -> "CDVModel":
        model_dir = Path(model_dir)
        card_path, weights = model_dir / CARD_FILE, model_dir / WEIGHTS_FILE
        if not card_path.exists() or not weights.exists():
            raise CaprError(f"{model_dir}: not a CDV model folder (expected {CARD_FILE} and {WEIGHTS_FILE}; "
                            "train one with `capr train cdv`)")
        card = read_card(model_dir)
        if card.get("kind") != "cdv":
            raise CaprError(f"{model_dir}: a {card.get('kind')!r} model, not a CDV model")
        args = CDVArgs.from_dict(card["args"])
        net = CDVNet(card["input_dim"], card["target_dim"], args)
        net.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        net.to(torch.device(device or "cpu")).eval()
        return cls(net, args, card=card)

    def save_weights(self, out_dir: Path) -> dict[str, Any]:
        path = out_dir / WEIGHTS_FILE
        torch.save({k: v.detach().cpu() for k, v in self.net.state_dict().items()}, path)
        return {"weights_sha1": hashlib.sha1(path.read_bytes()).hexdigest()}

    # -- vectors -------------------------------------------------------------------
    def sentence_vectors(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        return self.encoder.encode_passages(list(texts), progress=progress)

    def label_vectors(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode_passages(list(texts))

    @torch.no_grad()
    def encode_documents(
        self, docs: Sequence[DocSentences], progress: Callable[[int], None] | None = None, batch_docs: int = 16
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per document: L2-normalised decoded entity and aspect vectors, one row per sentence."""
        self.net.eval()
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for lo in range(0, len(docs), batch_docs):
            chunk = [d for d in docs[lo : lo + batch_docs]]
            vecs = self.sentence_vectors([t for d in chunk for t in d.texts])
            x, lengths, i = [], [], 0
            for d in chunk:
                n = len(d)
                x.append(np.concatenate([vecs[i : i + n], d.flags()], axis=1) if n else np.zeros((0, vecs.shape[1] + N_FLAGS)))
                lengths.append(n)
                i += n
            nonempty = [j for j, n in enumerate(lengths) if n]
            results: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros((0, self.card.get("target_dim", 0)), np.float32),) * 2
                                                          for _ in chunk]
            if nonempty:
                e, a = self.net(*_pad([x[j] for j in nonempty], self.device))
                e, a = F.normalize(e, dim=-1).cpu().numpy(), F.normalize(a, dim=-1).cpu().numpy()
                for k, j in enumerate(nonempty):
                    results[j] = (e[k, : lengths[j]].astype(np.float32), a[k, : lengths[j]].astype(np.float32))
            out.extend(results)
            if progress:
                progress(len(chunk))
        return out

    def query_vectors(self, entity: str | None, aspect: str | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        texts = [t for t in (entity, aspect) if t and t.strip()]
        if not texts:
            raise CaprError("a CDV query needs an entity and/or an aspect")
        vecs = list(self.label_vectors([t.strip() for t in texts]))
        qe = vecs.pop(0) if entity and entity.strip() else None
        qa = vecs.pop(0) if aspect and aspect.strip() else None
        return qe, qa


def _pad(rows: Sequence[np.ndarray], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(r) for r in rows)
    x = np.zeros((len(rows), n, rows[0].shape[1]), dtype=np.float32)
    for i, r in enumerate(rows):
        x[i, : len(r)] = r
    return torch.from_numpy(x).to(device), torch.tensor([len(r) for r in rows], dtype=torch.long)


def sentence_scores(e: np.ndarray, a: np.ndarray, qe: np.ndarray | None, qa: np.ndarray | None) -> dict[str, np.ndarray]:
    """Entity, aspect and combined score per sentence; combined = the cosine of the concatenated
    (entity ⊕ aspect) vectors, i.e. the mean of the two cosines (both halves are unit vectors)."""
    out: dict[str, np.ndarray] = {}
    if qe is not None:
        out["entity"] = e @ qe
    if qa is not None:
        out["aspect"] = a @ qa
    out["combined"] = np.mean([v for v in out.values()], axis=0)
    return out


__all__ = ["CDVModel", "CDVNet", "sentence_scores"]
