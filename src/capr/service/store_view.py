"""`capr serve` over a Milvus collection: the parts of a snapshot the service reads, backed by a MilvusStore.

The embedded service reads an immutable ``Index`` generation per request (see state.py). A Milvus collection
has no generations: reads see what Milvus has committed (Strong consistency), and a write returns after
Milvus acknowledged it. What the service cannot get from Milvus is said where it matters:
- ``POST /cases`` (the lexical mention baseline needs capr's posting lists) answers 400 on this backend;
- lexical evidence sentences use idf 1 for every query term (Milvus does not expose collection statistics);
- ``GET /documents/{id}`` rebuilds the document from its passages (text between passages is not stored);
- entity autocomplete is empty (distinct titles would need a scan); aspects come from the collection.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

import numpy as np

from capr.records import Document, Section

T = TypeVar("T")


class _AllTerms(dict):
    """vocab for the evidence scorer: every term is known, with the one idf below (1.0)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> int:
        return 0


class _Matrix:
    vocab = _AllTerms()


class _UniformIdf:
    idf = np.ones(1, dtype=np.float32)


class StoreView:
    """Duck-types the ``Index`` attributes the service uses."""

    matrix = _Matrix()  # never None: "every document deleted" is an empty search result here
    segments: list = []

    def __init__(self, store: Any) -> None:
        self.store = store
        self.analyzer = store.analyzer
        self.bm25_params = store.bm25
        self.columns = {f: None for f in store.meta["fields"]}

    @property
    def manifest(self) -> dict[str, Any]:
        c = self.store.counts()
        return {"generation": f"milvus:{self.store.name}", "counts": c, "created": None}

    @property
    def counts(self) -> dict[str, int]:
        return {**self.store.counts(), "vocabulary": 0}

    @property
    def has_dense(self) -> bool:
        return self.store.has_dense

    def aspects(self) -> list[str]:
        return self.store.aspects()

    def check_aspect(self, aspect: str) -> None:
        self.store.check_aspect(aspect)

    def filter_mask(self, filters: dict[str, Any] | None) -> None:
        self.store.filter_expr(filters)  # unknown fields: the same QueryError as the embedded index
        return None

    def search(self, *args: Any, **kwargs: Any):
        return self.store.search(*args, **kwargs)

    def scorer(self, retriever: Any) -> _UniformIdf:
        return _UniformIdf()

    def encoder(self):
        return self.store.encoder()

    def encode_query(self, query: Any, template: str = "plain") -> np.ndarray:
        return self.store.encode_query(query, template)

    def has_document(self, doc_id: str) -> bool:
        return self.store.has_document(doc_id)

    def document(self, doc_id: str) -> Document:
        passages = self.store.document_passages(doc_id)
        end = max(p.end for p in passages)
        chars = [" "] * end
        for p in passages:
            chars[p.start : p.start + len(p.text)] = p.text
        text = "".join(chars)
        sections = [Section(heading=p.heading, aspect=p.aspect or "", start=p.start, end=p.end) for p in passages]
        first = passages[0]
        return Document(doc_id=doc_id, title=first.title, text=text, metadata=first.metadata, sections=sections)


class _Writer:
    """What the service's write functions call: ``base.has_document``, ``add``, ``delete``."""

    def __init__(self, view: StoreView) -> None:
        self.base = view
        self.view = view

    def add(self, doc: Document) -> int:
        return self.view.store.add([doc])

    def delete(self, doc_id: str) -> None:
        self.view.store.delete([doc_id])


class StoreHolder:
    """IndexHolder's interface for a Milvus collection."""

    def __init__(self, store: Any) -> None:
        self.view = StoreView(store)
        self._lock = threading.Lock()  # capr's meta row (counts, fields) is read-modify-write

    @property
    def index(self) -> StoreView:
        return self.view

    @property
    def generation(self) -> str:
        return f"milvus:{self.view.store.name}"

    def vocabulary(self, index: StoreView, field: str) -> list[str]:
        return sorted(index.aspects()) if field == "aspect" else []

    def write(self, fn: Callable[[_Writer], T]) -> tuple[T, StoreView]:
        with self._lock:
            return fn(_Writer(self.view)), self.view

