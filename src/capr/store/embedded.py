"""The embedded backend: capr's own index directory (capr.index) behind the Store interface."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from capr.errors import QueryError
from capr.index.index import DEFAULT_ASPECT_BOOST, DEFAULT_TEMPLATE, Index, IndexWriter, Retriever
from capr.records import Document, Passage, Query, ScoredPassage
from capr.store import Backend

if TYPE_CHECKING:
    from capr.corpus.segment import SegmenterConfig
    from capr.index.analyzer import AnalyzerConfig
    from capr.index.lexical import BM25Params
    from capr.models.encoder import EncoderConfig
    from capr.retrieve.fusion import FusionConfig


class EmbeddedStore:
    backend = Backend.embedded

    def __init__(self, root: Path, index: Index | None = None) -> None:
        self.root = Path(root)
        self.name = str(root)
        self._index = index if index is not None else Index.load(self.root)
        self._create_args: dict[str, Any] | None = None

    @classmethod
    def create(cls, root: Path, segmenter: "SegmenterConfig | None" = None, analyzer: "AnalyzerConfig | None" = None,
               bm25: "BM25Params | None" = None, dense: "EncoderConfig | None" = None) -> "EmbeddedStore":
        # Nothing is written until the first add: the first generation is the whole first batch, exactly
        # as `capr index` has always written it (an empty generation before it would be pointless).
        store = cls.__new__(cls)
        store.root, store.name, store._index = Path(root), str(root), None
        store._create_args = dict(segmenter=segmenter, analyzer=analyzer, bm25=bm25, dense=dense)
        return store

    @property
    def index(self) -> Index:
        if self._index is None:
            raise QueryError(f"{self.root}: the index is empty (nothing added yet)")
        return self._index

    @property
    def has_dense(self) -> bool:
        return self._index is not None and self._index.has_dense

    def search(self, query: Query | str, k: int = 10, filters: dict[str, Any] | None = None,
               retriever: Retriever | str = Retriever.bm25, expand: bool = True,
               aspect_boost: float = DEFAULT_ASPECT_BOOST, fusion: "FusionConfig | None" = None,
               template: str = DEFAULT_TEMPLATE) -> list[ScoredPassage]:
        return self.index.search(query, k=k, filters=filters, retriever=retriever, expand=expand,
                                 aspect_boost=aspect_boost, fusion=fusion, template=template)

    def _writer(self, progress: Any = None) -> IndexWriter:
        if self._create_args is not None:
            return IndexWriter(self.root, mode="create", progress=progress, **self._create_args)
        return IndexWriter(self.root, mode="update", progress=progress)

    def add(self, documents: Iterable[Document], progress: Any = None) -> int:
        writer = self._writer(progress)
        try:
            for doc in documents:
                writer.add(doc)
            n = writer.n_passages
            self._index = writer.commit()
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
            self._index = writer.commit()
        except BaseException:
            writer.abort()
            raise
        return len(ids)

    def passage(self, pid: str) -> Passage:
        return self.index.passage_by_pid(pid)

    def has_document(self, doc_id: str) -> bool:
        return self._index is not None and self._index.has_document(doc_id)

    def counts(self) -> dict[str, int]:
        return self.index.counts if self._index is not None else {"documents": 0, "passages": 0}

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
