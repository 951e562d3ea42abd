"""Several segments as one: merged views (term matrix, columns), segment merges, and the merge policy."""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from capr.index.lexical import TermMatrix
from capr.index.store import Column

if TYPE_CHECKING:
    from capr.index.segment import Segment


def merge_matrices(mats: Sequence[TermMatrix], live: np.ndarray) -> TermMatrix:
    if len(mats) == 1:
        m = mats[0]
        return TermMatrix(m.vocab, m.indptr, m.indices, m.tf, m.doc_len, live)
    vocab: dict[str, int] = {}
    rows, cols, tfs, lens = [], [], [], []
    offset = 0
    for m in mats:
        terms = sorted(m.vocab, key=m.vocab.__getitem__)
        remap = np.fromiter((vocab.setdefault(t, len(vocab)) for t in terms), dtype=np.int64, count=len(terms))
        local_cols = np.repeat(np.arange(len(terms), dtype=np.int64), np.diff(np.asarray(m.indptr)))
        cols.append(remap[local_cols])
        rows.append(np.asarray(m.indices, dtype=np.int64) + offset)
        tfs.append(np.asarray(m.tf))
        lens.append(np.asarray(m.doc_len))
        offset += len(m.doc_len)
    import scipy.sparse as sp  # merged matrices are built for TF-IDF and case search only

    csc = sp.csc_matrix((np.concatenate(tfs), (np.concatenate(rows), np.concatenate(cols))), shape=(offset, len(vocab)))
    csc.sort_indices()
    return TermMatrix(vocab, csc.indptr.astype(np.int64), csc.indices.astype(np.int32), csc.data.astype(np.float32), np.concatenate(lens), live)


def merge_columns(cols: Sequence[Column | None], sizes: Sequence[int]) -> Column:
    if len(cols) == 1 and cols[0] is not None:
        return cols[0]
    values: list = []
    index: dict[str, int] = {}

    def code(v) -> int:
        k = Column._key(v) if v is not None else "\x00missing"
        if k not in index:
            index[k] = len(values)
            values.append(v)
        return index[k]

    parts = []
    for col, n in zip(cols, sizes):
        if col is None:
            parts.append(np.full(n, code(None), dtype=np.int32))
        else:
            remap = np.asarray([code(v) for v in col.values], dtype=np.int32)
            parts.append(remap[np.asarray(col.codes)])
    return Column(values, np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32))


# -- merging segments ----------------------------------------------------------------------------
def _write_live_postings(directory: Path, parts: Sequence[tuple["Segment", np.ndarray]]) -> int:
    """Writes the postings of the live rows of several segments, in order, as one segment's, term by term (one
    term's postings in memory at a time, read from the files, not their maps); returns the rows written. The
    vocabulary is the terms that still have a live posting (a fresh rebuild of the same passages has exactly these
    terms and postings), numbered in order of the first segment holding them live, then of their id there."""
    from capr.index.postings import PostingsFile, PostingsWriter

    files = [PostingsFile(seg.postings) for seg, _ in parts]
    try:
        new_rows, where, order = [], {}, []
        offset = n_postings = tf_max = 0
        for p, ((seg, live), file) in enumerate(zip(parts, files)):
            live = np.asarray(live, dtype=bool)
            counts = np.diff(np.asarray(seg.postings.indptr))
            if live.all():
                has_live = counts > 0
                n_postings += int(counts.sum())
                tf_max = max(tf_max, file.tf_max())
            else:
                has_live = np.zeros(len(counts), dtype=bool)
                for j in np.flatnonzero(counts > 0).tolist():
                    rows, tf = file.read(j)
                    kept = live[rows]
                    if kept.any():
                        has_live[j] = True
                        n_postings += int(np.count_nonzero(kept))
                        tf_max = max(tf_max, int(tf[kept].max()))
            terms = seg.postings.vocab.terms()
            for j in np.flatnonzero(has_live).tolist():
                t = terms[j]
                if t not in where:
                    where[t] = []
                    order.append(t)
                where[t].append((p, j))
            new_rows.append(np.cumsum(live, dtype=np.int64) - 1 + offset)
            offset += int(np.count_nonzero(live))
        writer = PostingsWriter(directory, n_postings, tf_max)
        try:
            for t in order:
                rows_parts, tf_parts = [], []
                for p, j in where.pop(t):
                    rows, tf = files[p].read(j)
                    keep = np.asarray(parts[p][1])[rows]
                    rows_parts.append(new_rows[p][rows[keep]])
                    tf_parts.append(tf[keep])
                writer.add(t, np.concatenate(rows_parts), np.concatenate(tf_parts))
            writer.close(np.concatenate([np.asarray(seg.postings.doc_len)[np.asarray(live, dtype=bool)]
                                         for seg, live in parts]))
        except BaseException:
            writer.abort()
            raise
    finally:
        for file in files:
            file.close()
    return offset


def _merged_columns(parts: Sequence[tuple["Segment", np.ndarray, np.ndarray]]) -> dict[str, Column]:
    """The filter columns of the live rows of ``parts``, as ``Column.build`` over their values row by row would
    make them (values numbered in order of first appearance, each spelled as its first live passage has it),
    computed a segment's distinct values at a time."""
    from capr.index.segment import BUILTIN_FIELDS

    fields = sorted(set().union(*(seg.fields for seg, _, _ in parts)))
    columns = {}
    for f in fields:
        values: list[Any] = []
        index: dict[str, int] = {}
        codes: list[np.ndarray] = []

        def code(v: Any) -> int:
            k = Column._key(v) if v is not None else "\x00missing"
            if k not in index:
                index[k] = len(values)
                values.append(v)
            return index[k]

        for seg, live, _ in parts:
            live = np.asarray(live, dtype=bool)
            n = int(np.count_nonzero(live))
            if f not in seg.fields:
                if n:
                    codes.append(np.full(n, code(None), dtype=np.int32))
                continue
            spelled = seg.spellings(f, live)  # a value spelled as a deleted passage had it is not kept
            own = np.asarray(seg.column(f).codes)[live]
            seen, first = np.unique(own, return_index=True)
            remap = np.zeros(len(spelled), dtype=np.int32)
            for c in seen[np.argsort(first)].tolist():
                remap[c] = code(spelled[c])
            codes.append(remap[own])
        if f in BUILTIN_FIELDS or any(v is not None for v in values):  # a field only deleted passages had is gone
            columns[f] = Column(values, np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32))
    return columns


def merge_segments(root: Path, parts: Sequence[tuple["Segment", np.ndarray, np.ndarray]], hnsw_threshold: int) -> str:
    """Writes one new segment holding the live passages and documents of ``parts`` (segment, live passage mask,
    live document mask), in order, and returns its name. Nothing is re-analysed or re-encoded: documents and
    passages are copied as stored, postings and columns re-indexed, vectors concatenated. Rows keep their order, so
    a generation naming the merged segment in place of its sources gives every search the same result (ties
    included)."""
    from capr.index.docstore import DocStoreWriter
    from capr.index.postings import LEXICAL
    from capr.index.segment import new_segment_dir, publish_segment, write_segment_files

    name, tmp = new_segment_dir(root)
    store = DocStoreWriter(tmp)
    try:
        doc_ids: list[str] = []
        sourced: dict[str, int] = {}
        rows_before = 0
        for seg, live, dlive in parts:
            new_doc = np.cumsum(dlive, dtype=np.int64) - 1 + len(doc_ids)
            kept = np.flatnonzero(live)
            store.copy(seg.store, np.flatnonzero(dlive), kept, new_doc)
            seg.store.release()
            ids = seg.doc_ids.strings()
            doc_ids.extend(ids[i] for i in np.flatnonzero(dlive).tolist())
            new_row = np.cumsum(live, dtype=np.int64) - 1 + rows_before
            sourced.update((pid, int(new_row[r])) for pid, r in seg.sourced.items() if live[r])
            rows_before += len(kept)
        n_rows = _write_live_postings(tmp / LEXICAL, [(seg, live) for seg, live, _ in parts])
        columns = _merged_columns(parts)
        vectors = None
        svs = [seg.vectors() for seg, _, _ in parts]
        if all(sv is not None for sv in svs) and svs:
            vectors = np.concatenate([np.asarray(sv.vectors)[live] for sv, (_, live, _) in zip(svs, parts)])
        sizes = store.close()
        write_segment_files(tmp, sizes, None, n_rows, columns, doc_ids, sourced, vectors, hnsw_threshold)
        return publish_segment(root, tmp, name)
    except BaseException:
        store.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# -- the merge policy ----------------------------------------------------------------------------
@dataclass(frozen=True)
class MergePolicy:
    """Which segments a commit merges: Lucene's log-structured tiers over adjacent segments.

    A segment's level is log_F(max(live passages, ``floor``)) with F = ``merge_factor``. From the oldest
    segment on, a band is a run of segments reaching back from the last one whose level is within one
    level of the run's highest; each full group of F adjacent segments in a band is merged into one, and
    this repeats until no band holds F segments. Only adjacent segments are merged (as Lucene's
    LogMergePolicy; its TieredMergePolicy also merges non-adjacent ones): rows keep their insertion order,
    so merging never changes a search result, not even the order of tied scores.

    Bound: successive bands' highest levels differ by more than one, so there are at most
    ⌈log_F(N / floor)⌉ + 1 bands for N live passages, each with at most F−1 segments after merging:
    at most ``bound(N)`` segments when no segment has ``max_passages`` or more rows. Such large segments are
    never merged with others at commit (`capr compact` merges everything), however many of their rows are
    deleted: deleting a few notes from a full segment must not rewrite it with its neighbours (at 10M passages
    that rewrote the whole index). They split the list into runs, each bounded as above. Any segment with more
    than ``max_deleted`` of its rows deleted is rewritten alone (if nothing else is due), so deleted rows do
    not accumulate.
    """

    merge_factor: int = 5
    floor: int = 1_000
    max_passages: int = 250_000
    max_deleted: float = 0.5

    def __post_init__(self) -> None:
        if self.merge_factor < 2 or self.floor < 1 or self.max_passages < 1 or not 0 < self.max_deleted <= 1:
            raise ValueError("MergePolicy: merge_factor >= 2, floor and max_passages >= 1, 0 < max_deleted <= 1")

    def level(self, live: int) -> float:
        return math.log(max(live, self.floor, 1)) / math.log(self.merge_factor)

    def bound(self, n_live: int) -> int:
        """The most segments of fewer than ``max_passages`` live passages after a commit."""
        bands = max(0, math.ceil(math.log(max(n_live, 1) / self.floor) / math.log(self.merge_factor) - 1e-9)) + 1
        return (self.merge_factor - 1) * bands

    def find_merges(self, live: Sequence[int], rows: Sequence[int]) -> list[tuple[int, int]]:
        """Windows [start, end) of adjacent segments to merge, given each segment's live and total rows."""
        merges: list[tuple[int, int]] = []
        big = [max(n, r) >= self.max_passages for n, r in zip(live, rows)]
        # runs of mergeable segments between segments too large to merge
        start = 0
        while start < len(live):
            if big[start]:
                start += 1
                continue
            end = start
            while end < len(live) and not big[end]:
                end += 1
            merges += self._find_in_run(live, start, end)
            start = end
        merged = {i for a, b in merges for i in range(a, b)}
        for i, (n, r) in enumerate(zip(live, rows)):  # reclaim deletes
            if i not in merged and r and (r - n) / r > self.max_deleted:
                merges.append((i, i + 1))
        return sorted(merges)

    def _find_in_run(self, live: Sequence[int], lo: int, hi: int) -> list[tuple[int, int]]:
        F = self.merge_factor
        levels = [self.level(n) for n in live]
        floor_level = self.level(self.floor)
        out: list[tuple[int, int]] = []
        start = lo
        while start < hi:
            top = max(levels[start:hi])
            bottom = top - 1.0 if top > floor_level + 1e-9 else -math.inf
            upto = hi - 1
            while upto >= start and levels[upto] < bottom:
                upto -= 1
            end = start + F
            while end <= upto + 1:
                out.append((start, end))
                start = end
                end = start + F
            start = upto + 1
        return out
