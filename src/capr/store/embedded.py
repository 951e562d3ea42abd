"""The embedded backend: capr's own index directory (capr.index) behind the Store interface.

Reads are the current ``Index`` generation's primitives (an ``Index`` is itself a read-only Store); writes go
through an ``IndexWriter`` and then read the new generation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from capr.errors import QueryError
from capr.index.index import DEFAULT_MAX_DOC_CHARS, Index, IndexWriter
from capr.records import Document
from capr.store.protocol import Backend

if TYPE_CHECKING:
    from capr.corpus.segment import SegmenterConfig
    from capr.index.analyzer import AnalyzerConfig
    from capr.index.lexical import BM25Params
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

    @classmethod
    def create(cls, root: Path, segmenter: "SegmenterConfig | None" = None, analyzer: "AnalyzerConfig | None" = None,
               bm25: "BM25Params | None" = None, dense: "EncoderConfig | None" = None,
               lock_wait_s: float = 0.0) -> "EmbeddedStore":
        # Nothing is written until the first add: the first generation is the whole first batch, exactly
        # as `capr index` has always written it (an empty generation before it would be pointless).
        store = cls.__new__(cls)
        store.root, store.name, store._index = Path(root), str(root), None
        store._create_args = dict(segmenter=segmenter, analyzer=analyzer, bm25=bm25, dense=dense)
        store.lock_wait_s = lock_wait_s
        return store

    @property
    def index(self) -> Index:
        if self._index is None:
            raise QueryError(f"{self.root}: the index is empty (nothing added yet)")
        return self._index

    def __getattr__(self, name: str) -> Any:
        # the read primitives are the current generation's (see capr.store.Store)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.index, name)

    @property
    def has_dense(self) -> bool:
        return self._index is not None and self._index.has_dense

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
            for doc in documents:
                writer.add(doc)
                if read is not None:
                    read(writer.n_passages)
            n = writer.n_passages
            self._replace(writer.commit())
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
        """Merge all segments into one (see capr.index.compact_index); returns segments before and after."""
        before = len(self.index.segments)
        writer = IndexWriter(self.root, mode="update", progress=progress, base=self._index, lock_wait_s=self.lock_wait_s)
        try:
            writer.compact()
            self._replace(writer.commit())
        except BaseException:
            writer.abort()
            raise
        return {"segments_before": before, "segments_after": len(self.index.segments)}

    def _replace(self, index: Index) -> None:
        self._index = index  # the old generation stays readable for whoever still holds it

    def has_document(self, doc_id: str) -> bool:
        return self._index is not None and self._index.has_document(doc_id)

    def counts(self) -> dict[str, int]:
        return self.index.counts if self._index is not None else {"documents": 0, "passages": 0}

    def stats(self) -> dict[str, int]:
        return self.counts()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
