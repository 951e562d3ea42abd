"""Index backends ("stores") behind capr's search, add and delete.

Two backends share one small interface and one results contract (``list[ScoredPassage]`` with the
``Passage`` filled in, ranks from 1, ties broken by insertion order):

- ``embedded`` (default): capr's on-disk index directory (``capr.index``), unchanged.
- ``milvus``: a Milvus collection through ``pymilvus.MilvusClient(uri)`` — a ``*.db`` path is Milvus Lite,
  ``http(s)://host:19530`` a Milvus standalone server or distributed cluster. pymilvus is imported only
  when this backend is used (``pip install 'capr[milvus]'``).

    store = capr.store.open_store("notes")                                        # embedded directory
    store = capr.store.open_store("notes", backend="milvus", uri="http://milvus:19530", token=...)
    store.add(documents); store.delete(["note_17"]); store.search(Query(...), k=5, filters={"aspect": "symptoms"})
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol, runtime_checkable

from capr.errors import CaprError
from capr.records import Document, Passage, Query, ScoredPassage

if TYPE_CHECKING:
    from capr.corpus.segment import SegmenterConfig
    from capr.index.analyzer import AnalyzerConfig
    from capr.index.lexical import BM25Params
    from capr.models.encoder import EncoderConfig
    from capr.retrieve.fusion import FusionConfig


class Backend(str, Enum):
    embedded = "embedded"
    milvus = "milvus"


@runtime_checkable
class Store(Protocol):
    """What every backend offers. ``name`` is the index directory or the collection."""

    backend: Backend
    name: str

    def search(self, query: Query | str, k: int = 10, filters: dict[str, Any] | None = None,
               retriever: str = "bm25", expand: bool = True, aspect_boost: float = 0.5,
               fusion: "FusionConfig | None" = None, template: str = "plain") -> list[ScoredPassage]: ...

    def add(self, documents: Iterable[Document], progress: Any = None) -> int:
        """Writes documents (an existing doc_id is replaced); returns the passages written."""

    def delete(self, doc_ids: Iterable[str]) -> int:
        """Removes documents and all their passages; unknown ids are an error. Returns documents removed."""

    def passage(self, pid: str) -> Passage: ...

    def has_document(self, doc_id: str) -> bool: ...

    def counts(self) -> dict[str, int]: ...

    @property
    def has_dense(self) -> bool: ...

    def close(self) -> None: ...


def parse_backend(value: str | Backend) -> Backend:
    try:
        return Backend(value)
    except ValueError:
        raise CaprError(f"unknown index backend {value!r}; choose embedded or milvus") from None


def open_store(name: str | Path, backend: str | Backend = Backend.embedded, uri: str | None = None,
               token: str | None = None, **milvus_options: Any) -> Store:
    """An existing index: a directory (embedded) or a collection on the Milvus at ``uri``."""
    b = parse_backend(backend)
    if b is Backend.embedded:
        if uri:
            raise CaprError("--uri is for --backend milvus; the embedded backend takes an index directory")
        from capr.store.embedded import EmbeddedStore

        return EmbeddedStore(Path(name))
    from capr.store.milvus_backend import MilvusStore

    return MilvusStore.open(_require_uri(uri), str(name), token=token, **milvus_options)


def create_store(name: str | Path, backend: str | Backend = Backend.embedded, uri: str | None = None,
                 token: str | None = None, segmenter: "SegmenterConfig | None" = None,
                 analyzer: "AnalyzerConfig | None" = None, bm25: "BM25Params | None" = None,
                 dense: "EncoderConfig | None" = None, **milvus_options: Any) -> Store:
    """A new, empty index (replacing one of the same name) with these analysis and encoder settings."""
    b = parse_backend(backend)
    if b is Backend.embedded:
        if uri:
            raise CaprError("--uri is for --backend milvus; the embedded backend takes an index directory")
        from capr.store.embedded import EmbeddedStore

        return EmbeddedStore.create(Path(name), segmenter=segmenter, analyzer=analyzer, bm25=bm25, dense=dense)
    from capr.store.milvus_backend import MilvusStore

    return MilvusStore.create(_require_uri(uri), str(name), token=token, segmenter=segmenter, analyzer=analyzer,
                              bm25=bm25, dense=dense, **milvus_options)


def _require_uri(uri: str | None) -> str:
    if not uri:
        raise CaprError("--backend milvus needs --uri: a Milvus Lite file (*.db) or http(s)://host:19530")
    return uri


__all__ = ["Backend", "Store", "create_store", "open_store", "parse_backend"]
