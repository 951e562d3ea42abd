"""Index backends ("stores") behind capr's search, add and delete.

Two backends give the same primitives (the ``Store`` protocol: top-k and candidate scores, passage and document
lookup, filters, add/delete, counts) and declare what else they can do (``Capability``); the one search pipeline
(``capr.search.Searcher``) is written over them once. Ties are broken by insertion order on both.

- ``embedded`` (default): capr's on-disk index directory (``capr.index``), unchanged.
- ``milvus``: a Milvus collection through ``pymilvus.MilvusClient(uri)`` — a ``*.db`` path is Milvus Lite,
  ``http(s)://host:19530`` a Milvus standalone server or distributed cluster. pymilvus is imported only
  when this backend is used (``pip install 'capr[milvus]'``).

    store = capr.store.open_store("notes")                                        # embedded directory
    store = capr.store.open_store("notes", backend="milvus", uri="http://milvus:19530", token=...)
    store.add(documents); store.delete(["note_17"])
    capr.search.search(store, Query(...), k=5, filters={"aspect": "symptoms"})
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol, runtime_checkable

import numpy as np

from capr.errors import CaprError
from capr.records import Document, Passage

if TYPE_CHECKING:
    from capr.corpus.segment import SegmenterConfig
    from capr.index.analyzer import AnalyzerConfig
    from capr.index.lexical import BM25Params
    from capr.models.encoder import EncoderConfig


class Backend(str, Enum):
    embedded = "embedded"
    milvus = "milvus"


class Capability(str, Enum):
    """What a backend can do beyond the primitives every store has; a caller that needs one it lacks refuses
    with the capability's name (e.g. ``/cases`` needs ``postings``)."""

    bm25 = "bm25"  # lexical top-k and candidate scores
    tfidf = "tfidf"
    dense = "dense"  # vectors
    exhaustive = "exhaustive"  # cheap scores for every passage (lexical score arrays, exact top-k)
    collection_stats = "collection_stats"  # idf of any term (sentence-level BM25 evidence)
    postings = "postings"  # capr's term matrix (similar-case mention search)
    documents = "documents"  # whole documents stored, text between passages included
    generations = "generations"  # immutable snapshots (readers keep theirs while writers commit)


Ranked = tuple[np.ndarray, np.ndarray]  # (keys, scores): keys are insertion-ordered ints, the tie-breaker


@runtime_checkable
class Store(Protocol):
    """The primitives a backend gives the one Searcher (``capr.search``). ``keys`` are the backend's own
    passage numbers in insertion order (rows of the embedded index, ``seq`` on Milvus); ``flt`` is what
    ``compile_filter`` returned. ``name`` is the index directory or the collection."""

    backend: Backend
    name: str
    analyzer: Any
    bm25_params: Any
    capabilities: frozenset[Capability]

    # reading
    def live_count(self) -> int: ...
    def row_count(self) -> int: ...
    def stats(self) -> dict[str, int]:
        """Live documents and passages (an ``Index`` also has them as its ``counts`` property)."""
    def aspects(self) -> list[str]: ...
    def aspect_counts(self) -> dict[str, int | None]: ...
    def has_aspect(self, aspect: str) -> bool: ...
    def compile_filter(self, filters: dict[str, Any] | None) -> Any: ...
    def explain_empty(self, filters: dict[str, Any]) -> None: ...
    def restrict(self, flt: Any, keys: np.ndarray) -> Any: ...
    def lexical_top(self, terms: list[str], k: int, flt: Any, method: Any) -> Ranked: ...
    def lexical_scores(self, terms: list[str], keys: np.ndarray | None, method: Any) -> np.ndarray: ...
    def top(self, scores: np.ndarray, k: int, flt: Any) -> Ranked: ...
    def dense_top(self, qvec: np.ndarray, k: int, flt: Any) -> Ranked: ...
    def dense_scores(self, qvec: np.ndarray, keys: np.ndarray) -> np.ndarray: ...
    def encoder(self) -> Any: ...
    def dense_manifest(self) -> dict[str, Any]: ...
    def includes_titles(self) -> bool: ...
    def term_idf(self, terms: Iterable[str]) -> dict[str, float]: ...
    def aspect_flags(self, keys: np.ndarray, aspect: str) -> np.ndarray: ...
    def passages(self, keys: np.ndarray) -> list[Passage]: ...
    def keys_of(self, pids: list[str]) -> np.ndarray: ...
    def passage_by_pid(self, pid: str) -> Passage: ...
    def has_document(self, doc_id: str) -> bool: ...
    def document(self, doc_id: str) -> Document: ...
    def generation_info(self) -> dict[str, Any]: ...

    @property
    def has_dense(self) -> bool: ...

    # writing
    def add(self, documents: Iterable[Document], progress: Any = None) -> int:
        """Writes documents (an existing doc_id is replaced); returns the passages written."""

    def delete(self, doc_ids: Iterable[str]) -> int:
        """Removes documents and all their passages; unknown ids are an error. Returns documents removed."""

    def close(self) -> None: ...


@dataclass
class BackendOptions:
    """Where an index lives and how to reach it: the same options on every command."""

    backend: Backend = Backend.embedded
    uri: str | None = None
    token: str | None = None
    tls_ca: Path | None = None
    index_type: str = "FLAT"  # Milvus vector index of a new collection
    lock_wait_s: float = 0.0  # embedded: how long a write waits for another process's write to end

    def __post_init__(self) -> None:
        self.backend = parse_backend(self.backend)
        if self.backend is Backend.embedded and self.uri:
            raise CaprError("--uri is only for --backend milvus")

    def milvus_options(self) -> dict[str, Any]:
        if self.tls_ca is None:
            return {}
        if not Path(self.tls_ca).is_file():
            raise CaprError(f"--tls-ca {self.tls_ca}: no such file")
        return {"secure": True, "ca_pem_path": str(self.tls_ca)}

    def open(self, name: str | Path) -> "Store":
        return open_store(name, self.backend, uri=self.uri, token=self.token, lock_wait_s=self.lock_wait_s,
                          **self.milvus_options())

    def create(self, name: str | Path, **settings: Any) -> "Store":
        extra = {"index_type": self.index_type} if self.backend is Backend.milvus else {}
        return create_store(name, self.backend, uri=self.uri, token=self.token, **settings, **extra,
                            lock_wait_s=self.lock_wait_s, **self.milvus_options())


def parse_backend(value: str | Backend) -> Backend:
    try:
        return Backend(value)
    except ValueError:
        raise CaprError(f"unknown index backend {value!r}; choose embedded or milvus") from None


def open_store(name: str | Path, backend: str | Backend = Backend.embedded, uri: str | None = None,
               token: str | None = None, lock_wait_s: float = 0.0, **milvus_options: Any) -> Store:
    """An existing index: a directory (embedded) or a collection on the Milvus at ``uri``. ``lock_wait_s``
    (embedded): how long a write waits for another process's write to end."""
    b = parse_backend(backend)
    if b is Backend.embedded:
        if uri:
            raise CaprError("--uri is for --backend milvus; the embedded backend takes an index directory")
        from capr.store.embedded import EmbeddedStore

        return EmbeddedStore(Path(name), lock_wait_s=lock_wait_s)
    from capr.store.milvus_backend import MilvusStore

    return MilvusStore.open(_require_uri(uri), str(name), token=token, **milvus_options)


def create_store(name: str | Path, backend: str | Backend = Backend.embedded, uri: str | None = None,
                 token: str | None = None, segmenter: "SegmenterConfig | None" = None,
                 analyzer: "AnalyzerConfig | None" = None, bm25: "BM25Params | None" = None,
                 dense: "EncoderConfig | None" = None, lock_wait_s: float = 0.0, **milvus_options: Any) -> Store:
    """A new, empty index (replacing one of the same name) with these analysis and encoder settings."""
    b = parse_backend(backend)
    if b is Backend.embedded:
        if uri:
            raise CaprError("--uri is for --backend milvus; the embedded backend takes an index directory")
        from capr.store.embedded import EmbeddedStore

        return EmbeddedStore.create(Path(name), segmenter=segmenter, analyzer=analyzer, bm25=bm25, dense=dense,
                                    lock_wait_s=lock_wait_s)
    from capr.store.milvus_backend import MilvusStore

    return MilvusStore.create(_require_uri(uri), str(name), token=token, segmenter=segmenter, analyzer=analyzer,
                              bm25=bm25, dense=dense, **milvus_options)


def _require_uri(uri: str | None) -> str:
    if not uri:
        raise CaprError("--backend milvus needs --uri: a Milvus Lite file (*.db) or http(s)://host:19530")
    return uri


__all__ = ["Backend", "BackendOptions", "Capability", "Ranked", "Store", "create_store", "open_store", "parse_backend"]
