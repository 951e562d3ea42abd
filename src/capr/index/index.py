"""A loaded generation of an index directory (:class:`Index`): a consistent, read-only snapshot of its segments —
passages, documents, term matrices, filter columns and dense vectors — with the storage and scoring primitives the
Store front (capr.store.embedded) is written over."""

from __future__ import annotations

import os
import time
import weakref
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from capr.errors import IndexError_, QueryError
from capr.filters import check_range_bound_in_parts, column_mask, is_range
from capr.index import directory as dirs
from capr.index.lexical import TermMatrix, TfidfScorer
from capr.index.merge import merge_columns, merge_matrices
from capr.index.meta import IndexMeta
from capr.index.reading import DamagedIndexError, damaged, load_npy
from capr.index.scoring import SegmentedBM25, top_rows
from capr.index.segment import SEGMENTS, Segment
from capr.index.store import Column
from capr.records import LEXICAL, Document, Passage, Retriever
from capr.text.analyzer import Analyzer


def encoder_of(dense: dict[str, Any] | None):
    """The encoder an index's dense payload names (None for a lexical index)."""
    if not dense:
        return None
    from capr.models.encoder import Encoder, EncoderConfig

    return Encoder(EncoderConfig.from_dict(dense["encoder"]))


_UNLOADED = object()
_OPEN_ATTEMPTS = 100  # generations a reader may see come and go while opening one (each is a full commit)


def _nothing() -> None:
    pass


def _live_terms(seg: Segment, live: np.ndarray) -> list[str] | int:
    """The terms of segment ``seg`` with at least one live posting (``live``: its mask); just their number when
    every row is live (then every term of the segment has one). A term with more postings than the segment has
    deleted rows has a live one; only the rarer terms' postings are read."""
    vocab = seg.postings.vocab
    if live.all():
        return len(vocab)
    counts = np.diff(np.asarray(seg.postings.indptr))
    has_live = counts > int(np.count_nonzero(~live))
    for j in np.flatnonzero((counts > 0) & ~has_live).tolist():
        has_live[j] = bool(live[seg.postings._decode(j)].any())
    terms = vocab.terms()
    return [terms[i] for i in np.flatnonzero(has_live).tolist()]


class _MergedColumns(Mapping):
    """Filter columns over all segments, each merged on first access (keys: the generation's fields)."""

    def __init__(self, segments: list[Segment], sizes: list[int], fields: list[str]) -> None:
        self._segments = segments
        self._sizes = sizes
        self._fields = list(fields)
        self._merged: dict[str, Column] = {}

    def __getitem__(self, field: str) -> Column:
        if field not in self._merged:
            if field not in self._fields:
                raise KeyError(field)
            self._merged[field] = merge_columns(
                [s.column(field) if field in s.fields else None for s in self._segments], self._sizes)
        return self._merged[field]

    def __iter__(self):
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def _open_segment(path: Path, known: Segment | None) -> Segment:
    """``known`` when it is this very segment (same folder inode: a name can come back after its segment was
    collected), else a freshly opened one."""
    try:
        same = known is not None and known.inode == os.stat(path).st_ino
    except OSError:
        same = False  # a segment folder that is gone: Segment(path) names it
    if same:
        return known
    return Segment(path)


class Index:
    """A loaded generation of an index directory: a consistent, read-only snapshot."""

    def __init__(self, root: Path, gen: Path, previous: "Index | None" = None,
                 reuse: Mapping[str, Segment] | None = None) -> None:
        """``previous``: an earlier generation of the same index whose loaded segments (memory maps, id maps,
        columns) are reused for the segments both name — segments are immutable — so opening a new generation
        costs what changed (its live masks, new segments), not the index (issue 19)."""
        self.root = root
        self.gen = gen
        # pinned before anything of it is read: no writer deletes it until this snapshot is closed or dropped
        self._unpin = weakref.finalize(self, dirs.pin_generation(gen) or _nothing)
        self.meta = IndexMeta.read(gen, root)
        same_settings = previous is not None and previous.meta.analyzer == self.meta.analyzer
        self.analyzer = previous.analyzer if same_settings else Analyzer(self.meta.analyzer)
        self.bm25_params = self.meta.bm25
        names = self.meta.segments
        known: dict[str, Segment] = {s.name: s for s in previous.segments} if previous is not None else {}
        known.update(reuse or {})
        self.segments = [_open_segment(root / SEGMENTS / name, known.get(name)) for name in names]
        self.seg_live = [self._live_mask(gen / "live" / f"{s.name}.npy", s.n_passages) for s in self.segments]
        self.seg_doc_live = [self._live_mask(gen / "live" / f"{s.name}.docs.npy", s.n_documents) for s in self.segments]
        sizes = [s.n_passages for s in self.segments]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.live = np.concatenate(self.seg_live) if self.segments else np.zeros(0, dtype=bool)
        # Whole-index structures (a merged term matrix, merged columns, a pid map of every passage) are built
        # only on first use, and nothing on the search, add or delete paths uses them: BM25, filters, aspects
        # and id lookups work segment by segment over per-segment structures that outlive generations.
        self._matrix: TermMatrix | None | object = _UNLOADED
        self._sizes = sizes
        self.columns: Mapping[str, Column] = _MergedColumns(self.segments, sizes, self.meta.fields)
        self._scorers: dict[Retriever, Any] = {}
        self._pid_rows: dict[str, int] | None = None
        self._doc_rows: dict[str, tuple[int, int]] | None = None
        self._vectors: list | None = None
        self._encoder = None
        self._bm25: SegmentedBM25 | None = None
        self._counts: dict[str, int] | None = None
        self._values: dict[str, dict[str, tuple[Any, int]]] = {}  # see _value_counts

    @property
    def manifest(self) -> dict[str, Any]:
        """The generation's manifest as stored (JSON); :attr:`meta` is the same, typed."""
        return self.meta.to_dict()

    @staticmethod
    def _live_mask(path: Path, n: int) -> np.ndarray:
        """A segment's live mask in this generation: one flag per row, or the index is damaged (a mask of
        another length would silently misalign every row after it)."""
        mask = np.array(load_npy(path))
        if mask.shape != (n,) or mask.dtype != bool:
            raise damaged(path, f"expected {n} true/false flags, found {mask.dtype} of shape {mask.shape}")
        return mask

    @classmethod
    def load(cls, root: str | Path, previous: "Index | None" = None) -> "Index":
        """The generation CURRENT names. A writer may make it obsolete and delete it between reading CURRENT and
        pinning it: a generation that vanishes while CURRENT has moved on is opened again at the new name; one
        that is broken while CURRENT still names it is damage, and said so."""
        root = Path(root)
        name = dirs.current_name(root)
        for _ in range(_OPEN_ATTEMPTS):
            try:
                return cls(root, root / name, previous=previous)
            except IndexError_ as e:
                if not isinstance(e, (DamagedIndexError, dirs.GenerationGone)):
                    raise
                now = dirs.current_name(root)
                if now == name:
                    if not (root / name / "manifest.json").is_file():
                        raise dirs.missing_generation(root, name) from None
                    if isinstance(e, DamagedIndexError):
                        raise
                    time.sleep(0.01)  # CURRENT names a generation being deleted: a writer is mid-commit
                name = now
        raise IndexError_(f"{root}: the index changed {_OPEN_ATTEMPTS} times while it was being opened; try again")

    def check_files(self) -> None:
        """Raises DamagedIndexError when a segment file is missing or cut short (headers only, see
        Segment.check_files): for a process that will serve this generation for long, at its start."""
        for seg in self.segments:
            seg.check_files(dense=self.has_dense)

    def close(self) -> None:
        for s in self.segments:
            s.close()
        self._unpin()

    def __len__(self) -> int:
        """Rows, including deleted passages still present in segments (see ``live``)."""
        return int(self.offsets[-1])

    @property
    def matrix(self) -> TermMatrix | None:
        """All segments' term matrices as one (None when every document is deleted); merged on first use."""
        if self._matrix is _UNLOADED:
            self._matrix = merge_matrices([s.matrix for s in self.segments], self.live) if self.segments else None
        return self._matrix  # type: ignore[return-value]

    @property
    def counts(self) -> dict[str, int]:
        """Live documents and passages, and the vocabulary of live passages (computed once per generation)."""
        if self._counts is None:
            self._counts = self._count()
        return self._counts

    def _count(self) -> dict[str, int]:
        c = self.meta.counts
        if self._matrix is not _UNLOADED:  # merged already
            vocab = int((self.matrix.document_frequency() > 0).sum()) if self.matrix is not None else 0
        else:  # without merging: the union of each segment's live terms
            parts = [_live_terms(s, live) for s, live in zip(self.segments, self.seg_live)]
            if len(parts) == 1 and isinstance(parts[0], int):
                vocab = parts[0]
            else:
                vocab = len(set().union(*(s.postings.vocab.terms() if isinstance(p, int) else p
                                          for s, p in zip(self.segments, parts))))
        return {"documents": c["documents"], "passages": c["passages"], "vocabulary": vocab}

    @property
    def has_dense(self) -> bool:
        return bool(self.meta.dense)

    def includes_titles(self) -> bool:
        """Whether each passage was indexed (lexical text, and what a context-free encoder embedded) with its
        document title in front."""
        return bool(self.meta.segmenter.include_title)

    def dense_manifest(self) -> dict[str, Any]:
        """What the index records about its vectors: the encoder and, for `capr adapt` indexes, how it was adapted
        and the hybrid fusion chosen for it."""
        return dict(self.meta.dense or {})

    @property
    def is_empty(self) -> bool:
        """No live passage: every document was deleted (a generation then has no segments and no term matrix)."""
        return not self.segments or not self.live.any()

    # -- lookups ----------------------------------------------------------------
    def locate(self, row: int) -> tuple[Segment, int]:
        i = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.segments[i], row - int(self.offsets[i])

    def passage(self, row: int) -> Passage:
        seg, local = self.locate(row)
        return seg.passage(local)

    def pid_rows(self) -> dict[str, int]:
        """pid → row of its live passage, for every live passage (built on first use; the search, add and delete
        paths look pids up segment by segment instead, see :meth:`row_of`)."""
        if self._pid_rows is None:
            rows: dict[str, int] = {}
            for seg, off, live in zip(self.segments, self.offsets, self.seg_live):
                for i in np.flatnonzero(live):
                    rows[seg.pids[i]] = int(off + i)
            self._pid_rows = rows
        return self._pid_rows

    def row_of(self, pid: str) -> int | None:
        """The row of the live passage ``pid`` (the newest segment holding it live wins, as in pid_rows)."""
        for si in range(len(self.segments) - 1, -1, -1):
            i = self.segments[si].row_of_pid(pid)
            if i is not None and self.seg_live[si][i]:
                return int(self.offsets[si]) + i
        return None

    def passage_by_pid(self, pid: str) -> Passage:
        row = self.row_of(pid)
        if row is None:
            raise QueryError(f"no passage with id {pid!r}")
        return self.passage(row)

    def _doc_index(self) -> dict[str, tuple[int, int]]:
        if self._doc_rows is None:
            rows: dict[str, tuple[int, int]] = {}
            for si, (seg, dlive) in enumerate(zip(self.segments, self.seg_doc_live)):
                ids = seg.doc_ids.strings()
                for i in np.flatnonzero(dlive).tolist():
                    rows[ids[i]] = (si, i)
            self._doc_rows = rows
        return self._doc_rows

    def _find_document(self, doc_id: str) -> tuple[int, int] | None:
        """(segment, document row) of the live document ``doc_id``: a lookup per segment in maps that each
        segment builds once, not a map of the whole index per generation."""
        for si in range(len(self.segments) - 1, -1, -1):
            i = self.segments[si].doc_row(doc_id)
            if i is not None and self.seg_doc_live[si][i]:
                return si, i
        return None

    def has_document(self, doc_id: str) -> bool:
        return self._find_document(doc_id) is not None

    def segments_with(self, doc_ids: set[str]) -> set[int]:
        """Indices of the segments holding a live document among ``doc_ids``."""
        return {loc[0] for d in doc_ids if (loc := self._find_document(d)) is not None}

    def document_ids(self) -> list[str]:
        return list(self._doc_index())

    def document(self, doc_id: str) -> Document:
        loc = self._find_document(doc_id)
        if loc is None:
            raise QueryError(f"no document with id {doc_id!r}")
        return self.segments[loc[0]].document(loc[1])

    def _value_counts(self, field: str) -> dict[str, tuple[Any, int]]:
        """Per distinct value (by filter key: case and outer spaces folded) of a column that a live passage has:
        its first spelling among live passages in segment order (a rebuild's) and its live passages, counted
        segment by segment. A value only deleted passages had is not one. Kept per field: a generation never changes."""
        known = self._values.get(field)
        if known is not None:
            return known
        out: dict[str, list[Any]] = {}
        for seg, live in zip(self.segments, self.seg_live):
            if field not in seg.fields:
                continue
            for v, n in seg.live_values(field, live):
                if v is None:
                    continue
                entry = out.setdefault(Column._key(v), [v, 0])
                entry[1] += n
        known = self._values[field] = {k: (v, n) for k, (v, n) in out.items()}
        return known

    def aspects(self) -> list[str]:
        return sorted(str(v) for v, n in self._value_counts("aspect").values() if v and n)

    def aspect_counts(self) -> dict[str, int]:
        """Live passages per section aspect."""
        return {str(v): n for v, n in self._value_counts("aspect").values() if v and n}

    def live_values(self, field: str) -> list[Any]:
        """Distinct values of a column among live passages (one spelling per filter key)."""
        return [v for v, n in self._value_counts(field).values() if n]

    def _segment_of_rows(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, rows, side="right") - 1

    # -- storage and scoring primitives (capr.store.embedded.EmbeddedStore puts the Store front on them) ------
    def stats(self) -> dict[str, int]:
        return self.counts

    def live_count(self) -> int:
        return int(self.meta.counts["passages"])

    def row_count(self) -> int:
        return len(self)

    def generation_info(self) -> dict[str, Any]:
        return {"generation": self.meta.generation, "created": self.meta.created,
                "segments": len(self.segments)}

    def fields(self) -> list[str]:
        return sorted(self.meta.fields)

    def scorer(self, retriever: Retriever | str):
        r = Retriever(retriever)
        if r not in LEXICAL:
            raise QueryError(f"{r.value} is not a lexical retriever")
        if r is Retriever.bm25:
            return self.bm25()
        if r not in self._scorers:
            # TF-IDF's document norms depend on every term's idf: built over the merged matrix, on first use
            self._scorers[r] = TfidfScorer(self.matrix)
        return self._scorers[r]

    def bm25(self) -> SegmentedBM25:
        """BM25 over the segments as they are: collection statistics (live passages, document frequencies,
        average length) combined from per-segment counts, scores computed segment by segment into one row
        array. Equal to BM25 over the merged matrix; no whole-index structure is built."""
        if self._bm25 is None:
            self._bm25 = SegmentedBM25(self)
        return self._bm25

    def lexical_scores(self, terms: list[str], keys: np.ndarray | None = None,
                       method: Retriever | str = Retriever.bm25) -> np.ndarray:
        """One score per row (0 for rows sharing no term, and for deleted rows); only ``keys`` when given."""
        if not self.segments:
            return np.zeros(len(self) if keys is None else len(keys), dtype=np.float32)
        if keys is not None and Retriever(method) is Retriever.bm25:
            keys = np.asarray(keys, dtype=np.int64)
            rows, back = np.unique(keys, return_inverse=True)
            return self.bm25().scores_at(terms, rows)[back]
        scores = self.scorer(method).scores(terms)
        return scores if keys is None else scores[keys]

    def lexical_dismax(self, base: list[str], phrases: list[list[str]]) -> np.ndarray | None:
        """BM25 of ``base`` plus the best of ``phrases``, one score per row, as ``lexical_scores`` would add them;
        None where that needs an array per phrasing (SegmentedBM25.dismax)."""
        return self.bm25().dismax(base, phrases) if self.segments else None

    def lexical_top(self, terms: list[str], k: int, flt: np.ndarray | None = None,
                    method: Retriever | str = Retriever.bm25) -> tuple[np.ndarray, np.ndarray]:
        """``top(lexical_scores(terms), k, flt)``; BM25 without scoring every row (SegmentedBM25.top)."""
        if self.segments and Retriever(method) is Retriever.bm25:
            return self.bm25().top(terms, k, self.live if flt is None else flt)
        return self.top(self.lexical_scores(terms, None, method), k, flt)

    def term_rows(self, term: str) -> np.ndarray:
        """The live rows whose indexed text holds the analysed ``term``, ascending."""
        return self.bm25().term_rows(term) if self.segments else np.zeros(0, dtype=np.int64)

    def top(self, scores: np.ndarray, k: int, flt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows with a positive score among live rows passing the filter (see scoring.top_rows)."""
        return top_rows(scores, k, self.live if flt is None else flt)

    def term_idf(self, terms) -> dict[str, float]:
        if not self.segments:
            return {}
        return {t: float(v) for t, v in self.bm25().idf(list(dict.fromkeys(terms))).items()}

    def aspect_flags(self, keys: np.ndarray, aspect: str) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        out = np.zeros(len(keys), dtype=bool)
        seg_idx = self._segment_of_rows(keys)
        for si in np.unique(seg_idx):
            col = self.segments[si].column("aspect")
            code = col._lookup.get(Column._key(aspect))
            if code is not None:
                sel = seg_idx == si
                out[sel] = np.asarray(col.codes)[keys[sel] - self.offsets[si]] == code
        return out

    def has_aspect(self, aspect: str) -> bool:
        """Whether a live passage has this aspect (an aspect only deleted passages had is not one, as in a rebuild).
        Asked segment by segment until one has it, without counting every aspect's passages (a pass over every row
        of a large index, which a cold ⟨entity, aspect⟩ search would pay)."""
        key = Column._key(aspect)
        counted = self._values.get("aspect")
        if counted is not None:
            return key in counted
        for seg, live in zip(self.segments, self.seg_live):
            if "aspect" not in seg.fields:
                continue
            col = seg.column("aspect")
            code = col._lookup.get(key)
            if code is not None and (live.all() or bool((np.asarray(col.codes)[live] == code).any())):
                return True
        return False

    def restrict(self, flt: np.ndarray | None, keys: np.ndarray) -> np.ndarray:
        """The filter narrowed to the given rows."""
        mask = np.zeros(len(self), dtype=bool)
        mask[keys] = True
        return (self.live if flt is None else flt) & mask

    def document_rows(self, mask: np.ndarray) -> np.ndarray:
        """Live rows of every document that has a live row in ``mask``, segment by segment (a live document's
        passages are all in one segment)."""
        out = np.zeros(len(self), dtype=bool)
        for si, (seg, live) in enumerate(zip(self.segments, self.seg_live)):
            lo, hi = int(self.offsets[si]), int(self.offsets[si + 1])
            sel = mask[lo:hi] & live
            if sel.any():
                docs = np.asarray(seg.passage_doc_rows)
                wanted = np.zeros(seg.n_documents, dtype=bool)
                wanted[docs[sel]] = True
                out[lo:hi] = wanted[docs] & live
        return out

    def document_keys(self, keys: np.ndarray) -> np.ndarray:
        """Live rows of every document that has a live row among ``keys``, ascending. A segment's passages are
        stored in document order, so each document's rows are one range, found by bisection."""
        keys = np.unique(np.asarray(keys, dtype=np.int64))
        cuts = np.searchsorted(keys, self.offsets)
        out = []
        for si, (seg, live) in enumerate(zip(self.segments, self.seg_live)):
            local = keys[int(cuts[si]):int(cuts[si + 1])] - int(self.offsets[si])
            local = local[live[local]]
            if not len(local):
                continue
            docs = np.asarray(seg.passage_doc_rows)
            wanted = np.unique(docs[local])
            starts = np.searchsorted(docs, wanted, "left")
            lengths = np.searchsorted(docs, wanted, "right") - starts
            rows = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
            out.append(rows[live[rows]] + int(self.offsets[si]))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def passages(self, keys: np.ndarray) -> list[Passage]:
        return [self.passage(int(r)) for r in keys]

    def titles(self, keys: np.ndarray) -> list[str]:
        """The document title of each row ("" for none), read from the title column: no passage text is read."""
        keys = np.asarray(keys, dtype=np.int64)
        out: list[str] = [""] * len(keys)
        seg_idx = self._segment_of_rows(keys)
        for si in np.unique(seg_idx).tolist():
            at = np.flatnonzero(seg_idx == si)
            if "title" not in self.segments[si].fields:
                for i in at.tolist():
                    out[i] = self.passage(int(keys[i])).title or ""
                continue
            col = self.segments[si].column("title")
            codes = np.asarray(col.codes)[keys[at] - self.offsets[si]]
            for i, code in zip(at.tolist(), codes.tolist()):
                out[i] = col.values[code] or ""
        return out

    def keys_of(self, pids: list[str]) -> np.ndarray:
        rows = [self.row_of(p) for p in pids]
        missing = [p for p, r in zip(pids, rows) if r is None]
        if missing:
            raise KeyError(missing[0])
        return np.asarray(rows, dtype=np.int64)

    # -- dense ------------------------------------------------------------------
    def encoder(self):
        if not self.has_dense:
            raise QueryError(f"{self.root}: index has no vectors")
        if self._encoder is None:
            self._encoder = encoder_of(self.meta.dense)
        return self._encoder

    def vectors(self) -> list:
        if self._vectors is None:
            self._vectors = [s.vectors() for s in self.segments]
        return self._vectors

    def row_vectors(self, rows: np.ndarray) -> np.ndarray:
        """The stored vectors of the given rows."""
        seg_idx = np.searchsorted(self.offsets, rows, side="right") - 1
        return np.stack([np.asarray(self.vectors()[s].vectors[r - self.offsets[s]]) for s, r in zip(seg_idx, rows)])

    def dense_scores(self, qvec: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Cosine of the query with each given row (exact, for re-ranking a candidate pool)."""
        rows = np.asarray(keys)
        out = np.empty(len(rows), dtype=np.float32)
        seg_idx = np.searchsorted(self.offsets, rows, side="right") - 1
        for si in np.unique(seg_idx):
            sel = seg_idx == si
            vecs = self.vectors()[si].vectors
            out[sel] = np.asarray(vecs[rows[sel] - self.offsets[si]]) @ qvec
        return out

    def dense_top(self, qvec: np.ndarray, k: int, flt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Global top-k (rows, cosine) over live rows passing the filter: per segment, then merged."""
        allowed = self.live if flt is None else (self.live & flt)
        rows, scores = [], []
        for si, sv in enumerate(self.vectors()):
            lo, hi = int(self.offsets[si]), int(self.offsets[si + 1])
            r, s = sv.search(qvec, k, allowed[lo:hi])
            rows.append(r + lo)
            scores.append(s)
        rows_a = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        scores_a = np.concatenate(scores) if scores else np.zeros(0, dtype=np.float32)
        order = np.lexsort((rows_a, -scores_a))[:k]
        return rows_a[order], scores_a[order]

    # -- filters ----------------------------------------------------------------
    def clause_rows(self, clause: Any, normalize: Any = None) -> np.ndarray:
        """Live rows passing one filter clause (capr.filters), decided per segment's distinct values (no merged
        column per generation); a field some segment lacks matches none of its passages. ``normalize``: maps a
        clause value to the stored spelling (the aspect filter's reading of a synonym)."""
        whole_bound = is_range(clause) and normalize is None
        if whole_bound:
            # a bound is refused by what the whole index holds, not by what one segment happens to hold
            check_range_bound_in_parts(clause, ((seg.value_table(clause.field), seg.live_value_flags(clause.field, live))
                                                for seg, live in zip(self.segments, self.seg_live)
                                                if clause.field in seg.fields))
        parts = []
        for seg in self.segments:
            if clause.field not in seg.fields:
                parts.append(np.zeros(seg.n_passages, dtype=bool))
                continue
            col = seg.column(clause.field)
            parts.append(column_mask(clause, col.values, col.codes, normalize, col._lookup,
                                     lambda seg=seg, col=col, f=clause.field: seg.value_table(f),
                                     check=not whole_bound))
        return (np.concatenate(parts) if parts else np.zeros(0, dtype=bool)) & self.live

    def stored_values(self, field: str) -> list[str]:
        """Every distinct value of a column among live passages, in segment order: the spellings a filter can
        still match (a deleted or replaced document's values are neither offered nor shown)."""
        return [str(v) for v, _ in self._value_counts(field).values()]


def load_index(root: str | Path, previous: Index | None = None) -> Index:
    """The current generation of ``root``; ``previous``: an earlier one whose loaded segments are reused."""
    return Index.load(root, previous=previous)

