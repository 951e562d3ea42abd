"""Scoring over a generation's segments: BM25 with collection statistics combined from per-segment counts (the
formula itself is capr.text.bm25's), and the top-k selection every exhaustive score array goes through."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from capr.index.segment import Segment
from capr.text import bm25
from capr.text.bm25 import BM25Params


class Generation(Protocol):
    """What segmented scoring reads of a loaded generation (capr.index.index.Index)."""

    segments: list[Segment]
    seg_live: list[np.ndarray]
    live: np.ndarray
    offsets: np.ndarray
    bm25_params: BM25Params

    def __len__(self) -> int: ...


class SegmentedBM25:
    """Lucene BM25 over a generation's segments. N and the average length are summed from per-segment
    totals minus deleted rows; a term's document frequency is, per segment, its posting count minus its
    postings on deleted rows (found by bisection among the few deleted rows) — both proportional to what
    was deleted, so a commit changes them without a pass over the index. Score arithmetic is the single
    matrix's, term by term in query order, so scores equal BM25 over the merged matrix."""

    def __init__(self, index: Generation) -> None:
        self.index = index
        self.params = index.bm25_params
        self.dead = [np.flatnonzero(~live) for live in index.seg_live]
        self.n = int(sum(len(live) - len(d) for live, d in zip(index.seg_live, self.dead)))
        total = 0.0
        for seg, dead in zip(index.segments, self.dead):
            total += seg.total_len - (float(np.asarray(seg.postings.doc_len)[dead].astype(np.float64).sum()) if len(dead) else 0.0)
        self.avgdl = (total / self.n if self.n else 0.0) or 1.0
        self._norms: list[np.ndarray | None] = [None] * len(index.segments)
        self._idf: dict[str, np.float32] = {}
        self._dead_rows: np.ndarray | None = None
        self._term_ids: list[dict[str, int | None]] = [{} for _ in index.segments]

    def term_id(self, si: int, term: str) -> int | None:
        """``term``'s id in segment si (None when it lacks it), looked up once per generation."""
        known = self._term_ids[si]
        if term not in known:
            known[term] = self.index.segments[si].postings.vocab.get(term)
        return known[term]

    def norm(self, si: int) -> np.ndarray:
        """k1·(1 − b + b·dl/avgdl) for segment si's rows: per generation (avgdl moves with every write)."""
        nrm = self._norms[si]
        if nrm is None:
            dl = np.asarray(self.index.segments[si].postings.doc_len)
            nrm = self._norms[si] = bm25.length_norm(dl, self.avgdl, self.params)
        return nrm

    def df(self, term: str) -> float | None:
        """Live passages holding ``term`` (None when no segment has it)."""
        found, df = False, 0
        for si, (seg, dead) in enumerate(zip(self.index.segments, self.dead)):
            j = self.term_id(si, term)
            if j is None:
                continue
            found = True
            df += seg.postings.count(j)
            if len(dead):
                post = seg.postings.rows(j)
                pos = np.searchsorted(post, dead)
                ok = pos < len(post)
                df -= int(np.count_nonzero(post[pos[ok]] == dead[ok]))
        return float(df) if found else None

    def idf(self, terms: list[str]) -> dict[str, np.float32]:
        """idf of each known term, float32 as the single-matrix scorer has it."""
        todo = [t for t in terms if t not in self._idf]
        if todo:
            known = [(t, d) for t in todo if (d := self.df(t)) is not None]
            if known:
                df = np.asarray([d for _, d in known], dtype=np.float64)
                vals = bm25.idf(self.n, df)
                for (t, _), v in zip(known, vals):
                    self._idf[t] = v
        return {t: self._idf[t] for t in terms if t in self._idf}

    def scores(self, tokens: list[str]) -> np.ndarray:
        index = self.index
        out = np.zeros(len(index), dtype=np.float32)
        idf = self.idf(list(dict.fromkeys(tokens)))
        if not idf:
            return out
        for si, seg in enumerate(index.segments):
            ids = [(j, idf[t]) for t in tokens if t in idf and (j := self.term_id(si, t)) is not None]
            if not ids:
                continue
            o = out[int(index.offsets[si]):int(index.offsets[si + 1])]
            norm = self.norm(si)
            for j, w in ids:
                docs, tf = seg.postings.postings(j)
                o[docs] += bm25.term_score(w, tf, norm[docs])
        out[self.dead_rows] = 0.0
        return out

    @property
    def dead_rows(self) -> np.ndarray:
        """Rows of deleted passages (index-wide), for zeroing their scores."""
        if self._dead_rows is None:
            self._dead_rows = np.flatnonzero(~self.index.live)
        return self._dead_rows


def top_rows(scores: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The k best rows with a positive score among ``allowed`` rows (in row order); of rows tied with the k-th best
    score, the first ones (ties break by insertion order)."""
    rows = np.flatnonzero((scores > 0) & allowed)
    vals = scores[rows]
    if k <= 0:
        return rows[:0].astype(np.int64), vals[:0].astype(np.float32)
    if len(rows) > 8 * k + 1024:
        # Most queries give a positive score to a large part of the index (a common term): the k-th best score
        # of a strided sample is at most the k-th best of all, so rows below it can be dropped before selecting.
        sample = vals[:: len(vals) // 1024]
        if len(sample) >= k:
            bound = np.partition(sample, len(sample) - k)[len(sample) - k]
            keep = vals >= bound
            rows, vals = rows[keep], vals[keep]
    if len(rows) > k:
        kth = np.partition(vals, len(vals) - k)[len(vals) - k]  # the k-th best score
        above = np.flatnonzero(vals > kth)
        tied = np.flatnonzero(vals == kth)[: k - len(above)]
        sel = np.sort(np.concatenate([above, tied]))
        rows, vals = rows[sel], vals[sel]
    return rows.astype(np.int64), vals.astype(np.float32)
