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

import itertools
import os
import shutil
import threading
import weakref
from collections import OrderedDict
from functools import cached_property
from pathlib import Path

import numpy as np

from capr.index.atomic import write_bytes, write_npy
from capr.index.lexical import TermMatrix
from capr.index.reading import load_npy, reading
from capr.index.strings import StringTable, TermTable, write_strings

_WIDTH_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}
SKIP = 128  # postings per block when a few rows are looked up in a long list (Postings.find)
LEXICAL = "lexical"


def _rows_of(first: int, gaps: np.ndarray) -> np.ndarray:
    """A posting list's rows (int64) from its first row and the gaps after it."""
    out = np.empty(len(gaps) + 1, dtype=np.int64)
    out[0] = first
    np.cumsum(gaps, dtype=np.int64, out=out[1:])
    out[1:] += first
    return out


class DecodedRows:
    """The most recently used decoded postings of every open segment, up to a budget of bytes shared by the
    process (``CAPR_DECODED_MB``, default 256; 0 keeps none). A common word's rows are decoded once, not once per
    phrasing and per query; segments are immutable, so what is kept never goes stale."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.used = 0
        self._kept: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, owner: int, j: int) -> np.ndarray | None:
        key = (owner, j)
        with self._lock:
            rows = self._kept.get(key)
            if rows is not None:
                self._kept.move_to_end(key)
            return rows

    def put(self, owner: int, j: int, rows: np.ndarray) -> None:
        if rows.nbytes > self.budget // 4:  # one list never takes most of the budget
            return
        rows.setflags(write=False)
        with self._lock:
            key = (owner, j)
            if key in self._kept:
                return
            self._kept[key] = rows
            self.used += rows.nbytes
            while self.used > self.budget:
                _, old = self._kept.popitem(last=False)
                self.used -= old.nbytes

    def forget(self, owner: int) -> None:
        """Drops the rows of a segment no longer open."""
        with self._lock:
            for key in [k for k in self._kept if k[0] == owner]:
                self.used -= self._kept.pop(key).nbytes


_OWNERS = itertools.count()
DECODED = DecodedRows(int(float(os.environ.get("CAPR_DECODED_MB", "256")) * (1 << 20)))


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


class PostingsWriter:
    """Writes the layout of :func:`write_postings` one term at a time, in term-id order, holding no more than one
    term's postings in memory (a merge of millions of passages): each width class's gaps go to a temporary file,
    joined in place by :meth:`close`; the frequencies, whose number and type the caller knows, go straight to
    tf.npy. The files equal write_postings' for the same postings, byte for byte."""

    def __init__(self, directory: Path, n_postings: int, tf_max: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.n_postings = n_postings
        self.tf_type = _smallest_uint(tf_max)
        self.terms: list[str] = []
        self.counts: list[int] = []
        self.first: list[int] = []
        self.width: list[int] = []
        self.at: list[int] = []  # within the term's width class, until close
        self._gaps = {w: open(directory / f".rows.{w}.tmp", "wb") for w in _WIDTH_TYPES}
        self._tf = open(directory / "tf.npy", "wb")
        np.lib.format.write_array_header_1_0(self._tf, {"descr": np.lib.format.dtype_to_descr(np.dtype(self.tf_type)),
                                                        "fortran_order": False, "shape": (n_postings,)})

    def add(self, term: str, rows: np.ndarray, tf: np.ndarray) -> None:
        """Term ``term``'s postings: ascending rows (at least one) and their frequencies."""
        rows = np.asarray(rows, dtype=np.int64)
        gaps = np.diff(rows)
        biggest = int(gaps.max()) if len(gaps) else 0
        w = 1 if biggest < 1 << 8 else 2 if biggest < 1 << 16 else 4
        fh = self._gaps[w]
        self.terms.append(term)
        self.counts.append(len(rows))
        self.first.append(int(rows[0]))
        self.width.append(w)
        self.at.append(fh.tell())
        fh.write(gaps.astype(_WIDTH_TYPES[w]).tobytes())
        self._tf.write(np.asarray(tf).astype(self.tf_type).tobytes())

    def close(self, doc_len: np.ndarray) -> None:
        """Joins the gaps into rows.bin, and writes the per-term arrays and ``doc_len``."""
        d = self.directory
        for fh in self._gaps.values():
            fh.close()
        written = sum(self.counts)
        if written != self.n_postings:
            raise ValueError(f"{d}: {written} postings written, {self.n_postings} announced")
        self._tf.flush()
        os.fsync(self._tf.fileno())
        self._tf.close()
        width = np.asarray(self.width, dtype=np.uint8)
        at = np.asarray(self.at, dtype=np.int64)
        pos = 0
        with open(d / "rows.bin", "wb") as out:
            for w in _WIDTH_TYPES:
                part = d / f".rows.{w}.tmp"
                if (width == w).any():
                    base = -(-pos // 8) * 8  # each class starts 8-byte aligned, as write_postings lays it out
                    out.write(b"\0" * (base - pos))
                    at[width == w] += base
                    with open(part, "rb") as fh:
                        shutil.copyfileobj(fh, out, 1 << 22)
                    pos = out.tell()
                part.unlink()
            out.flush()
            os.fsync(out.fileno())
        write_strings(d, "terms", self.terms)
        indptr = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=indptr[1:])
        for name, arr in (("indptr", indptr), ("first", np.asarray(self.first, dtype=np.int64)), ("width", width),
                          ("at", at), ("doc_len", np.asarray(doc_len, dtype=np.float32))):
            write_npy(d / f"{name}.npy", arr, atomic=False)

    def abort(self) -> None:
        for fh in (*self._gaps.values(), self._tf):
            fh.close()


class PostingsFile:
    """A segment's postings read with plain file reads, not through its memory maps: a merge reads every list once,
    and mapped pages would stay resident (counted in its memory) until it ends."""

    def __init__(self, postings: "Postings") -> None:
        self.postings = postings
        d = postings.directory
        self._rows = open(d / "rows.bin", "rb")
        self._tf = open(d / "tf.npy", "rb")
        version = np.lib.format.read_magic(self._tf)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = header(self._tf)
        self.tf_type = np.dtype(dtype)
        self._tf_at = self._tf.tell()

    def read(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows as int64, term frequencies as stored) of term ``j``."""
        p = self.postings
        lo, hi = int(p.indptr[j]), int(p.indptr[j + 1])
        n = hi - lo
        w = int(p.width[j])
        gaps = np.frombuffer(os.pread(self._rows.fileno(), w * (n - 1), int(p.at[j])) if n > 1 else b"",
                             dtype=_WIDTH_TYPES[w])
        rows = _rows_of(int(p.first[j]), gaps) if n else np.zeros(0, dtype=np.int64)
        size = self.tf_type.itemsize
        tf = np.frombuffer(os.pread(self._tf.fileno(), size * n, self._tf_at + size * lo), dtype=self.tf_type)
        return rows, tf

    def tf_max(self) -> int:
        """The largest term frequency of any posting, read a few megabytes at a time."""
        top, size, at = 0, self.tf_type.itemsize, self._tf_at
        total = int(self.postings.indptr[-1])
        for lo in range(0, total, 1 << 22):
            n = min(1 << 22, total - lo)
            chunk = np.frombuffer(os.pread(self._tf.fileno(), size * n, at + size * lo), dtype=self.tf_type)
            top = max(top, int(chunk.max()) if len(chunk) else 0)
        return top

    def close(self) -> None:
        self._rows.close()
        self._tf.close()


class Postings:
    """A segment's compact postings (see the module's layout), memory-mapped."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.vocab = TermTable(StringTable(directory, "terms"))
        # plain views of the maps: a memmap's Python-level indexing would cost more than a query's arithmetic
        arrays = {n: np.asarray(load_npy(directory / f"{n}.npy", mmap_mode="r"))
                  for n in ("indptr", "first", "width", "at", "tf", "doc_len")}
        self.indptr, self.first, self.width, self.at = arrays["indptr"], arrays["first"], arrays["width"], arrays["at"]
        self.tf, self.doc_len = arrays["tf"], arrays["doc_len"]
        with reading(directory / "rows.bin"):
            size = (directory / "rows.bin").stat().st_size
        self._rows = np.asarray(np.memmap(directory / "rows.bin", dtype=np.uint8, mode="r")) if size else np.zeros(0, np.uint8)
        self._skip_rows: dict[int, np.ndarray] = {}
        self._owner = next(_OWNERS)  # never reused, unlike id(): a new segment cannot read an old one's rows
        weakref.finalize(self, DECODED.forget, self._owner)

    def count(self, j: int) -> int:
        """Postings of term ``j`` (deleted rows included)."""
        return int(self.indptr[j + 1] - self.indptr[j])

    def rows(self, j: int) -> np.ndarray:
        """The rows holding term ``j``, ascending (int64, read-only: kept in :data:`DECODED`)."""
        kept = DECODED.get(self._owner, j)
        if kept is not None:
            return kept
        out = self._decode(j)
        DECODED.put(self._owner, j, out)
        return out

    def _decode(self, j: int) -> np.ndarray:
        n = int(self.indptr[j + 1] - self.indptr[j])
        if not n:
            return np.zeros(0, dtype=np.int64)
        w, at = int(self.width[j]), int(self.at[j])
        return _rows_of(int(self.first[j]), self._rows[at:at + w * (n - 1)].view(_WIDTH_TYPES[w]))

    def find(self, j: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of ``keys`` (ascending rows) hold term j (a bool each), and where among its postings they are.
        A long list is not decoded whole for a few keys: its rows are kept every ``SKIP`` postings, and only the
        blocks that may hold a key are decoded."""
        n = self.count(j)
        if n <= SKIP or len(keys) * SKIP * 4 > n:
            held = self.rows(j)
            pos = np.searchsorted(held, keys)
            pos[pos == n] = 0
            return (held[pos] == keys) if n else np.zeros(len(keys), dtype=bool), pos
        skips = self._skips(j)
        blocks = np.unique(np.searchsorted(skips, keys, "right") - 1)
        blocks = blocks[blocks >= 0]
        starts = blocks * SKIP  # position of each block's first posting
        offsets = np.arange(SKIP - 1)
        idx = starts[:, None] + offsets  # the gaps before each block's 2nd..SKIP-th postings
        valid = idx < n - 1
        w = int(self.width[j])
        gaps_all = self._rows[int(self.at[j]):int(self.at[j]) + w * (n - 1)].view(_WIDTH_TYPES[w])
        gaps = np.where(valid, gaps_all[np.minimum(idx, n - 2)], 0).astype(np.int64)
        block_rows = np.concatenate([skips[blocks][:, None], skips[blocks][:, None] + np.cumsum(gaps, axis=1)], axis=1)
        block_pos = starts[:, None] + np.arange(SKIP)
        kept = block_pos < n
        flat_rows, flat_pos = block_rows[kept], block_pos[kept]  # ascending: blocks ascend, rows within them
        if not len(flat_rows):
            return np.zeros(len(keys), dtype=bool), np.zeros(len(keys), dtype=np.int64)
        at = np.searchsorted(flat_rows, keys)
        at[at == len(flat_rows)] = 0
        return flat_rows[at] == keys, flat_pos[at]

    def _skips(self, j: int) -> np.ndarray:
        """Term j's row at every SKIP-th posting (decoded once, kept: 1/SKIP of the list)."""
        got = self._skip_rows.get(j)
        if got is None:
            got = self._skip_rows[j] = np.ascontiguousarray(self.rows(j)[::SKIP])
        return got

    def stored(self, j: int) -> tuple[int, np.ndarray, np.ndarray]:
        """Term ``j``'s postings as stored, nothing decoded: its first row, the gaps after it and its term
        frequencies (read-only views of the maps, in their stored widths)."""
        lo, hi = int(self.indptr[j]), int(self.indptr[j + 1])
        n = hi - lo
        if not n:
            return 0, self._rows[:0], self.tf[:0]
        w, at = int(self.width[j]), int(self.at[j])
        return int(self.first[j]), self._rows[at:at + w * (n - 1)].view(_WIDTH_TYPES[w]), self.tf[lo:hi]

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
