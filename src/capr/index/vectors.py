"""Dense vectors of a segment: float32 rows (memory-mapped) and, above a size threshold, a faiss HNSW graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capr.index.atomic import write_npy
from capr.index.reading import damaged, load_npy

HNSW_M = 32
HNSW_EF_CONSTRUCTION = 200
# recall@10 against exact search of four 250k-passage graphs of static vectors (bench.scale's notes, 200 questions):
# 0.925 at 512, 0.952 at 768, 0.957 at 1024, 0.964 at 1536, at 3.2 / 4.1 / 4.2 / 6.4 ms a graph
HNSW_EF_SEARCH = 1024
# a filter keeping at most this share of a segment's rows is searched exactly at those rows: a graph walk visits
# about efSearch nodes, and under a narrow filter few of them pass (faiss then returns fewer than k)
EXACT_SHARE = 1 / 8


def save_vectors(directory: Path, vectors: np.ndarray, hnsw_threshold: int) -> None:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    write_npy(directory / "vectors.npy", vectors)
    if len(vectors) >= hnsw_threshold > 0:
        import faiss

        index = faiss.IndexHNSWFlat(vectors.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        index.add(vectors)
        faiss.write_index(index, str(directory / "hnsw.faiss"))


class SegmentVectors:
    def __init__(self, vectors: np.ndarray, hnsw=None) -> None:
        self.vectors = vectors
        self.hnsw = hnsw

    @classmethod
    def load(cls, directory: Path) -> "SegmentVectors":
        vecs = load_npy(directory / "vectors.npy", mmap_mode="r")
        hnsw = None
        if (directory / "hnsw.faiss").exists():
            import faiss

            try:
                hnsw = faiss.read_index(str(directory / "hnsw.faiss"), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
            except RuntimeError as e:  # faiss reports a truncated or foreign file this way
                raise damaged(directory / "hnsw.faiss", str(e).strip().splitlines()[-1] if str(e).strip() else "unreadable") from None
            hnsw.hnsw.efSearch = HNSW_EF_SEARCH
        return cls(vecs, hnsw)

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (rows, scores) among ``allowed`` rows: exact by matrix product, or HNSW with an id selector."""
        if not allowed.any() or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        n_allowed = int(np.count_nonzero(allowed))
        if self.hnsw is not None and n_allowed <= EXACT_SHARE * len(allowed):
            rows = np.flatnonzero(allowed)
            return _best(rows, np.asarray(self.vectors[rows]) @ query, k)
        if self.hnsw is None:
            scores = np.where(allowed, np.asarray(self.vectors) @ query, -np.inf)
            return _best(np.arange(len(scores)), scores, min(k, n_allowed))
        import faiss

        bitmap = np.packbits(allowed.astype(np.uint8), bitorder="little")
        sel = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersHNSW(sel=sel, efSearch=max(HNSW_EF_SEARCH, k))
        scores, rows = self.hnsw.search(query[None, :].astype(np.float32), k, params=params)
        ok = rows[0] >= 0
        return rows[0][ok].astype(np.int64), scores[0][ok].astype(np.float32)


def _best(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of ``rows`` by ``scores`` (one per row), in no order."""
    k = min(k, len(rows))
    top = np.argpartition(-scores, k - 1)[:k]
    return rows[top].astype(np.int64), scores[top].astype(np.float32)
