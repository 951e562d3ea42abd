"""The index writer: admitted documents' passages into new segments, deletes into new live masks, and one atomic
commit that makes the change a new generation (see capr.index.directory)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from capr.corpus.passages import Admission, Admitted
from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError, IndexError_, QueryError, WriteError
from capr.index import directory as dirs
from capr.index.atomic import fsync_dir, write_npy
from capr.index.compaction import Entry, base_entries, generation_fields, merge_entries, new_entry
from capr.index.index import Index, encoder_of
from capr.index.merge import MergePolicy
from capr.index.meta import FORMAT_VERSION, IndexMeta
from capr.index.analysis import CounterProcess
from capr.index.builder import SegmentBuilder
from capr.index.segment import SEGMENTS, Segment
from capr.records import DEFAULT_MAX_DOC_CHARS, Document, check_doc_id
from capr.text.analyzer import Analyzer, AnalyzerConfig
from capr.text.bm25 import BM25Params

if TYPE_CHECKING:
    from capr.models.encoder import EncoderConfig

DEFAULT_HNSW_THRESHOLD = 50_000  # segments with at least this many passages get an HNSW graph
# One write (a whole `capr index`) is cut into segments of this many passages, so its memory does not grow with the
# input (the writer holds one segment's postings and records at a time); searches merge segments' statistics.
DEFAULT_SEGMENT_PASSAGES = 250_000
# Tiered merging at every commit (see MergePolicy): the segment count stays bounded however many small writes come.
DEFAULT_MERGE_POLICY = MergePolicy(max_passages=DEFAULT_SEGMENT_PASSAGES)
# The new segment of a commit up to this size is handed to the reader from the writer's memory (a bigger one is
# memory-mapped from disk instead, so `capr index` of a large corpus does not keep its postings in RAM).
_ADOPT_MAX_PASSAGES = 50_000


class IndexWriter:
    """Creates an index (``mode="create"``, replacing whatever ``root`` held) or updates one
    (``mode="update"``: add and delete documents). ``commit`` makes the change current in one
    atomic step; until then, and if the process dies, readers see the previous generation.

    Documents enter through ``admission`` (capr.corpus.passages: the checks and segmentation, the same for every
    store); :meth:`add_passages` writes what it admitted, and :meth:`add` does both for one document."""

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
        build_key: dict[str, Any] | None = None,
        resume: bool = True,
        analysis_process: bool = False,
    ) -> None:
        """``base``: a loaded generation of ``root`` to update (the service passes the one it serves): used
        when it is still the current generation, so a one-document write reuses its segments' loaded id maps
        instead of opening the index again. ``merge_policy``: which segments each commit merges (None: none).
        ``background_cleanup``: folders the commit makes obsolete are deleted by a daemon thread (a long-running
        process such as the service; a CLI process must not exit before they are gone). ``lock_wait_s``: how long to
        wait for another process's write to end (then WriterBusy). ``build_key`` (a create): what is being indexed
        (the source, as capr.corpus.files.source_fingerprint gives it): each segment finished is then recorded in a
        journal, and a create given the same key and settings after this one was killed continues after the
        documents those segments hold (see :meth:`admitted`) instead of starting over; ``resume=False`` starts over.
        ``analysis_process``: passages are analysed in a child process while this one reads, admits, segments and
        stores the next documents (a build on a machine with more than one core; the same index)."""
        if mode not in ("create", "update"):
            raise ValueError(f"mode must be 'create' or 'update', not {mode!r}")
        if max_doc_chars <= 0:
            raise CaprError(f"the document size limit must be positive, got {max_doc_chars}")
        if segment_passages <= 0:
            raise CaprError(f"the segment size must be positive, got {segment_passages}")
        self.segment_passages = segment_passages
        self._flushed: list[tuple[str, int, int]] = []  # (segment, passages, documents) written so far
        self._worker: CounterProcess | None = None
        self._read = 0  # documents offered to this writer (admitted or not)
        self._skip = 0  # documents of the source an interrupted create already wrote (see _resume)
        self._resumed_ids: list[str] = []  # their ids, in the order they were written
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
            self.admission = Admission(self.segmenter, self.report, max_doc_chars)
            if mode == "create" and (build_key is None or not resume):
                dirs.remove_journal(self.root)  # an interrupted create of something else: its segments are stale
            self._journal_key = self._resume(build_key) if mode == "create" and build_key is not None else None
            dirs.remove_stale(self.root)
            self._dense_encoder = encoder_of(self.dense_info)
            self._worker = CounterProcess(self.analyzer_config) if analysis_process else None
            self.builder = self._new_builder()
        except OSError as e:
            self._stop_worker()
            self._remove_created()
            self._lock.__exit__(None, None, None)
            raise self._write_error(e) from None
        except BaseException:
            self._stop_worker()
            self._remove_created()
            self._lock.__exit__(None, None, None)
            raise
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
            meta = self.base.meta
            self.segmenter = meta.segmenter
            self.analyzer_config = meta.analyzer
            self.bm25 = meta.bm25
            self.dense_info = meta.dense
            self.hnsw_threshold = meta.hnsw_threshold if meta.hnsw_threshold is not None else hnsw_threshold
            self.analyzer = self.base.analyzer  # the same settings: no second stemmer and stopword set
            return
        self.base = None
        self.segmenter = segmenter or SegmenterConfig()
        self.analyzer_config = analyzer or AnalyzerConfig()
        self.bm25 = bm25 or BM25Params()
        self.dense_info = {"encoder": dense.to_dict()} if dense is not None else None
        self.hnsw_threshold = hnsw_threshold
        self.analyzer = Analyzer(self.analyzer_config)

    def _new_builder(self) -> SegmentBuilder:
        builder = SegmentBuilder(self.root, self.segmenter, self.analyzer, self._worker)
        builder.keep_texts = self._dense_encoder is not None
        builder.on_unfilterable = self.report.unfilterable_value
        if self._dense_encoder is not None:
            # a model trained with document context reads each passage with its title (and heading)
            builder.dense_text = self._dense_encoder.passage_text
        return builder

    def _resume(self, build_key: dict[str, Any]) -> dict[str, Any]:
        """The journal key of this create; when an interrupted create of the same key left segments, takes them as
        written (their documents are skipped when read again, see :meth:`admitted`)."""
        key = {"source": build_key, "format": FORMAT_VERSION, "segmenter": dataclasses.asdict(self.segmenter),
               "analyzer": self.analyzer_config.to_dict(), "bm25": dataclasses.asdict(self.bm25),
               "dense": self.dense_info, "segment_passages": self.segment_passages,
               "max_doc_chars": self.admission.max_doc_chars}
        key = json.loads(json.dumps(key))  # as the journal stores it (tuples become lists)
        journal = dirs.read_journal(self.root)
        if journal is None or journal.get("key") != key:
            dirs.remove_journal(self.root)  # another create's: its segments are stale
            return key
        try:
            segments = [Segment(self.root / SEGMENTS / str(name)) for name, *_ in journal["segments"]]
        except IndexError_:  # a segment of it is gone or damaged: start over
            return key
        for seg in segments:
            self.admission.doc_ids.update(seg.doc_ids)
            self.admission.source_pids.update(seg.sourced)
            self._resumed_ids.extend(seg.doc_ids)
        self._flushed = [(seg.name, seg.n_passages, seg.n_documents) for seg in segments]
        if self.dense_info and segments and (vectors := segments[0].vectors()) is not None:
            self.dense_info = {**self.dense_info, "dim": int(vectors.vectors.shape[1])}
        self._skip = int(journal["documents_read"])
        self._note(f"resuming an interrupted build: {len(segments)} segment(s), "
                   f"{sum(n for _, n, _ in self._flushed):,} passages of "
                   f"{len(self._resumed_ids):,} documents already written")
        return key

    @property
    def max_doc_chars(self) -> int:
        return self.admission.max_doc_chars

    @property
    def n_documents(self) -> int:
        """Documents added by this writer so far (new or replacing one with the same id)."""
        return len(self.admission.doc_ids)

    @property
    def n_passages(self) -> int:
        """Passages written by this writer so far (after commit: all of them, each counted once)."""
        pending = 0 if self._builder_done else self.builder.n_passages
        return sum(n for _, n, _ in self._flushed) + pending

    def record_search_profile(self, recorded: dict[str, Any]) -> None:
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
        self._flushed.append((name, b.n_passages, len(b.doc_ids)))
        if self._journal_key is not None and more:
            dirs.write_journal(self.root, {"key": self._journal_key, "segments": [list(f) for f in self._flushed],
                                           "documents_read": self._read})
        if more:  # a long write's milestones; the last segment is said by the write's own summary
            self._note(f"segment {name} written: {sum(n for _, n, _ in self._flushed):,} passages so far")
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
        """Admit, segment, analyse and store one document (replacing an indexed one with the same id); returns its
        passages written (0 for a document the admission refused or found empty)."""
        self._read += 1
        admitted = self.admission.admit(doc)
        return 0 if admitted is None else self.add_passages(admitted)

    def admitted(self, documents: Iterable[Document]) -> Iterator[Admitted]:
        """The documents this writer's admission admits, for :meth:`add_passages`. A resumed create first passes over
        the documents its journal's segments hold (each one read again, none written again); a document refused
        before is refused again, so the report says what an uninterrupted build says."""
        it = iter(documents)
        if self._skip:
            self._pass_over(it)
        for doc in it:
            self._read += 1
            admitted = self.admission.admit(doc)
            if admitted is not None:
                yield admitted

    def _pass_over(self, documents: Iterator[Document]) -> None:
        written, at = self._resumed_ids, 0
        for doc in itertools.islice(documents, self._skip):
            self._read += 1
            if at < len(written) and doc.doc_id == written[at]:
                at += 1
            elif self.admission.admit(doc) is not None:
                at = -1
                break
        if at != len(written) or self._read != self._skip:
            raise CaprError(f"{self.root}: the source differs from the one an interrupted build was reading; "
                            "run `capr index` again with --no-resume to start over")
        self._skip = 0

    def add_passages(self, admitted: Admitted) -> int:
        """Stores a document this writer's ``admission`` admitted, with its passages."""
        doc = admitted.document
        if doc.doc_id not in self.admission.doc_ids:
            raise ValueError(f"document {doc.doc_id!r} was not admitted by this writer's admission")
        if self.base is not None and self.base.has_document(doc.doc_id):
            self._delete.add(doc.doc_id)
            self.replaced.add(doc.doc_id)
        try:
            self.builder.add(doc, admitted.passages)
            if self.builder.n_passages >= self.segment_passages:
                self._flush()
        except OSError as e:  # the segment being written is now incomplete: this writer is done
            self.abort()
            raise self._write_error(e) from None
        return len(admitted.passages)

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
        if doc_id in self.admission.doc_ids:
            raise CaprError(f"document {doc_id!r} was added in this same update; delete it in a later one")
        if self.base is None or not self.base.has_document(doc_id):
            raise QueryError(f"no document with id {doc_id!r}")
        self._delete.add(doc_id)

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_worker()
        self.builder.abort()
        if self._journal_key is not None:
            dirs.remove_journal(self.root)  # an abandoned build (an error, Ctrl-C, SIGTERM) is not resumed
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

    def _entries(self) -> list[Entry]:
        """The segments of the new generation, before merging: the base's (documents deleted) and this write's."""
        entries = base_entries(self.base, self._delete) if self.base is not None else []
        for name, n_pass, n_docs in self._flushed:
            seg = None
            if self._last_built is not None and self._last_built[0] == name and n_pass <= _ADOPT_MAX_PASSAGES:
                seg = Segment(self.root / SEGMENTS / name).adopt(self._last_built[1])
            entries.append(new_entry(name, seg, n_pass, n_docs))
        return entries

    def commit(self) -> Index:
        if self._closed:
            raise IndexError_("writer already closed")
        gen_tmp = None
        try:
            if self.builder.n_passages:
                self._flush(more=False)
            else:
                self.builder.abort()
            entries = merge_entries(self.root, self._entries(), self.merge_policy, self._compact, self.hnsw_threshold,
                                    self._merged, self._note)
            gen_tmp, name = dirs.new_generation(self.root)
            self._write_generation(gen_tmp, name, entries)
            final = dirs.commit_generation(self.root, gen_tmp, name, self._background_cleanup)
            if self._journal_key is not None:
                dirs.remove_journal(self.root)
        except BaseException as e:
            if gen_tmp is not None and _names_current(self.root, name):
                # CURRENT already names the new generation: the write is committed and only the clean-up after
                # it was cut short (Ctrl-C, SIGTERM, a failed unlink). Aborting now would delete its segments.
                if not isinstance(e, Exception):
                    self._closed = True
                    self._stop_worker()
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
        self._stop_worker()
        self._lock.__exit__(None, None, None)
        reuse = {e.name: e.segment for e in entries if e.segment is not None}
        return Index(self.root, final, previous=self.base, reuse=reuse)

    def _write_generation(self, gen_tmp: Path, name: str, entries: list[Entry]) -> None:
        """The live masks and the manifest of generation ``name``, into its temporary folder."""
        (gen_tmp / "live").mkdir()
        live_docs = live_passages = 0
        for e in entries:
            for suffix, mask in ((".npy", e.live), (".docs.npy", e.doc_live)):
                dst = gen_tmp / "live" / f"{e.name}{suffix}"
                if e.unchanged and self.base is not None:
                    try:  # the base generation's mask is final and already on disk: link it, do not rewrite it
                        os.link(self.base.gen / "live" / f"{e.name}{suffix}", dst)
                        continue
                    except OSError:
                        pass
                write_npy(dst, mask, atomic=False)
            live_passages += int(np.count_nonzero(e.live))
            live_docs += int(np.count_nonzero(e.doc_live))
        fields, dead_fields = generation_fields(self.root, entries,
                                                self.base.meta.dead_fields if self.base is not None else {})
        IndexMeta(generation=name, analyzer=self.analyzer_config, bm25=self.bm25, segmenter=self.segmenter,
                  segments=[e.name for e in entries], counts={"documents": live_docs, "passages": live_passages},
                  fields=fields, dead_fields=dead_fields, dense=self.dense_info, hnsw_threshold=self.hnsw_threshold,
                  write_seconds=round(time.time() - self._t0, 3)).write(gen_tmp)
        fsync_dir(gen_tmp / "live")


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


def build_index(documents: Iterable[Document], root: str | Path, **settings: Any) -> Index:
    """Index ``documents`` into ``root``, atomically replacing any index already there; ``settings``: IndexWriter's
    (segmenter, analyzer, bm25, report, dense, ...)."""
    with IndexWriter(root, **settings) as w:
        for doc in documents:
            w.add(doc)
    return Index.load(root)


def compact_index(root: str | Path, progress: Any = None, lock_wait_s: float = 0.0) -> Index:
    """Merge every segment of the index at ``root`` into one, dropping deleted rows, in one commit (readers keep
    the previous generation until then). The result equals a fresh rebuild of the live documents in their
    current order: same rows, vocabulary, statistics and scores."""
    writer = IndexWriter(root, mode="update", progress=progress, lock_wait_s=lock_wait_s)
    writer.compact()
    return writer.commit()
