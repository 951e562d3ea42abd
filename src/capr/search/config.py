"""What a search runs with, resolved in one place: the :class:`SearchOptions` a caller gives (the CLI's flags, the
service's request, ``capr eval``'s config or a plain mapping, read by :meth:`SearchOptions.from_mapping`), and the
:class:`SearchProfile` an index records — how it is searched when the caller asks for nothing else (its first stage,
how hybrid fuses BM25 and dense, its second stage), with where each setting came from (capr's dev-chosen default, or
what ``capr adapt`` recorded). :meth:`SearchProfile.resolve` fills what the options leave to the store.

    options = SearchOptions.from_mapping({"k": 5, "fusion": "weighted", "evidence": True})
    profile = SearchProfile.of(store)
    profile.resolve(options).fusion, profile.origins["fusion"]      # e.g. FusionConfig(...), Origin.default
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, Mapping

from capr.errors import QueryError
from capr.records import OptionRange as R, Retriever, check_option
from capr.search.fusion import FusionConfig, FusionMethod, recorded_fusion
from capr.search.query import DEFAULT_TEMPLATE, ParsedQuery, check_template
from capr.search.second_stage import DEFAULT_RERANK_DEPTH, NO_RERANKER
from capr.store.protocol import Capability, Store

# The defaults below were chosen on dev sets only (experiments/default_dev.py; docs/RESULTS.md, issue 16 dev table).
DEFAULT_ASPECT_BOOST = 2.0  # a passage of the asked aspect's section scores ×3
DEFAULT_MENTION_BOOST = 0.5  # ⟨entity, aspect⟩: within the entity's documents, a passage naming it scores ×1.5
# reciprocal-rank fusion, BM25 : dense = 1 : 4 — at or above the better single retriever on every dev set
# (experiments/default_dev.py; docs/RESULTS.md)
DEFAULT_FUSION = FusionConfig(FusionMethod.rrf, weights=(0.2, 0.8))
EQUAL_SHARES = (0.5, 0.5)  # BM25 : dense when a caller names another fusion method than the default's


class GroupBy(str, Enum):
    passage = "passage"
    doc = "doc"  # one hit per document: its best passage (the document scores as its best passage)


class EntityScope(str, Enum):
    """Where an ⟨entity, aspect⟩ query's entity must be named for a passage to rank in the first tier."""

    passage = "passage"  # the passage (or its document's title): first; then its document's other passages; then the rest
    document = "document"  # the passage or any passage of its document: first; then the rest


class WordingPrior(str, Enum):
    """Where the aspect prior applies when the aspect was read from a question's wording."""

    named = "named"  # passages of documents whose title the question names
    everywhere = "everywhere"


class Evidence(str, Enum):
    none = "none"
    lexical = "lexical"
    dense = "dense"
    cdv = "cdv"


@dataclass
class SearchOptions:
    """How a query is searched. The defaults are what ``capr search`` does without flags."""

    k: int = 10
    # None: the best retriever the store supports — hybrid (BM25 + dense) with vectors, else BM25
    retriever: Retriever | None = None
    filters: dict[str, Any] | None = None
    expand: bool = True  # aspect synonyms, as a disjunction-max
    aspect_boost: float = DEFAULT_ASPECT_BOOST
    # None: the fusion the index records (`capr adapt` chooses one for its model), else DEFAULT_FUSION
    fusion: FusionConfig | None = None
    template: str = DEFAULT_TEMPLATE
    # a second stage re-orders the first stage's top this many; the rest of the k keep the first stage's order.
    # None: what the index records, else capr.search.second_stage.DEFAULT_RERANK_DEPTH
    rerank_depth: int | None = None
    # a re-ranked hit scores share/(k + its re-ranker rank) + (1 - share)/(k + its first-stage rank): 1 = the
    # re-ranker's order alone (within the entity's tiers, with the aspect prior); None: the re-ranker's own default
    # (an ensemble's 1.0), else DEFAULT_RERANK_SHARE
    rerank_share: float | None = None
    evidence: Evidence = Evidence.none
    thetas: tuple[float, float] = (0.8, 0.4)  # CDV evidence: a span opens at θ_open, closes below θ_close
    highlights: bool = True  # query-term spans and snippets (batch jobs that keep only ids turn them off)
    # ⟨entity, aspect⟩: passages that mention the entity (in their text or their document's title) rank above
    # every passage that does not, so the asked aspect of *another* condition cannot come first
    entity_first: bool = True
    entity_scope: EntityScope = EntityScope.document
    # scope "document": a passage that itself names the entity scores ×(1 + this) within the first tier
    mention_boost: float = DEFAULT_MENTION_BOOST
    # the entity's other names count as mentions ("Increased body weight" ← "weight gain"; capr.labels.synonyms)
    entity_synonyms: bool = True
    group_by: GroupBy = GroupBy.passage
    # an aspect read from a question's wording favours its sections only in documents whose title the question
    # names (capr.search.question_focus); everywhere: in every document
    wording_prior: WordingPrior = WordingPrior.named
    # a free-text question that names the title of a document it may find is searched as about that entity (its
    # tiers, as for an ⟨entity, aspect⟩ query; capr.search.question_focus)
    question_focus: bool = True
    # a free-text question's BM25 : dense shares follow how rare its words are in the index (capr.search.query_weights)
    # when the fusion is left to the store. Off by default: it is below the pipeline without it on medication and
    # consumer questions with MiniLM, where rare words are brand names BM25 cannot read (docs/RESULTS.md, issue 53)
    fusion_by_question: bool = False
    # a free-text question is read as a pharmacist or clinician reads it: drug brands as generic names, shorthand,
    # HPO synonyms, one-edit misspellings of the index's words (capr.search.reading). Off by default: on the
    # free-text dev sets it is not at or above the pipeline without it on every set (docs/RESULTS.md, issue 53)
    reading: bool = False
    # a free-text question is fused as this index's own cloze probe of each retriever's strength asks
    # (capr.search.strength.probe_fusion, measured once per index generation in a process) when the fusion is left
    # to the store: BM25 alone where the encoder finds fewer answers than BM25 there (BM25's share by question is then
    # not applied), else the default. Off by default: it did not pass the rule every default must (docs/RESULTS.md,
    # issue 53: it passes every dev set with the static encoder, and costs MiniLM on NFCorpus)
    fusion_probe: bool = False

    def __post_init__(self) -> None:
        self.retriever = Retriever(self.retriever) if self.retriever is not None else None
        self.wording_prior = WordingPrior(self.wording_prior)
        self.group_by = GroupBy(self.group_by or "passage")
        self.entity_scope = EntityScope(self.entity_scope)
        self.evidence = Evidence(self.evidence or "none")
        if isinstance(self.fusion, (str, FusionMethod)):
            self.fusion = FusionConfig(method=FusionMethod(self.fusion))
        check_template(self.template)
        # one rule for the CLI, Python and the service: a NaN or infinite number, or a k that is no count, is refused
        # (a NaN boost ranked by "score": NaN, which is not JSON); a negative boost would push the asked aspect down
        for name, must in (("k", R.results), ("aspect_boost", R.boost), ("mention_boost", R.boost),
                           ("rerank_share", R.share), ("rerank_depth", R.results), ("thetas", R.share)):
            for value in (getattr(self, name) if name == "thetas" else (getattr(self, name),)):
                check_option(name, value, must, field=name)
        self.k = int(self.k)

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any], recorded: "SearchProfile | None" = None) -> "SearchOptions":
        """The options a search runs from what a caller gave — the CLI's flags, the service's request, ``capr
        eval``'s config, or any mapping of these fields. A field given as None is left to its default (the retriever,
        the fusion and the re-rank depth to the searched store's profile, :meth:`SearchProfile.resolve`). Callers'
        shorthand is read here, once:

        - ``fusion`` as a method (``rrf``, ``weighted``): the default's method leaves the fusion to the store;
          another method fuses BM25 and dense at equal shares;
        - ``evidence`` as True: sentences scored as an explicitly dense or hybrid retriever reads them (dense),
          else by the cheap lexical scores; False: none;
        - ``filters`` empty: no filter.

        ``recorded``: the profile of another index than the one searched (``capr eval --model IDX`` searches a
        benchmark index built with IDX's encoder): a fusion left to the store is the one ``capr adapt`` recorded
        there, as ``capr search`` on IDX searches."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise QueryError(f"unknown search option {unknown[0]!r}", unknown[0])
        values = {name: value for name, value in given.items() if value is not None}
        fusion = values.get("fusion")
        if isinstance(fusion, (str, FusionMethod)):
            method = FusionMethod(fusion)
            values["fusion"] = None if method is DEFAULT_FUSION.method else \
                replace(DEFAULT_FUSION, method=method, weights=EQUAL_SHARES)
        if values.get("fusion") is None and recorded is not None and recorded.origins.get("fusion") is Origin.adapted:
            values["fusion"] = recorded.fusion
        if isinstance(values.get("evidence"), bool):
            dense = values.get("retriever") in (Retriever.dense, Retriever.hybrid)
            values["evidence"] = (Evidence.dense if dense else Evidence.lexical) if values["evidence"] else Evidence.none
        if "filters" in values and not values["filters"]:
            del values["filters"]
        return cls(**{name: value for name, value in values.items() if value is not None})


class Origin(str, Enum):
    """Where a setting of the profile came from."""

    default = "default"  # capr's default, chosen on dev sets
    adapted = "capr adapt"  # recorded in the index by `capr adapt` (its gate chose it)
    user = "user"  # asked for by the caller


@dataclass(frozen=True)
class SearchProfile:
    """How an index is searched when the caller asks for nothing else. Every caller (CLI, service, eval, batch) gets
    it the same way, through :meth:`capr.search.Searcher.open`, instead of reading the manifest itself.

        profile = SearchProfile.of(store)
        profile.reranker, profile.origins["reranker"]      # e.g. "bi:minilm,bi:/idx/second-stage", Origin.adapted
    """

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

    def resolve(self, options: SearchOptions) -> SearchOptions:
        """``options`` with what was left to the store (retriever, fusion, re-rank depth) taken from this profile."""
        if options.retriever is None:
            options = replace(options, retriever=self.retriever)
        if options.fusion is None:
            options = replace(options, fusion=replace(self.fusion))
        if options.rerank_depth is None:
            options = replace(options, rerank_depth=self.rerank_depth)
        return options

    def question_options(self, store: Store, given: SearchOptions, resolved: SearchOptions,
                         pq: ParsedQuery) -> SearchOptions:
        """``resolved`` with the fusion weights of a free-text question when the fusion was left to the store and the
        store records none: the index probe's (``fusion_probe``, capr.search.strength), else by the question's words
        (capr.search.query_weights)."""
        if (given.fusion is not None or resolved.retriever is not Retriever.hybrid or pq.structured
                or self.origins.get("fusion") is Origin.adapted):
            return resolved
        if given.fusion_probe:
            from capr.search.strength import probed_fusion

            probed = probed_fusion(store)
            if probed is not None:
                return replace(resolved, fusion=probed)
        if not given.fusion_by_question:
            return resolved
        from capr.search.query_weights import question_fusion

        return replace(resolved, fusion=question_fusion(store, pq, resolved.fusion))

    def to_dict(self) -> dict[str, Any]:
        return {"retriever": self.retriever.value,
                "fusion": {"method": self.fusion.method.value, "weights": list(self.fusion.weights)},
                "reranker": self.reranker, "rerank_depth": self.rerank_depth,
                "origins": {k: v.value for k, v in self.origins.items()}}


def check_supported(store: Store, options: SearchOptions, cdv: bool = False) -> None:
    """Refuses what ``store`` cannot do with resolved ``options``, naming the capability it lacks (``cdv``: a CDV
    model ranks the first stage and can give evidence)."""
    r = options.retriever
    caps = store.capabilities
    if not cdv:
        if r is Retriever.tfidf and Capability.tfidf not in caps:
            raise QueryError("tfidf is only available on the embedded backend; use bm25, dense or hybrid", "retriever")
        if r in (Retriever.bm25, Retriever.hybrid) and Capability.bm25 not in caps:
            raise QueryError(f"{store.name}: this index has no BM25 field ({store.backend.value} backend); "
                             "use --retriever dense", "retriever")
        if r in (Retriever.dense, Retriever.hybrid) and Capability.dense not in caps:
            raise QueryError(f"retriever {r.value!r} needs an index built with vectors: {store.name}: "
                             "index has no vectors; build it without --lexical-only", "retriever")
    if options.evidence is Evidence.dense and Capability.dense not in caps:
        raise QueryError("dense evidence needs an index built with vectors (capr index without --lexical-only)", "evidence")
    if options.evidence is Evidence.cdv and not cdv:
        raise QueryError("cdv evidence needs a CDV model (--cdv DIR)", "evidence")


def supported_retrievers(store: Store) -> list[Retriever]:
    """The first stages ``store`` can run (what it lacks for the others: :func:`check_supported`)."""
    caps = store.capabilities
    needs = {Retriever.bm25: {Capability.bm25}, Retriever.tfidf: {Capability.tfidf}, Retriever.dense: {Capability.dense},
             Retriever.hybrid: {Capability.bm25, Capability.dense}}
    return [r for r in Retriever if needs[r] <= caps]


def record_profile(writer: Any, fusion: FusionConfig | Mapping[str, Any] | None = None, reranker: str | None = None,
                   rerank_depth: int | None = None, adapted: Mapping[str, Any] | None = None) -> None:
    """Records in the index ``writer`` builds (a ``capr.index.IndexWriter``) what :meth:`SearchProfile.of` reads
    back (``capr adapt`` records what its gate kept, and why)."""
    recorded: dict[str, Any] = {}
    if adapted is not None:
        recorded["adapted"] = dict(adapted)
    if fusion is not None:
        if isinstance(fusion, FusionConfig):
            fusion = {"method": fusion.method.value, "weights": list(fusion.weights)}
        recorded["fusion"] = {"method": fusion.get("method", "rrf"), "weights": list(fusion["weights"])}
    if reranker:
        recorded["reranker"] = {"spec": reranker, "depth": int(rerank_depth or DEFAULT_RERANK_DEPTH)}
    writer.record_search_profile(recorded)


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


__all__ = ["DEFAULT_ASPECT_BOOST", "DEFAULT_FUSION", "DEFAULT_MENTION_BOOST", "EntityScope", "Evidence", "GroupBy",
           "Origin", "SearchOptions", "SearchProfile", "WordingPrior", "check_supported", "loaded_reranker",
           "record_profile", "supported_retrievers"]
