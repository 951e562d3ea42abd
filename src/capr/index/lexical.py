"""Lexical scoring: BM25 (Lucene variant) and TF-IDF over one term-frequency matrix.

The matrix stores raw term frequencies, not precomputed BM25 weights (as bm25s
does). Collection statistics — N, document frequencies, average length — are
derived from it, so adding or deleting passages keeps scores identical to a
fresh rebuild without re-analysing any text. Scores equal bm25s' ``lucene``
method (tested in tests/test_lexical.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from capr.index.atomic import write_json, write_npy
from capr.index.reading import load_npy, read_json
from capr.text import bm25
from capr.text.bm25 import BM25Params

if TYPE_CHECKING:
    import scipy.sparse as sp


class TermMatrix:
    """Term → postings (doc row, tf) in CSC layout; rows are passages."""

    def __init__(
        self,
        vocab: dict[str, int],
        indptr: np.ndarray,
        indices: np.ndarray,
        tf: np.ndarray,
        doc_len: np.ndarray,
        live: np.ndarray | None = None,
    ) -> None:
        self.vocab = vocab
        self.indptr = indptr
        self.indices = indices
        self.tf = tf
        self.doc_len = doc_len
        self.live = live if live is not None else np.ones(len(doc_len), dtype=bool)
        self._derived: dict[str, np.ndarray] = {}

    # -- construction -------------------------------------------------------
    @classmethod
    def from_token_lists(cls, token_lists: Iterable[Sequence[str]]) -> "TermMatrix":
        vocab: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        lens: list[int] = []
        for r, toks in enumerate(token_lists):
            cols.extend(vocab.setdefault(t, len(vocab)) for t in toks)
            rows.extend([r] * len(toks))
            lens.append(len(toks))
        return cls.from_coo(np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64), np.asarray(lens, dtype=np.float32), vocab)

    @classmethod
    def from_coo(cls, rows: np.ndarray, cols: np.ndarray, doc_len: np.ndarray, vocab: dict[str, int]) -> "TermMatrix":
        """From one (row, term id) pair per token occurrence; duplicates are summed into tf."""
        import scipy.sparse as sp  # only when a matrix is built: a search never needs scipy

        m = sp.csc_matrix(
            (np.ones(len(rows), dtype=np.float32), (rows.astype(np.int64), cols.astype(np.int64))),
            shape=(len(doc_len), len(vocab)),
        )
        m.sum_duplicates()
        return cls(vocab, m.indptr.astype(np.int64), m.indices.astype(np.int32), m.data.astype(np.float32), np.asarray(doc_len, dtype=np.float32))

    @classmethod
    def from_rows(cls, cols: np.ndarray, tf: np.ndarray, nnz: np.ndarray, doc_len: np.ndarray, vocab: dict[str, int]) -> "TermMatrix":
        """From per-row (term id, tf) pairs, ``nnz[r]`` of them for row r, each term at most once per row.
        Built as CSR over the given arrays (no copies) and converted once: about half the peak memory
        of :meth:`from_coo` on a large segment."""
        # int32 offsets while they fit: scipy would otherwise upcast the (large) term-id array to int64
        indptr = np.zeros(len(nnz) + 1, dtype=np.int32 if int(np.sum(nnz, dtype=np.int64)) < 2**31 - 1 else np.int64)
        np.cumsum(nnz, out=indptr[1:])
        import scipy.sparse as sp

        m = sp.csr_matrix((tf, cols, indptr), shape=(len(doc_len), len(vocab))).tocsc()
        m.sort_indices()
        return cls(vocab, m.indptr.astype(np.int64), m.indices.astype(np.int32, copy=False), m.data.astype(np.float32, copy=False),
                   np.asarray(doc_len, dtype=np.float32))

    def to_csc(self) -> "sp.csc_matrix":
        import scipy.sparse as sp

        return sp.csc_matrix((self.tf, self.indices, self.indptr), shape=(len(self.doc_len), len(self.vocab)))

    # -- persistence -------------------------------------------------------
    def save(self, directory: Path, atomic: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / "vocab.json", self.vocab, atomic)
        write_npy(directory / "indptr.npy", self.indptr, atomic)
        write_npy(directory / "indices.npy", self.indices, atomic)
        write_npy(directory / "tf.npy", self.tf, atomic)
        write_npy(directory / "doc_len.npy", self.doc_len, atomic)
        write_npy(directory / "live.npy", self.live, atomic)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "TermMatrix":
        mode = "r" if mmap else None
        vocab = read_json(directory / "vocab.json")
        arrays = {n: load_npy(directory / f"{n}.npy", mmap_mode=mode) for n in ("indptr", "indices", "tf", "doc_len")}
        live = np.array(load_npy(directory / "live.npy"))  # small and mutable: kept in memory
        return cls(vocab, arrays["indptr"], arrays["indices"], arrays["tf"], arrays["doc_len"], live)

    # -- statistics ---------------------------------------------------------
    @property
    def n_live(self) -> int:
        return int(self.live.sum())

    def document_frequency(self) -> np.ndarray:
        """Live passages per term: a running count of live postings, differenced at column bounds."""
        if "df" not in self._derived:
            running = np.concatenate([[0], np.cumsum(self.live[self.indices], dtype=np.int64)])
            self._derived["df"] = (running[self.indptr[1:]] - running[self.indptr[:-1]]).astype(np.float64)
        return self._derived["df"]

    def avg_doc_len(self) -> float:
        n = self.n_live
        return float(self.doc_len[self.live].sum() / n) if n else 0.0

    def term_ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.vocab[t] for t in tokens if t in self.vocab]


class BM25Scorer:
    """Lucene BM25: idf = ln(1 + (N - df + .5)/(df + .5)), tf' = tf / (tf + k1·(1 - b + b·dl/avgdl))."""

    def __init__(self, matrix: TermMatrix, params: BM25Params | None = None) -> None:
        self.m = matrix
        self.params = params or BM25Params()
        n = matrix.n_live
        df = matrix.document_frequency()
        self.idf = bm25.idf(n, df)
        self.norm = bm25.length_norm(np.asarray(matrix.doc_len), matrix.avg_doc_len() or 1.0, self.params)

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(self.m.doc_len), dtype=np.float32)
        for t in self.m.term_ids(tokens):
            lo, hi = self.m.indptr[t], self.m.indptr[t + 1]
            docs = self.m.indices[lo:hi]
            tf = self.m.tf[lo:hi]
            out[docs] += bm25.term_score(self.idf[t], tf, self.norm[docs])
        out[~self.m.live] = 0.0
        return out


class TfidfScorer:
    """Cosine similarity of sublinear-tf × smoothed-idf vectors (scikit-learn's TfidfVectorizer defaults)."""

    def __init__(self, matrix: TermMatrix) -> None:
        self.m = matrix
        n = matrix.n_live
        df = matrix.document_frequency()
        self.idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32)
        weights = (1.0 + np.log(np.asarray(matrix.tf, dtype=np.float32))) * np.repeat(self.idf, np.diff(matrix.indptr))
        sq = np.bincount(matrix.indices, weights=weights.astype(np.float64) ** 2, minlength=len(matrix.doc_len))
        self.doc_norm = np.sqrt(sq).astype(np.float32)
        self.doc_norm[self.doc_norm == 0] = 1.0

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(self.m.doc_len), dtype=np.float32)
        ids = self.m.term_ids(tokens)
        if not ids:
            return out
        uniq, counts = np.unique(np.asarray(ids), return_counts=True)
        qw = (1.0 + np.log(counts)) * self.idf[uniq]
        qw = qw / np.linalg.norm(qw)
        for t, w in zip(uniq, qw):
            lo, hi = self.m.indptr[t], self.m.indptr[t + 1]
            docs = self.m.indices[lo:hi]
            out[docs] += w * self.idf[t] * (1.0 + np.log(self.m.tf[lo:hi]))
        out /= self.doc_norm
        out[~self.m.live] = 0.0
        return out

