"""capr's index: passages, documents, a lexical term matrix, filter columns and dense vectors in one directory."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
import weakref
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from capr._version import __version__
from capr.corpus.report import ReadReport, admit_document
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import CaprError, IndexError_, QueryError, WriteError
from capr.filters import check_range_bound_in_parts, column_mask, is_range
from capr.index import directory as dirs
from capr.text.analyzer import Analyzer, AnalyzerConfig
from capr.index.atomic import fsync_dir, write_json, write_npy
from capr.index.lexical import TermMatrix, TfidfScorer
from capr.index.merge import MergePolicy, merge_columns, merge_matrices, merge_segments
from capr.index.reading import DamagedIndexError, damaged, load_npy, read_json
from capr.index.segment import SEGMENTS, Segment, SegmentBuilder
from capr.index.store import Column
from capr.records import LEXICAL, Retriever
from capr.text import bm25
from capr.text.bm25 import BM25Params
from capr.records import DEFAULT_MAX_DOC_CHARS, Document, Passage, check_doc_id

if TYPE_CHECKING:
    from capr.models.encoder import EncoderConfig

FORMAT_VERSION = 2
DEFAULT_HNSW_THRESHOLD = 50_000  # segments with at least this many passages get an HNSW graph
# One write (a whole `capr index`) is cut into segments of this many passages, so its memory does not grow with the
# input (the writer holds one segment's postings and records at a time); searches merge segments' statistics.
DEFAULT_SEGMENT_PASSAGES = 250_000
# Tiered merging at every commit (see MergePolicy): the segment count stays bounded however many small writes come.
DEFAULT_MERGE_POLICY = MergePolicy(max_passages=DEFAULT_SEGMENT_PASSAGES)
# The new segment of a commit up to this size is handed to the reader from the writer's memory (a bigger one is
# memory-mapped from disk instead, so `capr index` of a large corpus does not keep its postings in RAM).
_ADOPT_MAX_PASSAGES = 50_000
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
        base: "Index | None" = None,
        merge_policy: MergePolicy | None = DEFAULT_MERGE_POLICY,
        background_cleanup: bool = False,
        lock_wait_s: float = 0.0,
    ) -> None:
        """``base``: a loaded generation of ``root`` to update (the service passes the one it serves): used
        when it is still the current generation, so a one-document write reuses its segments' loaded id maps
        instead of opening the index again. ``merge_policy``: which segments each commit merges (None: none).
        ``background_cleanup``: folders the commit makes obsolete are deleted by a daemon thread (a long-running
        process such as the service; a CLI process must not exit before they are gone). ``lock_wait_s``: how long to
        wait for another process's write to end (then WriterBusy)."""
        if mode not in ("create", "update"):
            raise ValueError(f"mode must be 'create' or 'update', not {mode!r}")
        if max_doc_chars <= 0:
            raise CaprError(f"the document size limit must be positive, got {max_doc_chars}")
        if segment_passages <= 0:
            raise CaprError(f"the segment size must be positive, got {segment_passages}")
        self.max_doc_chars = max_doc_chars
        self.segment_passages = segment_passages
        self._flushed: list[tuple[str, int, int, set[str]]] = []  # (segment, passages, documents, terms) written so far
        self.root = Path(root)
        self.mode = mode
        # segments a write cuts at full size are never merged again (merging exists for the small ones)
        self.merge_policy = (dataclasses.replace(merge_policy, max_passages=min(merge_policy.max_passages, segment_passages))
                             if merge_policy is not None else None)
        self._compact = False
        self._merged: list[str] = []  # segments merged by this commit (removed again if it fails)
        self._given_base = base
        self._background_cleanup = background_cleanup
        self._builder_done = False
        self._last_built: tuple[str, SegmentBuilder] | None = None
        self.report = report or ReadReport()
        self.progress = progress
        # What a create made that was not there (the folder and the parents it needed, else the LOCK file and
        # segments/ in an empty folder given as --out): a write that fails before its first commit removes
        # them, so a failed `capr index` leaves nothing behind; it never touches anything older.
        self._created: list[Path] = []
        try:
            if mode == "update":
                dirs.current_generation(self.root)  # clear error when there is no index to update
            else:
                self._created = _missing(self.root)
                dirs.prepare_root(self.root)
            # Lock before reading the base generation: a concurrent writer's commit must not be lost.
            self._lock = dirs.write_lock(self.root, lock_wait_s)
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
            self._remove_created()
            self._lock.__exit__(None, None, None)
            raise self._write_error(e) from None
        except BaseException:
            self._remove_created()
            self._lock.__exit__(None, None, None)
            raise
        self._new_ids: set[str] = set()
        # Passage ids a source assigned (section ids): the only ones that can collide across documents. Ids capr
        # makes ("DOC#sN") are unique once document ids are, so they are not kept — one write's memory must not
        # grow with its passages.
        self._source_pids: set[str] = set()
        self._delete: set[str] = set()  # documents of earlier segments to tombstone
        # ids added that replace a document of the generation this writer updates (read under the lock: a write
        # another process committed while this one waited for the lock is counted as it is)
        self.replaced: set[str] = set()
        self._t0 = time.time()
        self._queries_prepared = False

    def _configure(self, mode, segmenter, analyzer, bm25, dense, hnsw_threshold) -> None:
        if mode == "update":
            current = dirs.current_generation(self.root)
            given = self._given_base
            if given is not None and Path(given.root) == self.root and given.gen.name == current.name:
                self.base: Index | None = given
            else:  # another process committed since: open the current generation, reusing given's segments
                self.base = Index(self.root, current, previous=given)
            self.base.check_files()  # refuse a damaged index before committing anything on top of it
            m = self.base.manifest
            self.segmenter = SegmenterConfig(**m["segmenter"])
            self.analyzer_config = AnalyzerConfig.from_dict(m["analyzer"])
            self.bm25 = BM25Params(**m["bm25"])
            self.dense_info = m.get("dense")
            self.hnsw_threshold = m.get("hnsw_threshold", hnsw_threshold)
            self.analyzer = self.base.analyzer  # the same settings: no second stemmer and stopword set
            return
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
        builder.on_unfilterable = self.report.unfilterable_value
        if self._dense_encoder is not None:
            # a model trained with document context reads each passage with its title (and heading)
            builder.dense_text = self._dense_encoder.passage_text
        return builder

    @property
    def n_documents(self) -> int:
        """Documents added by this writer so far (new or replacing one with the same id)."""
        return len(self._new_ids)

    @property
    def n_passages(self) -> int:
        """Passages written by this writer so far (after commit: all of them, each counted once)."""
        pending = 0 if self._builder_done else self.builder.n_passages
        return sum(n for _, n, _, _ in self._flushed) + pending

    def record_search_profile(self, recorded: Mapping[str, Any]) -> None:
        """Keeps ``recorded`` (how the index is to be searched: ``capr.search.config.record_profile``) in the manifest
        beside the vectors, where the search layer reads it back (:meth:`Index.dense_manifest`); the index itself
        never reads it."""
        if self.dense_info is None:
            raise IndexError_(f"{self.root}: a search profile is kept beside the vectors, and this index has none")
        self.dense_info.update(recorded)

    def _finish_builder(self) -> str:
        """Encodes (dense) and writes the segment being built; it becomes part of the index only at commit."""
        vectors = None
        if self.dense_info and self.builder.n_passages:
            self._note(f"encoding {self.builder.n_passages} passages")
            vectors = self._dense_encoder.encode_passages(self.builder.texts,
                                                          progress=getattr(self.progress, "advance_encoding", None))
            self.dense_info = {**self.dense_info, "dim": int(vectors.shape[1])}
            self._prepare_queries()
        return self.builder.finish(vectors, self.hnsw_threshold, self._note)

    def _prepare_queries(self) -> None:
        """The encoder's torch-free query side is exported here, once per model, while torch is loaded for the
        passages: a first search would otherwise pay for it (capr.models.onnx_queries)."""
        if not self._queries_prepared:
            self._queries_prepared = True
            reason = self._dense_encoder.prepare_queries()
            if reason:
                self._note(f"queries will be encoded with torch: {reason}")

    def _flush(self, more: bool = True) -> None:
        """A long write is cut into segments of ``segment_passages``: the writer holds one segment's postings at a
        time, so indexing a file of any size takes the same memory (a crash leaves no generation naming them).
        ``more``: start the next segment (not at commit)."""
        b = self.builder
        name = self._finish_builder()
        self._flushed.append((name, b.n_passages, len(b.doc_ids), b.terms))
        if more:
            self.builder = self._new_builder()
        else:
            self._builder_done = True  # its passages are in _flushed now
            self._last_built = (name, b)

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def add(self, doc: Document) -> int:
        """Segment, analyse and store one document (replacing an indexed one with the same id)."""
        admitted = admit_document(doc, self.report, self.max_doc_chars, self._new_ids)
        if admitted is None:
            return 0
        source, record = admitted
        passages = segment(doc, self.segmenter, lazy_sentences=True)  # stored sentences: computed when read
        if not passages:
            self.report.empty += 1
            return 0
        pids = [p.pid for p in passages]
        own = f"{doc.doc_id}#s"
        sourced = [p for p in pids if not p.startswith(own)]
        clash = self._source_pids.intersection(pids) or any(  # a source id shaped like another document's "DOC#sN"
            (m := _MADE_PID.match(p)) is not None and m.group(1) in self._new_ids for p in sourced)
        if len(set(pids)) != len(pids) or clash:
            self.report.bad(source, "duplicate passage ids", record)
            return 0
        if self.base is not None and self.base.has_document(doc.doc_id):
            self._delete.add(doc.doc_id)
            self.replaced.add(doc.doc_id)
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
        for name in [n for n, *_ in self._flushed] + self._merged:  # finished here, named by no generation
            shutil.rmtree(self.root / SEGMENTS / name, ignore_errors=True)
        self._remove_created()
        self._lock.__exit__(None, None, None)

    def _remove_created(self) -> None:
        """Removes what this create made (see ``_created``) if it committed nothing. Called with the lock still
        held, so no other writer is using them; never once a generation is current (CURRENT exists)."""
        created, self._created = self._created, []
        if not created or dirs.is_index_dir(self.root):
            return
        for p in created:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)

    def _note(self, what: str) -> None:
        if self.progress:
            self.progress(what)

    def compact(self) -> None:
        """Merge every segment into one at commit (``capr compact``): the index then equals a fresh rebuild
        of its live documents, row for row."""
        self._compact = True

    def _live_masks(self) -> list[list[Any]]:
        """[name, Segment or None, passage live mask, document live mask, unchanged since the base] per segment
        of the new generation, fully deleted segments left out. Only segments losing documents get new masks:
        the work is proportional to the documents deleted, not to the index."""
        entries: list[list[Any]] = []
        if self.base is not None:
            hit = self.base.segments_with(self._delete) if self._delete else set()
            for si, (seg, plive, dlive) in enumerate(zip(self.base.segments, self.base.seg_live, self.base.seg_doc_live)):
                if si in hit:
                    gone = [r for d in self._delete if (r := seg.doc_rows.get(d)) is not None and dlive[r]]
                    dlive = dlive.copy()
                    dlive[gone] = False
                    plive = plive & ~np.isin(seg.passage_doc_rows, gone)
                if not plive.any():
                    continue  # fully deleted segments are dropped, and collected after commit
                entries.append([seg.name, seg, plive, dlive, si not in hit])
        for new_segment, n_pass, n_docs, _terms in self._flushed:
            seg = None
            if self._last_built is not None and self._last_built[0] == new_segment and n_pass <= _ADOPT_MAX_PASSAGES:
                seg = Segment(self.root / SEGMENTS / new_segment).adopt(self._last_built[1])
            entries.append([new_segment, seg, np.ones(n_pass, dtype=bool), np.ones(n_docs, dtype=bool), False])
        return entries

    def _merge(self, entries: list[list[Any]]) -> list[list[Any]]:
        """Applies the merge policy (or compaction) until it asks for nothing more."""
        def segment_of(e: list[Any]) -> Segment:
            if e[1] is None:
                e[1] = Segment(self.root / SEGMENTS / e[0])
            return e[1]

        rounds = 0
        while entries:
            if self._compact:
                windows = [(0, len(entries))] if len(entries) > 1 or not entries[0][2].all() else []
            elif self.merge_policy is not None:
                windows = self.merge_policy.find_merges([int(np.count_nonzero(e[2])) for e in entries],
                                                        [len(e[2]) for e in entries])
            else:
                windows = []
            if not windows or rounds > 64:
                break
            rounds += 1
            for lo, hi in reversed(windows):  # from the end, so earlier windows keep their positions
                self._note(f"merging {hi - lo} segment(s)")
                parts = [(segment_of(e), e[2], e[3]) for e in entries[lo:hi]]
                name = merge_segments(self.root, parts, self.hnsw_threshold)
                self._merged.append(name)
                seg = Segment(self.root / SEGMENTS / name)
                entries[lo:hi] = [[name, seg, np.ones(seg.n_passages, dtype=bool), np.ones(seg.n_documents, dtype=bool), False]]
            if self._compact:
                break
        return entries

    def commit(self) -> "Index":
        if self._closed:
            raise IndexError_("writer already closed")
        gen_tmp = None
        try:
            if self.builder.n_passages:
                self._flush(more=False)
            else:
                self.builder.abort()
            entries = self._merge(self._live_masks())
            gen_tmp, name = dirs.new_generation(self.root)
            (gen_tmp / "live").mkdir()
            live_docs = live_passages = 0
            for seg_name, _seg, plive, dlive, unchanged in entries:
                for suffix, mask in ((".npy", plive), (".docs.npy", dlive)):
                    dst = gen_tmp / "live" / f"{seg_name}{suffix}"
                    if unchanged and self.base is not None:
                        try:  # the base generation's mask is final and already on disk: link it, do not rewrite it
                            os.link(self.base.gen / "live" / f"{seg_name}{suffix}", dst)
                            continue
                        except OSError:
                            pass
                    write_npy(dst, mask, atomic=False)
                live_passages += int(np.count_nonzero(plive))
                live_docs += int(np.count_nonzero(dlive))
            # the filterable fields are those a live passage has, as in a rebuild: a field only deleted or replaced
            # documents had is not one. A segment's fields that no live passage has are kept in the manifest, so a
            # commit looks again only at the segments it deletes from (a manifest without them: at every segment
            # with deleted passages, once)
            base_dead = self.base.manifest.get("dead_fields") if self.base is not None else {}
            fields: set[str] = set()
            dead_fields: dict[str, list[str]] = {}
            for seg_name, seg, plive, _dlive, unchanged in entries:
                names = seg.fields if seg is not None else \
                    read_json(self.root / SEGMENTS / seg_name / "segment.json")["fields"]
                if plive.all():
                    dead: list[str] = []
                elif unchanged and base_dead is not None:
                    dead = list(base_dead.get(seg_name, []))
                else:
                    dead = sorted(set(names).difference(seg.live_fields(plive)))
                if dead:
                    dead_fields[seg_name] = dead
                fields.update(f for f in names if f not in dead)
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
                "segments": [e[0] for e in entries],
                "counts": {"documents": live_docs, "passages": live_passages},
                "fields": sorted(fields),
                "dead_fields": dead_fields,
                "write_seconds": round(time.time() - self._t0, 3),
            }
            write_json(gen_tmp / "manifest.json", manifest, atomic=False)
            fsync_dir(gen_tmp / "live")
            final = dirs.commit_generation(self.root, gen_tmp, name, self._background_cleanup)
        except BaseException as e:
            if gen_tmp is not None and _names_current(self.root, name):
                # CURRENT already names the new generation: the write is committed and only the clean-up after
                # it was cut short (Ctrl-C, SIGTERM, a failed unlink). Aborting now would delete its segments.
                if not isinstance(e, Exception):
                    self._closed = True
                    self._lock.__exit__(None, None, None)
                    raise
                final = self.root / name
            else:
                if gen_tmp is not None:
                    shutil.rmtree(gen_tmp, ignore_errors=True)
                self.abort()
                if isinstance(e, OSError):
                    raise self._write_error(e) from None
                raise
        self._closed = True
        self._lock.__exit__(None, None, None)
        reuse = {e[0]: e[1] for e in entries if e[1] is not None}
        return Index(self.root, final, previous=self.base, reuse=reuse)


def _names_current(root: Path, name: str) -> bool:
    try:
        return dirs.current_name(root) == name
    except CaprError:
        return False


def _missing(root: Path) -> list[Path]:
    """What creating an index at ``root`` will make: the topmost folder of its path that does not exist yet
    (with everything under it), else the LOCK file and segments/ folder when the folder lacks them."""
    if not root.exists():
        top = root
        while not top.parent.exists():
            top = top.parent
        return [top]
    return [p for p in (root / "LOCK", root / SEGMENTS) if not p.exists()]


_UNLOADED = object()
_OPEN_ATTEMPTS = 100  # generations a reader may see come and go while opening one (each is a full commit)


def _nothing() -> None:
    pass


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


class _SegmentedBM25:
    """Lucene BM25 over a generation's segments. N and the average length are summed from per-segment
    totals minus deleted rows; a term's document frequency is, per segment, its posting count minus its
    postings on deleted rows (found by bisection among the few deleted rows) — both proportional to what
    was deleted, so a commit changes them without a pass over the index. Score arithmetic is the single
    matrix's, term by term in query order, so scores equal BM25 over the merged matrix."""

    def __init__(self, index: "Index") -> None:
        self.index = index
        self.params = index.bm25_params
        self.dead = [np.flatnonzero(~live) for live in index.seg_live]
        self.n = int(sum(len(live) - len(d) for live, d in zip(index.seg_live, self.dead)))
        total = 0.0
        for seg, dead in zip(index.segments, self.dead):
            total += seg.total_len - (float(np.asarray(seg.matrix.doc_len)[dead].astype(np.float64).sum()) if len(dead) else 0.0)
        self.avgdl = (total / self.n if self.n else 0.0) or 1.0
        self._norms: list[np.ndarray | None] = [None] * len(index.segments)
        self._idf: dict[str, np.float32] = {}
        self._dead_rows: np.ndarray | None = None

    def norm(self, si: int) -> np.ndarray:
        """k1·(1 − b + b·dl/avgdl) for segment si's rows: per generation (avgdl moves with every write)."""
        nrm = self._norms[si]
        if nrm is None:
            dl = np.asarray(self.index.segments[si].matrix.doc_len)
            nrm = self._norms[si] = bm25.length_norm(dl, self.avgdl, self.params)
        return nrm

    def df(self, term: str) -> float | None:
        """Live passages holding ``term`` (None when no segment has it)."""
        found, df = False, 0
        for seg, dead in zip(self.index.segments, self.dead):
            m = seg.matrix
            j = m.vocab.get(term)
            if j is None:
                continue
            found = True
            lo, hi = int(m.indptr[j]), int(m.indptr[j + 1])
            df += hi - lo
            if len(dead):
                post = m.indices[lo:hi]
                pos = np.searchsorted(post, dead)
                ok = pos < len(post)
                df -= int(np.count_nonzero(np.asarray(post)[pos[ok]] == dead[ok]))
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
            m = seg.matrix
            ids = [(m.vocab[t], idf[t]) for t in tokens if t in idf and t in m.vocab]
            if not ids:
                continue
            o = out[int(index.offsets[si]):int(index.offsets[si + 1])]
            norm = self.norm(si)
            for j, w in ids:
                lo, hi = m.indptr[j], m.indptr[j + 1]
                docs = m.indices[lo:hi]
                tf = m.tf[lo:hi]
                o[docs] += bm25.term_score(w, tf, norm[docs])
        out[self.dead_rows] = 0.0
        return out

    @property
    def dead_rows(self) -> np.ndarray:
        """Rows of deleted passages (index-wide), for zeroing their scores."""
        if self._dead_rows is None:
            self._dead_rows = np.flatnonzero(~self.index.live)
        return self._dead_rows


class Index:
    """A loaded generation of an index directory: a consistent, read-only snapshot."""

    def __init__(self, root: Path, gen: Path, previous: "Index | None" = None,
                 reuse: Mapping[str, Segment] | None = None) -> None:
        """``previous``: an earlier generation of the same index whose loaded segments (memory maps, id maps,
        columns) are reused for the segments both name — segments are immutable — so opening a new generation
        costs what changed (its live masks, new segments), not the index (issue 19)."""
        self.root = root
        self.gen = gen
        manifest_path = gen / "manifest.json"
        # pinned before anything of it is read: no writer deletes it until this snapshot is closed or dropped
        self._unpin = weakref.finalize(self, dirs.pin_generation(gen) or _nothing)
        self.manifest = read_json(manifest_path)
        if not isinstance(self.manifest, dict):
            raise damaged(manifest_path, f"not a JSON object (a {type(self.manifest).__name__})")
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise IndexError_(
                f"{root}: index format {self.manifest.get('format_version')} is not supported "
                f"(this capr reads format {FORMAT_VERSION}); rebuild it with `capr index`"
            )
        try:  # valid JSON that lacks a setting capr wrote is as damaged as invalid JSON
            same_settings = previous is not None and previous.manifest["analyzer"] == self.manifest["analyzer"]
            self.analyzer = previous.analyzer if same_settings else Analyzer(AnalyzerConfig.from_dict(self.manifest["analyzer"]))
            self.bm25_params = BM25Params(**self.manifest["bm25"])
            names = [str(n) for n in self.manifest["segments"]]
            self.manifest["counts"]["passages"], self.manifest["fields"]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise damaged(manifest_path, f"not a capr manifest ({type(e).__name__}: {e})") from None
        except CaprError as e:
            raise IndexError_(f"{root}: {e}") from None
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
        self.columns: Mapping[str, Column] = _MergedColumns(self.segments, sizes, self.manifest["fields"])
        self._scorers: dict[Retriever, Any] = {}
        self._pid_rows: dict[str, int] | None = None
        self._doc_rows: dict[str, tuple[int, int]] | None = None
        self._vectors: list | None = None
        self._encoder = None
        self._bm25: _SegmentedBM25 | None = None
        self._counts: dict[str, int] | None = None
        self._values: dict[str, dict[str, tuple[Any, int]]] = {}  # see _value_counts

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
        c = self.manifest["counts"]
        if self._matrix is not _UNLOADED or len(self.segments) <= 1:  # merged already, or merging is free
            vocab = int((self.matrix.document_frequency() > 0).sum()) if self.matrix is not None else 0
        else:  # without merging: the union of each segment's live terms
            vocab = len(set().union(*(_live_terms(s.matrix, live) for s, live in zip(self.segments, self.seg_live))))
        return {"documents": c["documents"], "passages": c["passages"], "vocabulary": vocab}

    @property
    def has_dense(self) -> bool:
        return bool(self.manifest.get("dense"))

    def includes_titles(self) -> bool:
        """Whether each passage was indexed (lexical text, and what a context-free encoder embedded) with its
        document title in front."""
        return bool(self.manifest.get("segmenter", {}).get("include_title"))

    def dense_manifest(self) -> dict[str, Any]:
        """What the index records about its vectors: the encoder and, for `capr adapt` indexes, how it was adapted
        and the hybrid fusion chosen for it."""
        return dict(self.manifest.get("dense") or {})

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
        rec = seg.passages.get(local)
        doc_meta = seg.documents.get(rec.pop("doc_row"))["metadata"]
        p = Passage.from_dict(rec)
        p.metadata = doc_meta
        return p

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
            i = self.segments[si].pid_rows.get(pid)
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
                for i in np.flatnonzero(dlive):
                    rows[seg.doc_ids[i]] = (si, int(i))
            self._doc_rows = rows
        return self._doc_rows

    def _find_document(self, doc_id: str) -> tuple[int, int] | None:
        """(segment, document row) of the live document ``doc_id``: a lookup per segment in maps that each
        segment builds once, not a map of the whole index per generation."""
        for si in range(len(self.segments) - 1, -1, -1):
            i = self.segments[si].doc_rows.get(doc_id)
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
        return Document.from_dict(self.segments[loc[0]].documents.get(loc[1]))

    def _value_counts(self, field: str) -> dict[str, tuple[Any, int]]:
        """Per distinct value (by filter key, capr.filters.value_key) of a column that a live passage has:
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
        return int(self.manifest["counts"]["passages"])

    def row_count(self) -> int:
        return len(self)

    def generation_info(self) -> dict[str, Any]:
        return {"generation": str(self.manifest["generation"]), "created": self.manifest.get("created"),
                "segments": len(self.segments)}

    def fields(self) -> list[str]:
        return sorted(self.manifest["fields"])

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

    def bm25(self) -> "_SegmentedBM25":
        """BM25 over the segments as they are: collection statistics (live passages, document frequencies,
        average length) combined from per-segment counts, scores computed segment by segment into one row
        array. Equal to BM25 over the merged matrix; no whole-index structure is built."""
        if self._bm25 is None:
            self._bm25 = _SegmentedBM25(self)
        return self._bm25

    def lexical_scores(self, terms: list[str], keys: np.ndarray | None = None,
                       method: Retriever | str = Retriever.bm25) -> np.ndarray:
        """One score per row (0 for rows sharing no term, and for deleted rows); only ``keys`` when given."""
        if not self.segments:
            return np.zeros(len(self) if keys is None else len(keys), dtype=np.float32)
        scores = self.scorer(method).scores(terms)
        return scores if keys is None else scores[keys]

    def lexical_top(self, terms: list[str], k: int, flt: np.ndarray | None = None,
                    method: Retriever | str = Retriever.bm25) -> tuple[np.ndarray, np.ndarray]:
        return self.top(self.lexical_scores(terms, None, method), k, flt)

    def top(self, scores: np.ndarray, k: int, flt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k best rows with a positive score among live rows passing the filter (in row order); of rows tied
        with the k-th best score, the first ones (ties break by insertion order)."""
        allowed = self.live if flt is None else flt
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
        """Whether a live passage has this aspect (an aspect only deleted passages had is not one, as in a rebuild)."""
        return Column._key(aspect) in self._value_counts("aspect")

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
                out[lo:hi] = np.isin(docs, np.unique(docs[sel])) & live
        return out

    def passages(self, keys: np.ndarray) -> list[Passage]:
        return [self.passage(int(r)) for r in keys]

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


def load_index(root: str | Path, previous: Index | None = None) -> Index:
    """The current generation of ``root``; ``previous``: an earlier one whose loaded segments are reused."""
    return Index.load(root, previous=previous)


def compact_index(root: str | Path, progress: Any = None, lock_wait_s: float = 0.0) -> Index:
    """Merge every segment of the index at ``root`` into one, dropping deleted rows, in one commit (readers keep
    the previous generation until then). The result equals a fresh rebuild of the live documents in their
    current order: same rows, vocabulary, statistics and scores."""
    writer = IndexWriter(root, mode="update", progress=progress, lock_wait_s=lock_wait_s)
    writer.compact()
    return writer.commit()
