"""A segment's postings on disk, compact and memory-mapped (``lexical/``):

    terms.bin, terms.offsets.npy   the vocabulary, UTF-8, in term-id order (first seen)
    terms.sorted.npy               term ids in the byte order of their terms (a term is found by bisection)
    indptr.npy                     int64: term j's postings are [indptr[j], indptr[j+1])
    first.npy, width.npy, at.npy   per term: its first row, the bytes of each following row gap (1, 2 or 4), and
                                   where its gaps start in rows.bin
    rows.bin                       row gaps (delta-coded rows), each term's in the smallest integer type that holds them
    tf.npy                         term frequencies (uint8 when every one fits, else uint16 or uint32)
    doc_len.npy                    float32 tokens per row

Nothing is read to open it but the small per-term arrays' headers; a query decodes the postings of its terms only.
Decoded postings are the same rows and frequencies as the in-memory :class:`TermMatrix` they were written from, so
scores are unchanged to the last bit."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from capr.index.atomic import write_bytes, write_npy
from capr.index.lexical import TermMatrix
from capr.index.reading import load_npy, reading
from capr.index.strings import StringTable, TermTable, write_strings

_WIDTH_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}
LEXICAL = "lexical"


def _smallest_uint(maximum: int) -> type:
    for t in (np.uint8, np.uint16, np.uint32):
        if maximum <= np.iinfo(t).max:
            return t
    return np.uint64


def write_postings(directory: Path, matrix: TermMatrix) -> None:
    """Writes ``matrix`` (CSC, rows sorted within each term) in the compact layout of this module."""
    directory.mkdir(parents=True, exist_ok=True)
    write_strings(directory, "terms", sorted(matrix.vocab, key=matrix.vocab.__getitem__))
    indptr = np.asarray(matrix.indptr, dtype=np.int64)
    rows = np.asarray(matrix.indices, dtype=np.int64)
    counts = np.diff(indptr)
    has = counts > 0
    first = np.zeros(len(counts), dtype=np.int64)
    first[has] = rows[indptr[:-1][has]]
    gaps = np.diff(rows, prepend=0)
    head = np.zeros(len(rows), dtype=bool)
    head[indptr[:-1][has]] = True
    gaps[head] = 0  # a term's first row is in first.npy, not a gap
    biggest = np.zeros(len(counts), dtype=np.int64)
    if len(rows):
        biggest[has] = np.maximum.reduceat(gaps, indptr[:-1][has])
    width = np.where(biggest < 1 << 8, 1, np.where(biggest < 1 << 16, 2, 4)).astype(np.uint8)
    at = np.zeros(len(counts), dtype=np.int64)
    parts: list[bytes] = []
    pos = 0
    n_gaps = np.maximum(counts - 1, 0)
    for w, t in _WIDTH_TYPES.items():
        mine = width == w
        if not mine.any():
            continue
        base = -(-pos // 8) * 8  # each class starts 8-byte aligned, so every term's gaps are aligned
        parts.append(b"\0" * (base - pos))
        sizes = n_gaps * mine
        at[mine] = base + w * (np.cumsum(sizes) - sizes)[mine]
        data = gaps[np.repeat(mine, counts) & ~head].astype(t).tobytes()
        parts.append(data)
        pos = base + len(data)
    write_bytes(directory / "rows.bin", b"".join(parts), atomic=False)
    for name, arr in (("indptr", indptr), ("first", first.astype(np.int64)), ("width", width), ("at", at),
                      ("doc_len", np.asarray(matrix.doc_len, dtype=np.float32))):
        write_npy(directory / f"{name}.npy", arr, atomic=False)
    tf = np.asarray(matrix.tf)
    write_npy(directory / "tf.npy", tf.astype(_smallest_uint(int(tf.max()) if len(tf) else 0)), atomic=False)


class Postings:
    """A segment's compact postings (see the module's layout), memory-mapped."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.vocab = TermTable(StringTable(directory, "terms"))
        arrays = {n: load_npy(directory / f"{n}.npy", mmap_mode="r") for n in ("indptr", "first", "width", "at", "tf",
                                                                               "doc_len")}
        self.indptr, self.first, self.width, self.at = arrays["indptr"], arrays["first"], arrays["width"], arrays["at"]
        self.tf, self.doc_len = arrays["tf"], arrays["doc_len"]
        with reading(directory / "rows.bin"):
            size = (directory / "rows.bin").stat().st_size
        self._rows = np.memmap(directory / "rows.bin", dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)

    def count(self, j: int) -> int:
        """Postings of term ``j`` (deleted rows included)."""
        return int(self.indptr[j + 1] - self.indptr[j])

    def rows(self, j: int) -> np.ndarray:
        """The rows holding term ``j``, ascending (int64)."""
        lo, hi = int(self.indptr[j]), int(self.indptr[j + 1])
        n = hi - lo
        out = np.empty(n, dtype=np.int64)
        if n:
            out[0] = self.first[j]
            if n > 1:
                w = int(self.width[j])
                at = int(self.at[j])
                gaps = self._rows[at:at + w * (n - 1)].view(_WIDTH_TYPES[w])
                np.cumsum(gaps, dtype=np.int64, out=out[1:])
                out[1:] += out[0]
        return out

    def postings(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, term frequencies as float32) of term ``j``."""
        lo, hi = int(self.indptr[j]), int(self.indptr[j + 1])
        return self.rows(j), np.asarray(self.tf[lo:hi], dtype=np.float32)

    def all_rows(self) -> np.ndarray:
        """Every posting's row, term after term (the CSC ``indices`` of the whole matrix)."""
        indptr = np.asarray(self.indptr)
        counts = np.diff(indptr)
        has = counts > 0
        heads = indptr[:-1][has]
        gaps = np.zeros(int(indptr[-1]), dtype=np.int64)
        is_head = np.zeros(len(gaps), dtype=bool)
        is_head[heads] = True
        widths = np.asarray(self.width)
        per_posting = np.repeat(widths, counts)
        for w, t in _WIDTH_TYPES.items():
            sel = (per_posting == w) & ~is_head
            k = int(np.count_nonzero(sel))
            if not k:
                continue
            lo = int(np.asarray(self.at)[np.flatnonzero((widths == w) & (counts > 1))[0]])  # the class's first gaps
            gaps[sel] = self._rows[lo:lo + w * k].view(t)
        gaps[heads] = np.asarray(self.first)[has]
        running = np.cumsum(gaps)
        before = np.zeros(len(counts), dtype=np.int64)
        before[has] = running[heads] - gaps[heads]  # the sum of every earlier term's entries
        return running - np.repeat(before, counts)

    @cached_property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    def to_matrix(self) -> TermMatrix:
        """The whole segment as an in-memory TermMatrix (merges, TF-IDF over merged segments, case search)."""
        return TermMatrix(self.vocab.to_dict(), np.asarray(self.indptr, dtype=np.int64),
                          self.all_rows().astype(np.int32), np.asarray(self.tf, dtype=np.float32),
                          np.asarray(self.doc_len, dtype=np.float32))
