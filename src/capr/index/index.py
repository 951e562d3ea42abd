"""capr's index: passages, documents, a lexical term matrix, filter columns and dense vectors in one directory."""

from __future__ import annotations

import difflib
import json
import re
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from capr import __version__
from capr.corpus.aspects import normalize_aspect
from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import CaprError, IndexError_, QueryError, WriteError
from capr.filters import Filters, ValueTable, as_clauses, column_mask
from capr.index import directory as dirs
from capr.index.analyzer import Analyzer, AnalyzerConfig
from capr.index.atomic import write_json, write_npy
from capr.index.lexical import BM25Params, BM25Scorer, TermMatrix, TfidfScorer
from capr.index.merge import merge_columns, merge_matrices
from capr.index.segment import SEGMENTS, Segment, SegmentBuilder
from capr.index.store import Column
from capr.query import LEXICAL, Retriever, check_aspect
from capr.records import Document, Passage, check_doc_id
from capr.store import Backend, Capability

if TYPE_CHECKING:
    from capr.models.encoder import EncoderConfig

FORMAT_VERSION = 2
DEFAULT_HNSW_THRESHOLD = 50_000  # segments with at least this many passages get an HNSW graph
# A document longer than this is refused (a bad record: --skip-bad skips it). 10 M characters is far
# beyond any clinical note or article; a bigger "document" is almost always a mistake (a whole dump in
# one JSON field) and would be held, segmented and analysed in memory at once.
DEFAULT_MAX_DOC_CHARS = 10_000_000
# One write (a whole `capr index`) is cut into segments of this many passages, so its memory does not grow with the
# input (the writer holds one segment's postings and records at a time); searches merge segments' statistics.
DEFAULT_SEGMENT_PASSAGES = 250_000
_MADE_PID = re.compile(r"^(.*)#s\d+(?:#p\d+)?$")  # the passage ids capr makes: DOC#sN, DOC#sN#pK


def _encoder(config: dict[str, Any] | None):
    if not config:
        return None
    from capr.models.encoder import Encoder, EncoderConfig

    return Encoder(EncoderConfig.from_dict(config["encoder"]))


class IndexWriter:
    """Creates an index (``mode="create"``, replacing whatever ``root`` held) or updates one
    (``mode="update"``: add and delete documents). ``commit`` makes the change current in one
    atomic step; until then, and if the process dies, readers see the previous generation."""

    def __init__(
        self,
        root: str | Path,
        segmenter: SegmenterConfig | None = None,
        analyzer: AnalyzerConfig | None = None,
        bm25: BM25Params | None = None,
        report: ReadReport | None = None,
        dense: "EncoderConfig | None" = None,
        mode: str = "create",
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        progress: Any = None,
        max_doc_chars: int = DEFAULT_MAX_DOC_CHARS,
        segment_passages: int = DEFAULT_SEGMENT_PASSAGES,
    ) -> None:
        if mode not in ("create", "update"):
            raise ValueError(f"mode must be 'create' or 'update', not {mode!r}")
        if max_doc_chars <= 0:
            raise CaprError(f"the document size limit must be positive, got {max_doc_chars}")
        if segment_passages <= 0:
            raise CaprError(f"the segment size must be positive, got {segment_passages}")
        self.max_doc_chars = max_doc_chars
        self.segment_passages = segment_passages
        self._flushed: list[tuple[str, int, int, set[str]]] = []  # (segment, passages, documents, terms) written so far
        self._field_names: set[str] = set()
        self.root = Path(root)
        self.mode = mode
        self.report = report or ReadReport()
        self.progress = progress
        try:
            if mode == "update":
                dirs.current_generation(self.root)  # clear error when there is no index to update
            else:
                dirs.prepare_root(self.root)
            # Lock before reading the base generation: a concurrent writer's commit must not be lost.
            self._lock = dirs.write_lock(self.root)
            self._lock.__enter__()
        except OSError as e:  # e.g. a parent folder that cannot be created, a read-only file system
            raise self._write_error(e) from None
        self._closed = False
        try:
            self._configure(mode, segmenter, analyzer, bm25, dense, hnsw_threshold)
            dirs.remove_stale(self.root)
            self._dense_encoder = _encoder(self.dense_info)
            self.builder = self._new_builder()
        except OSError as e:
            self._lock.__exit__(None, None, None)
            raise self._write_error(e) from None
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        self._new_ids: set[str] = set()
        # Passage ids a source assigned (section ids): the only ones that can collide across documents. Ids capr
        # makes ("DOC#sN") are unique once document ids are, so they are not kept — one write's memory must not
        # grow with its passages.
        self._source_pids: set[str] = set()
        self._delete: set[str] = set()  # documents of earlier segments to tombstone
        self._t0 = time.time()

    def _configure(self, mode, segmenter, analyzer, bm25, dense, hnsw_threshold) -> None:
        if mode == "update":
            self.base: Index | None = Index.load(self.root)
            m = self.base.manifest
            self.segmenter = SegmenterConfig(**m["segmenter"])
            self.analyzer_config = AnalyzerConfig.from_dict(m["analyzer"])
            self.bm25 = BM25Params(**m["bm25"])
            self.dense_info = m.get("dense")
            self.hnsw_threshold = m.get("hnsw_threshold", hnsw_threshold)
        else:
            self.base = None
            self.segmenter = segmenter or SegmenterConfig()
            self.analyzer_config = analyzer or AnalyzerConfig()
            self.bm25 = bm25 or BM25Params()
            self.dense_info = {"encoder": dense.to_dict()} if dense is not None else None
            self.hnsw_threshold = hnsw_threshold
        self.analyzer = Analyzer(self.analyzer_config)

    def _new_builder(self) -> SegmentBuilder:
        builder = SegmentBuilder(self.root, self.segmenter, self.analyzer)
        builder.keep_texts = self._dense_encoder is not None
        if self._dense_encoder is not None:
            # a model trained with document context reads each passage with its title (and heading)
            builder.dense_text = self._dense_encoder.passage_text
        return builder

    @property
    def n_passages(self) -> int:
        return sum(n for _, n, _, _ in self._flushed) + self.builder.n_passages

    def _finish_builder(self) -> str:
        """Encodes (dense) and writes the segment being built; it becomes part of the index only at commit."""
        vectors = None
        if self.dense_info and self.builder.n_passages:
            self._note(f"encoding {self.builder.n_passages} passages")
            vectors = self._dense_encoder.encode_passages(self.builder.texts,
                                                          progress=getattr(self.progress, "advance_encoding", None))
            self.dense_info = {**self.dense_info, "dim": int(vectors.shape[1])}
        return self.builder.finish(vectors, self.hnsw_threshold, self._note)

    def _flush(self, more: bool = True) -> None:
        """A long write is cut into segments of ``segment_passages``: the writer holds one segment's postings at a
        time, so indexing a file of any size takes the same memory (a crash leaves no generation naming them).
        ``more``: start the next segment (not at commit)."""
        b = self.builder
        name = self._finish_builder()
        self._flushed.append((name, b.n_passages, len(b.doc_ids), b.terms))
        self._field_names |= b.field_names
        if more:
            self.builder = self._new_builder()

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def add(self, doc: Document) -> int:
        """Segment, analyse and store one document (replacing an indexed one with the same id)."""
        try:
            check_doc_id(doc.doc_id)  # readers check it with file and line; this guards the Python API
        except ValueError as e:
            self.report.bad(str(doc.metadata.get("path") or "document"), f"field 'doc_id': document id {e}",
                            repr(doc.doc_id)[:80])
            return 0
        if len(doc.text) > self.max_doc_chars:
            self.report.bad(str(doc.metadata.get("path") or doc.doc_id),
                            f"document text has {len(doc.text):,} characters, more than the limit of "
                            f"{self.max_doc_chars:,} (--max-doc-chars)", doc.doc_id)
            return 0
        if doc.doc_id in self._new_ids:
            self.report.bad(str(doc.metadata.get("path") or doc.doc_id), f"duplicate document id {doc.doc_id!r}", doc.doc_id)
            return 0
        passages = segment(doc, self.segmenter)
        if not passages:
            self.report.empty += 1
            return 0
        pids = [p.pid for p in passages]
        own = f"{doc.doc_id}#s"
        sourced = [p for p in pids if not p.startswith(own)]
        clash = self._source_pids.intersection(pids) or any(  # a source id shaped like another document's "DOC#sN"
            (m := _MADE_PID.match(p)) is not None and m.group(1) in self._new_ids for p in sourced)
        if len(set(pids)) != len(pids) or clash:
            self.report.bad(doc.doc_id, "duplicate passage ids", doc.doc_id)
            return 0
        if self.base is not None and self.base.has_document(doc.doc_id):
            self._delete.add(doc.doc_id)
        self._new_ids.add(doc.doc_id)
        self._source_pids.update(sourced)
        try:
            self.builder.add(doc, passages)
            if self.builder.n_passages >= self.segment_passages:
                self._flush()
        except OSError as e:  # the segment being written is now incomplete: this writer is done
            self.abort()
            raise self._write_error(e) from None
        return len(passages)

    def _write_error(self, e: OSError) -> WriteError:
        """One line for a failed write: the index, the system's reason, and what is still current."""
        try:
            current = f"generation {dirs.current_generation(self.root).name} stays current"
        except CaprError:
            current = "no generation was committed"
        reason = e.strerror or str(e)
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        return WriteError(f"{self.root}: cannot write the index: {reason}{where}; nothing was changed, {current}")

    def delete(self, doc_id: str) -> None:
        try:
            check_doc_id(doc_id)  # the same rule as for adding: an id that cannot be stored cannot be deleted
        except ValueError as e:
            raise QueryError(f"document id {doc_id!r} {e}") from None
        if doc_id in self._new_ids:
            raise CaprError(f"document {doc_id!r} was added in this same update; delete it in a later one")
        if self.base is None or not self.base.has_document(doc_id):
            raise QueryError(f"no document with id {doc_id!r}")
        self._delete.add(doc_id)

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.builder.abort()
        for name, *_ in self._flushed:  # segments this writer finished but no generation names
            shutil.rmtree(self.root / SEGMENTS / name, ignore_errors=True)
        self._lock.__exit__(None, None, None)

    def _note(self, what: str) -> None:
        if self.progress:
            self.progress(what)

    def commit(self) -> "Index":
        if self._closed:
            raise IndexError_("writer already closed")
        gen_tmp = None
        try:
            if self.builder.n_passages:
                self._flush(more=False)
            else:
                self.builder.abort()
            gen_tmp, name = dirs.new_generation(self.root)
            (gen_tmp / "live").mkdir()
            segments: list[str] = []
            live_docs = live_passages = 0
            vocab: set[str] = set()
            if self.base is not None:
                # Only what the new live masks need: document ids, and the doc_id column of a segment
                # that loses documents; never the merged term matrix or columns of the base.
                hit = self.base.segments_with(self._delete) if self._delete else set()
                for si, (seg, plive, dlive) in enumerate(zip(self.base.segments, self.base.seg_live, self.base.seg_doc_live)):
                    if si in hit:
                        col = seg.column("doc_id")
                        gone = [code for code, v in enumerate(col.values) if v in self._delete]
                        plive = plive & ~np.isin(np.asarray(col.codes), gone)
                        dlive = dlive & ~np.fromiter((d in self._delete for d in seg.doc_ids), dtype=bool, count=len(seg.doc_ids))
                    if not plive.any():
                        continue  # fully deleted segments are dropped, and collected after commit
                    write_npy(gen_tmp / "live" / f"{seg.name}.npy", plive)
                    write_npy(gen_tmp / "live" / f"{seg.name}.docs.npy", dlive)
                    segments.append(seg.name)
                    live_passages += int(plive.sum())
                    live_docs += int(dlive.sum())
                    vocab.update(seg.terms())
            for new_segment, n_pass, n_docs, terms in self._flushed:
                write_npy(gen_tmp / "live" / f"{new_segment}.npy", np.ones(n_pass, dtype=bool))
                write_npy(gen_tmp / "live" / f"{new_segment}.docs.npy", np.ones(n_docs, dtype=bool))
                segments.append(new_segment)
                live_passages += n_pass
                live_docs += n_docs
                vocab.update(terms)
            fields = self._field_names | (set(self.base.manifest["fields"]) if self.base else set())
            manifest = {
                "format_version": FORMAT_VERSION,
                "capr_version": __version__,
                "generation": name,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "analyzer": self.analyzer_config.to_dict(),
                "bm25": asdict(self.bm25),
                "segmenter": asdict(self.segmenter),
                "dense": self.dense_info,
                "hnsw_threshold": self.hnsw_threshold,
                "segments": segments,
                "counts": {"documents": live_docs, "passages": live_passages, "terms_in_segments": len(vocab)},
                "fields": sorted(fields),
                "write_seconds": round(time.time() - self._t0, 3),
            }
            write_json(gen_tmp / "manifest.json", manifest)
            dirs.commit_generation(self.root, gen_tmp, name)
        except BaseException as e:
            if gen_tmp is not None:
                shutil.rmtree(gen_tmp, ignore_errors=True)
            self.abort()
            if isinstance(e, OSError):
                raise self._write_error(e) from None
            raise
        self._closed = True
        self._lock.__exit__(None, None, None)
        return Index.load(self.root)


_UNLOADED = object()


def _live_terms(m: TermMatrix, live: np.ndarray, chunk: int = 1 << 20) -> set[str]:
    """Terms of ``m`` with at least one live posting, reading the postings ``chunk`` at a time."""
    indptr = np.asarray(m.indptr)
    has_live = np.zeros(len(indptr) - 1, dtype=bool)
    for lo in range(0, int(indptr[-1]), chunk):
        hi = min(lo + chunk, int(indptr[-1]))
        rows = live[np.asarray(m.indices[lo:hi])]
        if rows.any():
            # the term (column) of each live posting in this chunk
            cols = np.searchsorted(indptr, lo + np.flatnonzero(rows), side="right") - 1
            has_live[cols] = True
    ids = set(np.flatnonzero(has_live).tolist())
    return {t for t, i in m.vocab.items() if i in ids}


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


class Index:
    """A loaded generation of an index directory: a consistent, read-only snapshot."""

    def __init__(self, root: Path, gen: Path) -> None:
        self.root = root
        self.gen = gen
        self.manifest = json.loads((gen / "manifest.json").read_text(encoding="utf-8"))
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise IndexError_(
                f"{root}: index format {self.manifest.get('format_version')} is not supported "
                f"(this capr reads format {FORMAT_VERSION}); rebuild it with `capr index`"
            )
        self.analyzer = Analyzer(AnalyzerConfig.from_dict(self.manifest["analyzer"]))
        self.bm25_params = BM25Params(**self.manifest["bm25"])
        self.segments = [Segment(root / SEGMENTS / name) for name in self.manifest["segments"]]
        self.seg_live = [np.array(np.load(gen / "live" / f"{s.name}.npy")) for s in self.segments]
        self.seg_doc_live = [np.array(np.load(gen / "live" / f"{s.name}.docs.npy")) for s in self.segments]
        sizes = [s.n_passages for s in self.segments]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.live = np.concatenate(self.seg_live) if self.segments else np.zeros(0, dtype=bool)
        # The merged term matrix and columns are built on first use: an index writer (capr add, the
        # service's writes) opens the generation it updates only to look up document ids, and its
        # memory must scale with the batch it writes, not with the index (issue 19).
        self._matrix: TermMatrix | None | object = _UNLOADED
        self._sizes = sizes
        self.columns: Mapping[str, Column] = _MergedColumns(self.segments, sizes, self.manifest["fields"])
        self._scorers: dict[Retriever, Any] = {}
        self._pid_rows: dict[str, int] | None = None
        self._doc_rows: dict[str, tuple[int, int]] | None = None
        self._vectors: list | None = None
        self._encoder = None

    @classmethod
    def load(cls, root: str | Path) -> "Index":
        root = Path(root)
        return cls(root, dirs.current_generation(root))

    def close(self) -> None:
        for s in self.segments:
            s.close()

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
        """Live documents and passages, and the vocabulary of live passages."""
        c = self.manifest["counts"]
        if self._matrix is not _UNLOADED or len(self.segments) <= 1:  # merged already, or merging is free
            vocab = int((self.matrix.document_frequency() > 0).sum()) if self.matrix is not None else 0
        else:  # without merging: the union of each segment's live terms
            vocab = len(set().union(*(_live_terms(s.matrix, live) for s, live in zip(self.segments, self.seg_live))))
        return {"documents": c["documents"], "passages": c["passages"], "vocabulary": vocab}

    @property
    def has_dense(self) -> bool:
        return bool(self.manifest.get("dense"))

    @property
    def is_empty(self) -> bool:
        """No live passage: every document was deleted (a generation then has no segments and no term matrix)."""
        return self.matrix is None or not self.live.any()

    # -- lookups ----------------------------------------------------------------
    def locate(self, row: int) -> tuple[Segment, int]:
        i = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.segments[i], row - int(self.offsets[i])

    def passage(self, row: int) -> Passage:
        seg, local = self.locate(row)
        rec = seg.passages.get(local)
        doc_meta = seg.documents.get(rec.pop("doc_row"))["metadata"]
        p = Passage.from_dict(rec)
        p.metadata = doc_meta
        return p

    def pid_rows(self) -> dict[str, int]:
        """pid → row of its live passage."""
        if self._pid_rows is None:
            rows: dict[str, int] = {}
            for seg, off, live in zip(self.segments, self.offsets, self.seg_live):
                for i in np.flatnonzero(live):
                    rows[seg.pids[i]] = int(off + i)
            self._pid_rows = rows
        return self._pid_rows

    def passage_by_pid(self, pid: str) -> Passage:
        row = self.pid_rows().get(pid)
        if row is None:
            raise QueryError(f"no passage with id {pid!r}")
        return self.passage(row)

    def _doc_index(self) -> dict[str, tuple[int, int]]:
        if self._doc_rows is None:
            rows: dict[str, tuple[int, int]] = {}
            for si, (seg, dlive) in enumerate(zip(self.segments, self.seg_doc_live)):
                for i in np.flatnonzero(dlive):
                    rows[seg.doc_ids[i]] = (si, int(i))
            self._doc_rows = rows
        return self._doc_rows

    def has_document(self, doc_id: str) -> bool:
        return doc_id in self._doc_index()

    def segments_with(self, doc_ids: set[str]) -> set[int]:
        """Indices of the segments holding a live document among ``doc_ids``."""
        index = self._doc_index()
        return {index[d][0] for d in doc_ids if d in index}

    def document_ids(self) -> list[str]:
        return list(self._doc_index())

    def document(self, doc_id: str) -> Document:
        loc = self._doc_index().get(doc_id)
        if loc is None:
            raise QueryError(f"no document with id {doc_id!r}")
        return Document.from_dict(self.segments[loc[0]].documents.get(loc[1]))

    def aspects(self) -> list[str]:
        col = self.columns["aspect"]
        present = set(np.unique(np.asarray(col.codes)[self.live]).tolist())
        return sorted(str(v) for i, v in enumerate(col.values) if v and i in present)

    def aspect_counts(self) -> dict[str, int]:
        """Live passages per section aspect."""
        col = self.columns["aspect"]
        counts = np.bincount(np.asarray(col.codes)[self.live], minlength=len(col.values))
        return {str(v): int(counts[i]) for i, v in enumerate(col.values) if v and counts[i]}

    # -- Store primitives (capr.store.Store; the search pipeline is capr.search.Searcher) ---------------
    backend = Backend.embedded

    @property
    def name(self) -> str:
        return str(self.root)

    @property
    def capabilities(self) -> frozenset[Capability]:
        caps = {Capability.bm25, Capability.tfidf, Capability.exhaustive, Capability.collection_stats,
                Capability.postings, Capability.documents, Capability.generations}
        return frozenset(caps | ({Capability.dense} if self.has_dense else set()))

    def stats(self) -> dict[str, int]:
        return self.counts

    def live_count(self) -> int:
        return int(self.manifest["counts"]["passages"])

    def row_count(self) -> int:
        return len(self)

    def generation_info(self) -> dict[str, Any]:
        return {"generation": str(self.manifest["generation"]), "created": self.manifest.get("created"),
                "segments": len(self.segments)}

    def fields(self) -> list[str]:
        return sorted(self.columns)

    def scorer(self, retriever: Retriever | str):
        r = Retriever(retriever)
        if r not in LEXICAL:
            raise QueryError(f"{r.value} is not a lexical retriever")
        if r not in self._scorers:
            self._scorers[r] = BM25Scorer(self.matrix, self.bm25_params) if r is Retriever.bm25 else TfidfScorer(self.matrix)
        return self._scorers[r]

    def lexical_scores(self, terms: list[str], keys: np.ndarray | None = None,
                       method: Retriever | str = Retriever.bm25) -> np.ndarray:
        """One score per row (0 for rows sharing no term, and for deleted rows); only ``keys`` when given."""
        if self.matrix is None:
            return np.zeros(len(self) if keys is None else len(keys), dtype=np.float32)
        scores = self.scorer(method).scores(terms)
        return scores if keys is None else scores[keys]

    def lexical_top(self, terms: list[str], k: int, flt: np.ndarray | None = None,
                    method: Retriever | str = Retriever.bm25) -> tuple[np.ndarray, np.ndarray]:
        return self.top(self.lexical_scores(terms, None, method), k, flt)

    def top(self, scores: np.ndarray, k: int, flt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows with a positive score among live rows passing the filter."""
        allowed = self.live if flt is None else flt
        scores = np.where(allowed, scores, 0.0)
        candidates = np.flatnonzero(scores > 0)
        if len(candidates) > k:
            candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
        return candidates.astype(np.int64), scores[candidates].astype(np.float32)

    def term_idf(self, terms) -> dict[str, float]:
        if self.matrix is None:
            return {}
        vocab, idf = self.matrix.vocab, self.scorer(Retriever.bm25).idf
        return {t: float(idf[vocab[t]]) for t in terms if t in vocab}

    def aspect_flags(self, keys: np.ndarray, aspect: str) -> np.ndarray:
        return np.asarray(self.columns["aspect"].mask(aspect))[keys]

    def has_aspect(self, aspect: str) -> bool:
        return bool(np.asarray(self.columns["aspect"].mask(aspect)).any())

    def restrict(self, flt: np.ndarray | None, keys: np.ndarray) -> np.ndarray:
        """The filter narrowed to the given rows."""
        mask = np.zeros(len(self), dtype=bool)
        mask[keys] = True
        return (self.live if flt is None else flt) & mask

    def document_rows(self, mask: np.ndarray) -> np.ndarray:
        """Live rows of every document that has a row in ``mask``."""
        codes = np.asarray(self.columns["doc_id"].codes)
        return np.isin(codes, np.unique(codes[mask])) & self.live

    def passages(self, keys: np.ndarray) -> list[Passage]:
        return [self.passage(int(r)) for r in keys]

    def keys_of(self, pids: list[str]) -> np.ndarray:
        rows = self.pid_rows()
        return np.asarray([rows[p] for p in pids], dtype=np.int64)

    # -- dense ------------------------------------------------------------------
    def encoder(self):
        if not self.has_dense:
            raise QueryError(f"{self.root}: index has no vectors; build it without --lexical-only")
        if self._encoder is None:
            self._encoder = _encoder(self.manifest["dense"])
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
    def check_aspect(self, aspect: str) -> None:
        check_aspect(aspect, self.aspect_counts())

    def compile_filter(self, filters: "Filters") -> np.ndarray | None:
        """Rows passing every clause: a {field: value} dict (equality) or clauses/clause strings
        with ranges and sets (see capr.filters). An equality or set no passage has is an error
        (most often a typo); an empty range is a legitimate empty answer."""
        clauses = as_clauses(filters)
        if not clauses:
            return None
        mask = self.live.copy()
        tables = self.__dict__.setdefault("_filter_tables", {})  # per column, built on its first range filter
        for c in clauses:
            col = self.columns.get(c.field)
            if col is None:
                raise QueryError(f"unknown filter field {c.field!r}; filterable fields: {', '.join(sorted(self.columns))}")
            norm = (lambda v: normalize_aspect(str(v))) if c.field == "aspect" else None

            def table(f=c.field, col=col):
                return tables[f] if f in tables else tables.setdefault(f, ValueTable(col.values))

            m = column_mask(c, col.values, col.codes, norm, col._lookup, table) & self.live
            if not m.any() and c.op in ("=", "in"):
                values = [str(v) for v in col.values if v is not None]
                close = difflib.get_close_matches(str(c.values[0]), values, n=5, cutoff=0.6)
                hint = f" (close: {', '.join(close)})" if close else ""
                shown = f"{c.field}={c.value!r}" if c.op == "=" else str(c)
                raise QueryError(f"no passage has {shown}{hint}")
            mask &= m
        return mask

    filter_mask = compile_filter  # the name the cases pipeline and CDV use

    def explain_empty(self, filters: dict[str, Any]) -> None:
        """Nothing to add: compile_filter already refused a value no passage has."""


def build_index(
    documents: Iterable[Document],
    root: str | Path,
    segmenter: SegmenterConfig | None = None,
    analyzer: AnalyzerConfig | None = None,
    bm25: BM25Params | None = None,
    report: ReadReport | None = None,
    dense: "EncoderConfig | None" = None,
) -> Index:
    """Index ``documents`` into ``root``, atomically replacing any index already there."""
    with IndexWriter(root, segmenter, analyzer, bm25, report, dense=dense) as w:
        for doc in documents:
            w.add(doc)
    return Index.load(root)


def load_index(root: str | Path) -> Index:
    return Index.load(root)
