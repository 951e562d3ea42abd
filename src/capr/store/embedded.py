"""The embedded backend: capr's own index directory (capr.index) behind the Store interface.

An explicit adapter: each read of the Store protocol is written out over the current ``Index`` generation's storage
and scoring primitives, and the adapter owns what faces a user — which filters and aspects exist, the errors for
a value no passage has (with close spellings) and for a missing capability. Writes go through an ``IndexWriter``
and then read the new generation."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from capr.errors import QueryError
from capr.filters import FilterClause, Filters, as_clauses, is_identifier_field, known_field, named_values
from capr.index.index import Index
from capr.index.writer import IndexWriter
from capr.records import DEFAULT_MAX_DOC_CHARS
from capr.records import Retriever
from capr.text.aspects import check_aspect, filter_aspect, no_aspect_message
from capr.records import Document, Passage
from capr.store.protocol import Backend, Capability, Ranked

if TYPE_CHECKING:
    from capr.corpus.segment import SegmenterConfig
    from capr.text.analyzer import AnalyzerConfig
    from capr.text.bm25 import BM25Params
    from capr.models.encoder import EncoderConfig


class EmbeddedStore:
    backend = Backend.embedded

    def __init__(self, root: Path, index: Index | None = None, lock_wait_s: float = 0.0) -> None:
        """``lock_wait_s``: how long a write waits for another process's write to end (see IndexWriter)."""
        self.root = Path(root)
        self.name = str(root)
        self._index = index if index is not None else Index.load(self.root)
        self._create_args: dict[str, Any] | None = None
        self.lock_wait_s = lock_wait_s
        # the last add's documents and how many of them replaced one with the same id, counted by its writer
        self.last_added: dict[str, int] | None = None

    @classmethod
    def of(cls, index: Index) -> "EmbeddedStore":
        """The Store front of one loaded generation (a reader that holds its own snapshot)."""
        return cls(Path(index.root), index=index)

    @classmethod
    def create(cls, root: Path, segmenter: "SegmenterConfig | None" = None, analyzer: "AnalyzerConfig | None" = None,
               bm25: "BM25Params | None" = None, dense: "EncoderConfig | None" = None,
               lock_wait_s: float = 0.0, build_key: dict[str, Any] | None = None,
               resume: bool = True, analysis_process: bool = False) -> "EmbeddedStore":
        """``build_key``, ``resume`` and ``analysis_process``: see IndexWriter (an interrupted `capr index` continues
        where it was killed; passages analysed in a process of their own)."""
        # Nothing is written until the first add: the first generation is the whole first batch, exactly
        # as `capr index` has always written it (an empty generation before it would be pointless).
        store = cls.__new__(cls)
        store.root, store.name, store._index = Path(root), str(root), None
        store._create_args = dict(segmenter=segmenter, analyzer=analyzer, bm25=bm25, dense=dense, build_key=build_key,
                                  resume=resume, analysis_process=analysis_process)
        store.lock_wait_s = lock_wait_s
        store.last_added = None
        return store

    @property
    def index(self) -> Index:
        if self._index is None:
            raise QueryError(f"{self.root}: the index is empty (nothing added yet)")
        return self._index

    # -- reading: the Store protocol over the current generation ------------------------------------
    @property
    def has_dense(self) -> bool:
        return self._index is not None and self._index.has_dense

    @property
    def analyzer(self) -> Any:
        return self.index.analyzer

    @property
    def bm25_params(self) -> Any:
        return self.index.bm25_params

    @property
    def capabilities(self) -> frozenset[Capability]:
        caps = {Capability.bm25, Capability.tfidf, Capability.exhaustive, Capability.collection_stats,
                Capability.postings, Capability.documents, Capability.generations}
        return frozenset(caps | ({Capability.dense} if self.has_dense else set()))

    def live_count(self) -> int:
        return self.index.live_count()

    def row_count(self) -> int:
        return self.index.row_count()

    def generation_info(self) -> dict[str, Any]:
        return self.index.generation_info()

    def fields(self) -> list[str]:
        return self.index.fields()

    def aspects(self) -> list[str]:
        return self.index.aspects()

    def aspect_counts(self) -> dict[str, int]:
        return self.index.aspect_counts()

    def has_aspect(self, aspect: str) -> bool:
        return self.index.has_aspect(aspect)

    def includes_titles(self) -> bool:
        return self.index.includes_titles()

    def dense_manifest(self) -> dict[str, Any]:
        return self.index.dense_manifest()

    def term_idf(self, terms: Iterable[str]) -> dict[str, float]:
        return self.index.term_idf(terms)

    def lexical_scores(self, terms: list[str], keys: np.ndarray | None = None,
                       method: Retriever | str = Retriever.bm25) -> np.ndarray:
        return self.index.lexical_scores(terms, keys, method)

    def lexical_dismax(self, base: list[str], phrases: list[list[str]]) -> np.ndarray | None:
        return self.index.lexical_dismax(base, phrases)

    def lexical_top(self, terms: list[str], k: int, flt: np.ndarray | None = None,
                    method: Retriever | str = Retriever.bm25) -> Ranked:
        return self.index.lexical_top(terms, k, flt, method)

    def top(self, scores: np.ndarray, k: int, flt: np.ndarray | None = None) -> Ranked:
        return self.index.top(scores, k, flt)

    def dense_top(self, qvec: np.ndarray, k: int, flt: np.ndarray | None = None) -> Ranked:
        return self.index.dense_top(qvec, k, flt)

    def dense_scores(self, qvec: np.ndarray, keys: np.ndarray) -> np.ndarray:
        return self.index.dense_scores(qvec, keys)

    def encoder(self) -> Any:
        if not self.has_dense:
            raise QueryError(f"{self.root}: index has no vectors; build it without --lexical-only")
        return self.index.encoder()

    def aspect_flags(self, keys: np.ndarray, aspect: str) -> np.ndarray:
        return self.index.aspect_flags(keys, aspect)

    def passages(self, keys: np.ndarray) -> list[Passage]:
        return self.index.passages(keys)

    def titles(self, keys: np.ndarray) -> list[str]:
        return self.index.titles(keys)

    def document_keys(self, keys: np.ndarray) -> np.ndarray:
        return self.index.document_keys(keys)

    def term_rows(self, term: str) -> np.ndarray:
        return self.index.term_rows(term)

    def keys_of(self, pids: list[str]) -> np.ndarray:
        return self.index.keys_of(pids)

    def has_passage(self, pid: str) -> bool:
        return self._index is not None and self._index.row_of(pid) is not None

    def passage_by_pid(self, pid: str) -> Passage:
        return self.index.passage_by_pid(pid)

    def document(self, doc_id: str) -> Document:
        return self.index.document(doc_id)

    def document_rows(self, mask: np.ndarray) -> np.ndarray:
        return self.index.document_rows(mask)

    # -- filters and checks: the front a user meets ---------------------------------------------------
    def restrict(self, flt: np.ndarray | None, keys: np.ndarray) -> np.ndarray:
        return self.index.restrict(flt, keys)

    def passing(self, flt: np.ndarray | None, keys: np.ndarray) -> np.ndarray:
        index = self.index
        return (index.live if flt is None else flt)[np.asarray(keys, dtype=np.int64)]

    def compile_filter(self, filters: Filters) -> np.ndarray | None:
        """Rows passing every clause: a {field: value} dict (equality) or clauses/clause strings with ranges and
        sets (see capr.filters). A value an ``=``, ``!=``, ``in`` or ``not in`` clause names that no passage has is
        an error (most often a typo: capr.filters.named_values); an empty range, or clauses that together keep
        nothing, is a legitimate empty answer."""
        clauses = as_clauses(filters)
        if not clauses:
            return None
        index = self.index
        mask = index.live.copy()
        fields = set(index.fields())
        for c in clauses:
            c = known_field(c, fields)
            norm = (lambda v: filter_aspect(v, index.aspect_counts(), index.analyzer)) if c.field == "aspect" else None
            m = index.clause_rows(c, norm)
            for w in named_values(c):
                held = m if c.op in ("=", "in") and len(c.values) == 1 else index.clause_rows(FilterClause(c.field, "=", w), norm)
                if not held.any():
                    raise QueryError(missing_value_message(c.field, w, index))
            mask &= m
        return mask

    def explain_empty(self, filters: dict[str, Any]) -> None:
        """Nothing to add: compile_filter already refused a value no passage has."""

    def check_aspect(self, aspect: str) -> None:
        # the analyser and terms too, so this check accepts what a search accepts (an aspect that reads as one of
        # the corpus' aspects, or whose words the index has), not only the table's and the corpus' own names
        check_aspect(aspect, self.aspect_counts, self.analyzer, lambda terms: self.term_idf(terms).keys())

    def _writer(self, progress: Any = None, report: Any = None, max_doc_chars: int = DEFAULT_MAX_DOC_CHARS) -> IndexWriter:
        mode = "create" if self._create_args is not None else "update"
        return IndexWriter(self.root, mode=mode, progress=progress, report=report, max_doc_chars=max_doc_chars,
                           base=self._index if mode == "update" else None, lock_wait_s=self.lock_wait_s,
                           **(self._create_args or {}))

    def add(self, documents: Iterable[Document], progress: Any = None, report: Any = None,
            max_doc_chars: int = DEFAULT_MAX_DOC_CHARS) -> int:
        """Writes documents in one new generation; ``progress`` gets the writer's phases and, per document,
        ``progress.read(passages so far)`` when it has that method. A document longer than ``max_doc_chars``
        is a bad record (see ReadReport)."""
        writer = self._writer(progress, report, max_doc_chars)
        read = getattr(progress, "read", None)
        try:
            for admitted in writer.admitted(documents):
                writer.add_passages(admitted)
                if read is not None:
                    read(writer.n_passages)
            n = writer.n_passages
            written = {"documents": writer.n_documents, "replaced": len(writer.replaced)}
            self._replace(writer.commit())
            self.last_added = written
        except BaseException:
            writer.abort()
            raise
        self._create_args = None
        return n

    def delete(self, doc_ids: Iterable[str]) -> int:
        ids = list(dict.fromkeys(doc_ids))
        writer = self._writer()
        try:
            for d in ids:
                writer.delete(d)
            self._replace(writer.commit())
        except BaseException:
            writer.abort()
            raise
        return len(ids)

    def compact(self, progress: Any = None) -> dict[str, int]:
        """Merge all segments into one (see capr.index.compact_index). Returns the segments and rows (deleted passages
        included) before and after, and the live documents and passages: "before" is the generation compacted, read
        under the writer lock (this store's may be older: another process may have written since, or while this one
        waited for the lock)."""
        writer = IndexWriter(self.root, mode="update", progress=progress, base=self._index, lock_wait_s=self.lock_wait_s)
        try:
            base = writer.base
            assert base is not None  # an update always has one
            before = {"segments_before": len(base.segments), "rows_before": len(base)}
            writer.compact()
            self._replace(writer.commit())
        except BaseException:
            writer.abort()
            raise
        index = self.index
        return {**before, "segments_after": len(index.segments), "rows_after": len(index),
                "documents": index.counts["documents"], "passages": index.counts["passages"]}

    def _replace(self, index: Index) -> None:
        self._index = index  # the old generation stays readable for whoever still holds it

    def has_document(self, doc_id: str) -> bool:
        return self._index is not None and self._index.has_document(doc_id)

    def check_files(self) -> None:
        """Refuses a damaged generation now (a missing or truncated file), not at the first search that reads it."""
        self.index.check_files()

    def counts(self) -> dict[str, int]:
        return self.index.counts if self._index is not None else {"documents": 0, "passages": 0}

    def stats(self) -> dict[str, int]:
        return self.counts()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()


def missing_value_message(field: str, value: Any, store: Any) -> str:
    """The error for a filter value no passage has. Close spellings help with words (category=Radiolgy), but for an
    identifier they would list other patients' (encounters', notes') ids to a client that named one it may not
    know: none then. An aspect names the index's aspects (``store``: its aspect counts and stored values)."""
    shown = f"{field}={value!r}"
    if field == "aspect":
        return no_aspect_message(value, shown, store.aspect_counts())
    close = [] if is_identifier_field(field) else \
        difflib.get_close_matches(str(value), [str(v) for v in store.stored_values(field)], n=5, cutoff=0.6)
    return f"no passage has {shown}" + (f" (close: {', '.join(close)})" if close else "")

