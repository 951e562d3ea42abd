"""Scoring over a generation's segments: BM25 with collection statistics combined from per-segment counts (the
formula itself is capr.text.bm25's), and the top-k selection every exhaustive score array goes through."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

import numpy as np

from capr.index import compiled
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
        # a search asks the same unfiltered top more than once (the question's focus, then its first stage)
        self._recent: OrderedDict[tuple[str, ...], tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self._recent_lock = threading.Lock()
        self._scratch = _Scratch()

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

    def norm_at(self, si: int, local: np.ndarray) -> np.ndarray:
        """:meth:`norm` at segment si's rows ``local`` (the same bits: the formula is elementwise), without computing
        the whole segment's when no search has yet: a few rows' scores in a cold process need only theirs."""
        nrm = self._norms[si]
        if nrm is not None:
            return nrm[local]
        return bm25.length_norm(np.asarray(self.index.segments[si].postings.doc_len)[local], self.avgdl, self.params)

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
                df -= int(np.count_nonzero(seg.postings.find(j, dead)[0]))
        return float(df) if found else None

    def _weighted_ids(self, si: int, tokens: list[str], idf: dict[str, np.float32]) -> list[tuple[int, np.float32]]:
        """Segment si's (term id, idf) of each token it holds, in the tokens' order (a repeated token twice: BM25
        adds it twice)."""
        return [(j, idf[t]) for t in tokens if t in idf and (j := self.term_id(si, t)) is not None]

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

    def scores(self, tokens: list[str], out: np.ndarray | None = None) -> np.ndarray:
        """BM25 of every row (0 for deleted rows), into ``out`` when given (zeros, one per row)."""
        index = self.index
        out = np.zeros(len(index), dtype=np.float32) if out is None else out
        idf = self.idf(list(dict.fromkeys(tokens)))
        if not idf:
            return out
        accumulate = compiled.accumulator()
        for si, seg in enumerate(index.segments):
            ids = self._weighted_ids(si, tokens, idf)
            if not ids:
                continue
            o = out[int(index.offsets[si]):int(index.offsets[si + 1])]
            norm = self.norm(si)
            if accumulate is not None:
                for j, w in ids:
                    first, gaps, tf = seg.postings.stored(j)
                    accumulate(o, first, gaps, tf, norm, w)
                continue
            for j, w in ids:
                docs, tf = seg.postings.postings(j)
                # a term's rows are distinct, so this is ``o[docs] += …`` to the bit, in one pass instead of three
                np.add.at(o, docs, bm25.term_score(w, tf, norm[docs]))
        out[self.dead_rows] = 0.0
        return out

    def dismax(self, base: list[str], phrases: list[list[str]]) -> np.ndarray | None:
        """``scores(base)`` plus, row by row, the largest of ``scores(p)`` over ``phrases`` — the same bits — without
        an array of every row per phrasing: each phrasing's postings are added into one reused zeroed array and only
        the rows they reach are compared and cleared (an aspect has up to ~50 phrasings; at ten million rows a pass
        over every row per phrasing was most of its time). None without the compiled loop (capr.index.compiled)."""
        kernels = compiled.sparse_kernels()
        if kernels is None:
            return None
        touch, settle = kernels
        index = self.index
        out = self.scores(base)  # zeros without a base
        idf = self.idf(list(dict.fromkeys(t for toks in phrases for t in toks)))
        best, scratch = self._scratch.take(len(index)), self._scratch.take(len(index))
        try:
            for toks in phrases:
                for si, seg in enumerate(index.segments):
                    ids = self._weighted_ids(si, toks, idf)
                    if not ids:
                        continue
                    lo, hi = int(index.offsets[si]), int(index.offsets[si + 1])
                    o, norm = scratch[lo:hi], self.norm(si)
                    stored = [seg.postings.stored(j) for j, _ in ids]
                    touched = np.empty(sum(len(tf) for _, _, tf in stored), dtype=np.int64)
                    n = 0
                    for (first, gaps, tf), (_, w) in zip(stored, ids):
                        n = touch(o, first, gaps, tf, norm, w, touched, n)
                    settle(best[lo:hi], o, touched, n)
            best[self.dead_rows] = 0.0
            np.add(out, best, out=out)
        finally:
            self._scratch.give(scratch)
            self._scratch.give(best)
        return out

    def scores_at(self, tokens: list[str], rows: np.ndarray) -> np.ndarray:
        """The scores of ``rows`` (ascending, unique) alone: each term's postings are looked up at those rows
        instead of scattered over every row, with the arithmetic of :meth:`scores` row for row (equal bits)."""
        index = self.index
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros(len(rows), dtype=np.float32)
        idf = self.idf(list(dict.fromkeys(tokens)))
        if not idf or not len(rows):
            return out
        cuts = np.searchsorted(rows, index.offsets)
        for si, seg in enumerate(index.segments):
            lo, hi = int(cuts[si]), int(cuts[si + 1])
            ids = self._weighted_ids(si, tokens, idf)
            if lo == hi or not ids:
                continue
            local = rows[lo:hi] - int(index.offsets[si])
            o = out[lo:hi]
            norm = self.norm_at(si, local)
            for j, w in ids:
                hit, tf = self._at(si, j, local)
                o[hit] += bm25.term_score(w, tf, norm[hit])
        out[~index.live[rows]] = 0.0
        return out

    def _at(self, si: int, j: int, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of a segment's ``local`` rows hold term j (a bool each), and their term frequencies as float32."""
        postings = self.index.segments[si].postings
        hit, pos = postings.find(j, local)
        tf = np.asarray(postings.tf[int(postings.indptr[j]) + pos[hit]], dtype=np.float32)
        return hit, tf

    def term_rows(self, term: str) -> np.ndarray:
        """The live rows holding ``term``, ascending."""
        parts = []
        for si, seg in enumerate(self.index.segments):
            j = self.term_id(si, term)
            if j is not None:
                rows = seg.postings.rows(j)
                parts.append(rows[self.index.seg_live[si][rows]] + int(self.index.offsets[si]))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def top(self, tokens: list[str], k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``top_rows(self.scores(tokens), k, allowed)``, the same rows and scores (see :meth:`_top`); the last few
        unfiltered tops are kept, and a shallower one is cut from a deeper."""
        if allowed is not self.index.live:
            return self._top(tokens, k, allowed)
        key = tuple(tokens)
        with self._recent_lock:
            kept = self._recent.get(key)
        if kept is not None and kept[0] >= k:
            rows, vals = kept[1], kept[2]
            if len(rows) <= k:
                return rows.copy(), vals.copy()  # callers own what they are given
            sel = np.sort(np.lexsort((rows, -vals))[:k])  # the k best, ties to the first rows, in row order
            return rows[sel], vals[sel]
        rows, vals = self._top(tokens, k, allowed)
        with self._recent_lock:
            self._recent[key] = (k, rows.copy(), vals.copy())
            while len(self._recent) > _RECENT_TOPS:
                self._recent.popitem(last=False)
        return rows, vals

    def _top(self, tokens: list[str], k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A filter that keeps few rows is scored at those rows only (a patient's notes, an entity's passages);
        any other is scored over every row. (Pruning by each term's bound, MaxScore, does not pay on notes: the
        rarest words of a sentence-long question alone reach hundreds of thousands of rows of 10 million.)"""
        kept = few_rows(allowed)
        if kept is not None:
            return top_among(kept, self.scores_at(tokens, kept), k)
        scratch = self._scratch.take(len(self.index))
        try:
            return top_rows(self.scores(tokens, scratch), k, allowed)  # copies what it returns
        finally:
            self._scratch.give(scratch)

    @property
    def dead_rows(self) -> np.ndarray:
        """Rows of deleted passages (index-wide), for zeroing their scores."""
        if self._dead_rows is None:
            self._dead_rows = np.flatnonzero(~self.index.live)
        return self._dead_rows


class _Scratch:
    """Score arrays of every row, reused by the tops that need one only while they select: a fresh array of ten
    million rows costs its page faults (about as much as zeroing it four times) on every query."""

    KEPT = 2

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, n: int) -> np.ndarray:
        with self._lock:
            buf = self._free.pop() if self._free else None
        if buf is None or len(buf) != n:
            return np.zeros(n, dtype=np.float32)
        buf.fill(0.0)
        return buf

    def give(self, buf: np.ndarray) -> None:
        with self._lock:
            if len(self._free) < self.KEPT:
                self._free.append(buf)


_RECENT_TOPS = 32
_SAMPLED = 1 << 16  # scores sampled to bound the k-th best of a long score array
FEW_ROWS = 64  # a filter keeping at most 1/64 of the rows is scored at its rows only


def few_rows(allowed: np.ndarray) -> np.ndarray | None:
    """The rows a mask keeps when they are few enough (at most 1/FEW_ROWS) to be scored alone, else None."""
    if int(np.count_nonzero(allowed)) > len(allowed) // FEW_ROWS:
        return None
    return np.flatnonzero(allowed)


def top_among(rows: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """top_rows over the candidate ``rows`` (ascending) with their exact ``scores``."""
    sel, vals = top_rows(scores, k, np.ones(len(rows), dtype=bool))
    return rows[sel], vals


def top_rows(scores: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The k best rows with a positive score among ``allowed`` rows (in row order); of rows tied with the k-th best
    score, the first ones (ties break by insertion order)."""
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    n = len(scores)
    if n > _SAMPLED * 4:
        # the k-th best allowed score of a strided sample is at most the k-th best of all: rows below it cannot
        # be among the k, so one comparison over the rows leaves a few thousand to select from
        step = n // _SAMPLED
        sample = scores[::step][allowed[::step]]
        bound = np.partition(sample, len(sample) - k)[len(sample) - k] if len(sample) >= k else 0.0
        rows = np.flatnonzero(scores >= bound) if bound > 0 else np.flatnonzero(scores > 0)
        rows = rows[allowed[rows]]
        if bound <= 0:
            rows = rows[scores[rows] > 0]
    else:
        rows = np.flatnonzero((scores > 0) & allowed)
    vals = scores[rows]
    if len(rows) > k:
        kth = np.partition(vals, len(vals) - k)[len(vals) - k]  # the k-th best score
        above = np.flatnonzero(vals > kth)
        tied = np.flatnonzero(vals == kth)[: k - len(above)]
        sel = np.sort(np.concatenate([above, tied]))
        rows, vals = rows[sel], vals[sel]
    return rows.astype(np.int64), vals.astype(np.float32)
