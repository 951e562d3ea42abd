"""The search profile: how an index is searched when the caller asks for nothing else — its first stage, how hybrid
fuses BM25 and dense, and its second stage — with where each came from (capr's dev-chosen default, or what
``capr adapt`` recorded in the index). Every caller (CLI, service, eval, batch) gets it the same way, through
:meth:`capr.search.Searcher.open`, instead of reading the manifest itself.

    profile = SearchProfile.of(store)
    profile.reranker, profile.origins["reranker"]      # e.g. "bi:minilm,bi:/idx/second-stage", Origin.adapted
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping

from capr.errors import QueryError
from capr.records import Retriever
from capr.search.fusion import FusionConfig, FusionMethod, recorded_fusion
from capr.search.second_stage import DEFAULT_RERANK_DEPTH, NO_RERANKER
from capr.store.protocol import Capability, Store

# reciprocal-rank fusion, BM25 : dense = 1 : 4 — at or above the better single retriever on every dev set
# (experiments/default_dev.py; docs/RESULTS.md)
DEFAULT_FUSION = FusionConfig(FusionMethod.rrf, weights=(0.2, 0.8))


class Origin(str, Enum):
    """Where a setting of the profile came from."""

    default = "default"  # capr's default, chosen on dev sets
    adapted = "capr adapt"  # recorded in the index by `capr adapt` (its gate chose it)
    user = "user"  # asked for by the caller


@dataclass(frozen=True)
class SearchProfile:
    retriever: Retriever
    fusion: FusionConfig
    reranker: str | None = None  # a re-ranker spec (capr.search.second_stage.load_reranker), None: no second stage
    rerank_depth: int = DEFAULT_RERANK_DEPTH  # first-stage hits the second stage re-orders
    origins: Mapping[str, Origin] = field(default_factory=dict)

    @classmethod
    def of(cls, store: Store) -> "SearchProfile":
        """The profile ``store`` records, over capr's defaults for what it can do: hybrid with vectors, else BM25."""
        caps = store.capabilities
        return cls.from_manifest(store.dense_manifest() if Capability.dense in caps else None,
                                 dense=Capability.dense in caps, lexical=Capability.bm25 in caps)

    @classmethod
    def from_manifest(cls, dense_manifest: Mapping[str, Any] | None, dense: bool = True, lexical: bool = True) -> "SearchProfile":
        """The profile an index's dense manifest records (``fusion``, ``reranker``: see :func:`record_profile`)."""
        recorded = dense_manifest or {}
        retriever = (Retriever.hybrid if lexical else Retriever.dense) if dense else Retriever.bm25
        fusion = recorded_fusion(recorded.get("fusion"))
        second = recorded.get("reranker") or {}
        origins = {"retriever": Origin.default, "fusion": Origin.adapted if fusion else Origin.default,
                   "reranker": Origin.adapted if second.get("spec") else Origin.default,
                   "rerank_depth": Origin.adapted if second.get("depth") else Origin.default}
        return cls(retriever, fusion or replace(DEFAULT_FUSION), second.get("spec") or None,
                   int(second.get("depth") or DEFAULT_RERANK_DEPTH), origins)

    def with_reranker(self, asked: str | None) -> "SearchProfile":
        """The profile with the second stage a caller asked for: a spec, ``none`` (no second stage), or None (the
        profile's own)."""
        if asked is None:
            return self
        spec = None if asked == NO_RERANKER else asked
        return replace(self, reranker=spec, origins={**self.origins, "reranker": Origin.user})

    def to_dict(self) -> dict[str, Any]:
        return {"retriever": self.retriever.value,
                "fusion": {"method": self.fusion.method.value, "weights": list(self.fusion.weights)},
                "reranker": self.reranker, "rerank_depth": self.rerank_depth,
                "origins": {k: v.value for k, v in self.origins.items()}}


def supported_retrievers(store: Store) -> list[Retriever]:
    """The first stages ``store`` can run (what it lacks for the others: :meth:`capr.search.Searcher.check`)."""
    caps = store.capabilities
    needs = {Retriever.bm25: {Capability.bm25}, Retriever.tfidf: {Capability.tfidf}, Retriever.dense: {Capability.dense},
             Retriever.hybrid: {Capability.bm25, Capability.dense}}
    return [r for r in Retriever if needs[r] <= caps]


def record_profile(dense_manifest: dict[str, Any], fusion: FusionConfig | Mapping[str, Any] | None = None,
                   reranker: str | None = None, rerank_depth: int | None = None,
                   adapted: Mapping[str, Any] | None = None) -> None:
    """Writes into an index's dense manifest what :meth:`SearchProfile.from_manifest` reads back (``capr adapt``
    records what its gate kept, and why)."""
    if adapted is not None:
        dense_manifest["adapted"] = dict(adapted)
    if fusion is not None:
        if isinstance(fusion, FusionConfig):
            fusion = {"method": fusion.method.value, "weights": list(fusion.weights)}
        dense_manifest["fusion"] = {"method": fusion.get("method", "rrf"), "weights": list(fusion["weights"])}
    if reranker:
        dense_manifest["reranker"] = {"spec": reranker, "depth": int(rerank_depth or DEFAULT_RERANK_DEPTH)}


_LOADED: dict[str, Any] = {}
_LOADING = threading.Lock()


def loaded_reranker(spec: str) -> Any:
    """The re-ranker ``spec`` names, loaded once per process (a service, a batch job and an evaluation search with the
    same model many times). A spec that cannot be loaded is a QueryError about ``reranker``."""
    with _LOADING:
        if spec not in _LOADED:
            from capr.search.second_stage import load_reranker

            try:
                _LOADED[spec] = load_reranker(spec)
            except QueryError as e:
                raise e.about("reranker") from None
        return _LOADED[spec]


__all__ = ["DEFAULT_FUSION", "Origin", "SearchProfile", "loaded_reranker", "record_profile", "supported_retrievers"]
