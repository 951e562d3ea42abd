"""The store boundary: what a backend gives the one Searcher (``Store``), which backends exist (``Backend``) and what
else each can do (``Capability``). A leaf: it imports no backend, so the index, the query parser and the search
pipeline can name the protocol without loading an implementation (``capr.store`` opens and creates stores)."""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable, Protocol, runtime_checkable

import numpy as np

from capr.records import Document, Passage


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
    def fields(self) -> list[str]: ...
    def aspects(self) -> list[str]: ...
    def aspect_counts(self) -> dict[str, int | None]: ...
    def has_aspect(self, aspect: str) -> bool: ...
    def check_aspect(self, aspect: str) -> None:
        """A QueryError with close spellings for an aspect neither the synonym table nor the corpus knows."""
    def compile_filter(self, filters: dict[str, Any] | None) -> Any: ...
    def explain_empty(self, filters: dict[str, Any]) -> None: ...
    def restrict(self, flt: Any, keys: np.ndarray) -> Any: ...
    def passing(self, flt: Any, keys: np.ndarray) -> np.ndarray:
        """Which of ``keys`` are live passages that pass ``flt`` (a bool per key)."""
    def lexical_top(self, terms: list[str], k: int, flt: Any, method: Any) -> Ranked: ...
    def lexical_scores(self, terms: list[str], keys: np.ndarray | None, method: Any) -> np.ndarray: ...
    def top(self, scores: np.ndarray, k: int, flt: Any) -> Ranked:
        """Exhaustive stores: the k best of one score per row."""
    def dense_top(self, qvec: np.ndarray, k: int, flt: Any) -> Ranked: ...
    def dense_scores(self, qvec: np.ndarray, keys: np.ndarray) -> np.ndarray: ...
    def encoder(self) -> Any: ...
    def dense_manifest(self) -> dict[str, Any]: ...
    def includes_titles(self) -> bool: ...
    def term_idf(self, terms: Iterable[str]) -> dict[str, float]: ...
    def aspect_flags(self, keys: np.ndarray, aspect: str) -> np.ndarray: ...
    def passages(self, keys: np.ndarray) -> list[Passage]: ...
    def titles(self, keys: np.ndarray) -> list[str]:
        """The document title of each passage ("" for none), without reading the passages where the store can."""
    def keys_of(self, pids: list[str]) -> np.ndarray: ...
    def has_passage(self, pid: str) -> bool: ...
    def passage_by_pid(self, pid: str) -> Passage: ...
    def has_document(self, doc_id: str) -> bool: ...
    def document(self, doc_id: str) -> Document: ...
    def document_rows(self, mask: np.ndarray) -> np.ndarray:
        """Exhaustive stores: every live row of each document that has a row in ``mask`` (one bool per row)."""
    def document_keys(self, keys: np.ndarray) -> np.ndarray:
        """Exhaustive stores: the live rows of each document that has a live row among ``keys``, ascending."""
    def term_rows(self, term: str) -> np.ndarray:
        """Exhaustive stores: the live rows whose indexed text holds the analysed ``term``, ascending."""
    def generation_info(self) -> dict[str, Any]: ...

    @property
    def has_dense(self) -> bool: ...

    # writing
    def add(self, documents: Iterable[Document], progress: Any = None) -> int:
        """Writes documents (an existing doc_id is replaced); returns the passages written."""

    def delete(self, doc_ids: Iterable[str]) -> int:
        """Removes documents and all their passages; unknown ids are an error. Returns documents removed."""

    def close(self) -> None: ...
