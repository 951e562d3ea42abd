"""Document vectors of an index under one CDV model, computed once and kept beside the index
(`<index>/cdv/<model stamp>.npz`, written atomically). A query only embeds its entity and aspect: passage scores
are dot products with per-passage mean vectors, sentence scores with per-sentence vectors. Documents added to or
deleted from the index since the last use are encoded or dropped on the next open."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from capr.cdv.data import DocSentences, clean_sentence
from capr.cdv.model import CDVModel, sentence_scores

if TYPE_CHECKING:
    from capr.index.index import Index


@dataclass
class DocVectors:
    doc_id: str
    pids: list[str]  # passages in document order
    sent_start: np.ndarray  # (n,) document offsets
    sent_end: np.ndarray
    passage_of: np.ndarray  # (n,) passage index within pids
    entity: np.ndarray  # (n, d) decoded, unit length
    aspect: np.ndarray
    keys: list[str] = field(default_factory=list)  # pid@segment:row of each passage when encoded

    def scores(self, qe: np.ndarray | None, qa: np.ndarray | None) -> dict[str, np.ndarray]:
        return sentence_scores(self.entity, self.aspect, qe, qa)


def _doc_sentences(index: "Index", rows: list[int]) -> tuple[DocSentences, list[tuple[int, int]]]:
    from capr.search.evidence import passage_sentences

    passages = sorted((index.passage(r) for r in rows), key=lambda p: p.start)
    texts, owner, spans = [], [], []
    for j, p in enumerate(passages):
        for a, b, t in passage_sentences(p):
            s = clean_sentence(t)
            if s:
                texts.append(s)
                owner.append(j)
                spans.append((a, b))
    doc = DocSentences(doc_id=passages[0].doc_id, texts=texts, passage_of=np.asarray(owner, dtype=np.int64),
                       passages=[p.pid for p in passages])
    return doc, spans


class CDVStore:
    """CDV vectors for every live passage of an index."""

    def __init__(self, model: CDVModel, docs: dict[str, DocVectors]) -> None:
        self.model = model
        self.docs = docs
        self._build_matrices()

    def _build_matrices(self) -> None:
        self.pids: list[str] = []
        pe, pa = [], []
        self.pid_doc: dict[str, tuple[str, int]] = {}
        for doc_id, dv in self.docs.items():
            for j, pid in enumerate(dv.pids):
                rows = np.flatnonzero(dv.passage_of == j)
                if len(rows) == 0:
                    continue
                self.pid_doc[pid] = (doc_id, j)
                self.pids.append(pid)
                pe.append(dv.entity[rows].mean(0))
                pa.append(dv.aspect[rows].mean(0))
        dim = self.model.card.get("target_dim", 1)
        # mean of unit vectors: q · mean = mean of the sentences' cosines, the CDV passage score
        self.passage_entity = np.asarray(pe, dtype=np.float32).reshape(-1, dim)
        self.passage_aspect = np.asarray(pa, dtype=np.float32).reshape(-1, dim)
        self.row_of = {pid: i for i, pid in enumerate(self.pids)}

    # -- build / load -------------------------------------------------------------------
    @staticmethod
    def path_for(index: "Index", model: CDVModel) -> Path:
        return Path(index.root) / "cdv" / f"{model.stamp}.npz"

    @classmethod
    def open(cls, index: "Index", model: CDVModel, progress: Callable[[int, int], None] | None = None,
             save: bool = True) -> "CDVStore":
        """Load the stored vectors; encode documents that are new (or changed) and drop deleted ones."""
        path = cls.path_for(index, model)
        docs = _load(path) if path.exists() else {}
        live: dict[str, list[int]] = {}
        live_pids: dict[str, list[str]] = {}
        for pid, row in index.pid_rows().items():
            d = _doc_of(index, pid, row)
            live.setdefault(d, []).append(row)
            live_pids.setdefault(d, []).append(_row_key(index, pid, row))
        # a replaced document keeps its id and pids but is written to a new segment: compare where passages live
        stale = [d for d in docs if d not in live or sorted(docs[d].keys) != sorted(live_pids[d])]
        for d in stale:
            del docs[d]
        todo = [d for d in live if d not in docs]
        if todo:
            built = [_doc_sentences(index, live[d]) for d in todo]
            done = 0

            def tick(n: int) -> None:
                nonlocal done
                done += n
                if progress:
                    progress(done, len(todo))

            vecs = model.encode_documents([b[0] for b in built], progress=tick)
            for d, (doc, spans), (e, a) in zip(todo, built, vecs):
                docs[d] = DocVectors(
                    doc.doc_id, doc.passages, np.asarray([s[0] for s in spans], dtype=np.int64),
                    np.asarray([s[1] for s in spans], dtype=np.int64), doc.passage_of, e, a, keys=live_pids[d])
        if (todo or stale) and save:
            _save(path, docs)
        return cls(model, docs)

    # -- scoring ------------------------------------------------------------------------
    def passage_scores(self, qe: np.ndarray | None, qa: np.ndarray | None, pids: list[str] | None = None) -> np.ndarray:
        rows = np.arange(len(self.pids)) if pids is None else np.asarray([self.row_of[p] for p in pids], dtype=np.int64)
        parts = []
        if qe is not None:
            parts.append(self.passage_entity[rows] @ qe)
        if qa is not None:
            parts.append(self.passage_aspect[rows] @ qa)
        return np.mean(parts, axis=0)

    def query(self, entity: str | None, aspect: str | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        return self.model.query_vectors(entity, aspect)


def _row_key(index: "Index", pid: str, row: int) -> str:
    seg, local = index.locate(row)
    return f"{pid}@{seg.name}:{local}"


def _doc_of(index: "Index", pid: str, row: int) -> str:
    col = index.columns.get("doc_id")
    if col is not None:
        return str(col.values[int(np.asarray(col.codes)[row])])
    return index.passage(row).doc_id


def _save(path: Path, docs: dict[str, DocVectors]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {}
    ids = list(docs)
    arrays["doc_ids"] = np.asarray(ids, dtype=object)
    for name in ("pids", "keys"):
        col = np.empty(len(ids), dtype=object)
        for k, d in enumerate(ids):
            col[k] = list(getattr(docs[d], name))
        arrays[name] = col
    for key in ("sent_start", "sent_end", "passage_of"):
        arrays[key] = np.concatenate([getattr(docs[d], key) for d in ids]) if ids else np.zeros(0, np.int64)
    arrays["n_sent"] = np.asarray([len(docs[d].sent_start) for d in ids], dtype=np.int64)
    dim = next((docs[d].entity.shape[1] for d in ids if docs[d].entity.size), 1)
    for key in ("entity", "aspect"):
        arrays[key] = (np.concatenate([getattr(docs[d], key).reshape(-1, dim) for d in ids]) if ids
                       else np.zeros((0, dim))).astype(np.float16)
    fd, tmp = tempfile.mkstemp(prefix=".cdv-", suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path) -> dict[str, DocVectors]:
    z = np.load(path, allow_pickle=True)
    docs, i = {}, 0
    for doc_id, pids, keys, n in zip(z["doc_ids"], z["pids"], z["keys"], z["n_sent"]):
        s = slice(i, i + int(n))
        docs[str(doc_id)] = DocVectors(str(doc_id), [str(p) for p in pids], z["sent_start"][s], z["sent_end"][s],
                                       z["passage_of"][s], z["entity"][s].astype(np.float32),
                                       z["aspect"][s].astype(np.float32), keys=[str(k) for k in keys])
        i += int(n)
    return docs


__all__ = ["CDVStore", "DocVectors"]
