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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capr.errors import CaprError
from capr.store.protocol import Backend, Capability, Ranked, Store

if TYPE_CHECKING:
    from capr.corpus.segment import SegmenterConfig
    from capr.text.analyzer import AnalyzerConfig
    from capr.text.bm25 import BM25Params
    from capr.models.encoder import EncoderConfig


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

    def existing_documents(self, name: str | Path) -> int | None:
        """How many documents the index already at ``name`` holds (a directory, or a Milvus collection), or None
        when there is none: `capr index --out` replaces one only when told to."""
        if self.backend is Backend.embedded:
            from capr.index.directory import is_index_dir

            if not is_index_dir(Path(name)):
                return None
        else:
            from capr.store.milvus_backend import MilvusStore

            if not MilvusStore.exists(_require_uri(self.uri), str(name), token=self.token, **self.milvus_options()):
                return None
        try:
            return int(self.open(name).stats()["documents"])
        except CaprError:  # there, but unreadable (damaged, or of an older schema): still an index to replace
            return 0

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
                 dense: "EncoderConfig | None" = None, lock_wait_s: float = 0.0, build_key: dict[str, Any] | None = None,
                 resume: bool = True, analysis_process: bool = False, **milvus_options: Any) -> Store:
    """A new, empty index (replacing one of the same name) with these analysis and encoder settings. Embedded:
    ``build_key`` names what is indexed, so that a build killed part-way continues when run again (``resume``);
    ``analysis_process``: passages are analysed in a process of their own while documents are read."""
    b = parse_backend(backend)
    if b is Backend.embedded:
        if uri:
            raise CaprError("--uri is for --backend milvus; the embedded backend takes an index directory")
        from capr.store.embedded import EmbeddedStore

        return EmbeddedStore.create(Path(name), segmenter=segmenter, analyzer=analyzer, bm25=bm25, dense=dense,
                                    lock_wait_s=lock_wait_s, build_key=build_key, resume=resume,
                                    analysis_process=analysis_process)
    from capr.store.milvus_backend import MilvusStore

    return MilvusStore.create(_require_uri(uri), str(name), token=token, segmenter=segmenter, analyzer=analyzer,
                              bm25=bm25, dense=dense, **milvus_options)


def as_store(store: Any) -> Store:
    """A Store as it is; a loaded ``Index`` generation behind the embedded adapter (which owns the filters, checks
    and messages a user meets)."""
    from capr.index.index import Index

    if isinstance(store, Index):
        from capr.store.embedded import EmbeddedStore

        return EmbeddedStore.of(store)
    return store


def _require_uri(uri: str | None) -> str:
    if not uri:
        raise CaprError("--backend milvus needs --uri: a Milvus Lite file (*.db) or http(s)://host:19530")
    return uri


__all__ = ["Backend", "BackendOptions", "Capability", "Ranked", "Store", "as_store", "create_store", "open_store", "parse_backend"]
