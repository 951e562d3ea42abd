"""The one search pipeline, composed of parts: every caller (the CLI, the service, ``capr eval``, batch jobs) searches
through a :class:`Searcher`; backends (``capr.store``) only give primitives. Options resolved (``config``) → parse
(once) → first stage (``first_stage``: lexical | dense | hybrid, or CDV) with the ``priors``, within the entity's
``tiers`` → optional ``second_stage`` → hits with highlights and evidence (``present``).

    for hit in Searcher(capr.load_index("idx/notes")).search(Query("q1", entity="gout", aspect="symptoms"), k=5):
        print(hit.rank, hit.score, hit.passage.title, hit.highlights)
"""

from __future__ import annotations

from copy import copy
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from capr.errors import QueryError
from capr.records import Query, Retriever, ScoredPassage
from capr.search.config import Evidence, GroupBy, SearchOptions, SearchProfile, check_supported, loaded_reranker
from capr.search.first_stage import FirstStage, first_stage_retriever, lexical_retriever
from capr.search.present import (EMPTY_INDEX_MESSAGE, Hit, SearchResult, add_evidence, annotate, best_per_document,
                                 scores_falling_with_rank)
from capr.search.priors import PRIOR_DEPTH, AspectPrior, aspect_notices, prior_shown, ranked_with_priors, \
    reranked_with_priors
from capr.search.query import DEFAULT_TEMPLATE, ParsedQuery, check_searchable, parse_query, parse_store_query
from capr.search.question_focus import question_focus
from capr.search.reading import read_query, with_reading
from capr.search.tiers import entity_forms, tiered_first_stage
from capr.store import as_store
from capr.store.protocol import Store

GROUP_DEPTH_FACTOR = 10  # --group-by doc: passages read per document asked for


class Searcher:
    """Searches one store (an embedded ``Index`` snapshot or a Milvus collection). ``reranker`` (a loaded
    second stage) and ``cdv`` (``capr.cdv.search.CdvRetriever``: CDV ranks the first stage, and gives ``cdv`` evidence) are optional;
    :meth:`open` gives the searcher ``capr search`` uses — the store's profile with its second stage loaded."""

    def __init__(self, store: Store | Any, reranker: Any = None, cdv: Any = None, profile: SearchProfile | None = None) -> None:
        self.store = as_store(store)  # an Index is searched through its embedded adapter
        self.reranker = reranker
        self.cdv = cdv
        self._profile = profile
        self.priors = AspectPrior(self.store)

    @classmethod
    def open(cls, store: Store, reranker: str | None = None, cdv: Any = None) -> "Searcher":
        """A ready searcher: the store's :class:`~capr.search.config.SearchProfile` (what the index records, over capr's
        defaults) with its second stage loaded (once per process). ``reranker``: a spec to use instead, or
        ``none`` for no second stage."""
        store = as_store(store)
        profile = SearchProfile.of(store).with_reranker(reranker)
        return cls(store, loaded_reranker(profile.reranker) if profile.reranker else None, cdv, profile)

    @property
    def profile(self) -> SearchProfile:
        if self._profile is None:
            self._profile = SearchProfile.of(self.store)
        return self._profile

    @property
    def reranker_name(self) -> str | None:
        """What the results name as their second stage: the profile's spec when it loaded it, else the model's name."""
        return None if self.reranker is None else self.profile.reranker or getattr(self.reranker, "name", None)

    def parse(self, query: Query | str, expand: bool = True, validate: bool = True) -> ParsedQuery:
        """``validate``: an aspect neither the synonym table nor the corpus knows is an error (benchmarks, whose
        aspect labels are given, skip it)."""
        # aspect → passages: suggestions for a mistyped aspect leave out one-off headings (capr.search.query.aspect_suggestions);
        # an aspect whose words the index holds is searched as words, as `capr search` does
        try:
            if validate:
                return parse_store_query(self.store, query, expand)
            return parse_query(query, self.store.analyzer, expand, aspects=None)
        except QueryError as e:
            asked = query.aspect if isinstance(query, Query) else None
            raise e.about("aspect" if asked and "aspect" in str(e) else "text") from None

    def prior_aspect(self, aspect: str | None, inferred: bool = False) -> str | None:
        """The section aspect the aspect prior favours for a query asking about ``aspect`` (capr.search.priors)."""
        return self.priors.aspect(aspect, inferred)

    def query_prior_aspect(self, pq: ParsedQuery) -> str | None:
        return self.priors.of_query(pq)

    def default_retriever(self) -> Retriever:
        """The best first stage this store supports (docs/RESULTS.md, issue 16 dev table): hybrid with vectors."""
        return self.profile.retriever

    def resolve(self, options: SearchOptions) -> SearchOptions:
        """``options`` with what was left to the store (retriever, fusion, re-rank depth) taken from its profile."""
        return self.profile.resolve(options)

    def check(self, options: SearchOptions) -> None:
        """Refuses what this store cannot do, naming the capability it lacks."""
        check_supported(self.store, self.resolve(options), cdv=self.cdv is not None)

    def search(self, query: Query | str | ParsedQuery, options: SearchOptions | None = None,
               within: np.ndarray | None = None, **kw: Any) -> SearchResult:
        """The whole pipeline for one query. Keyword arguments are :class:`SearchOptions` fields. ``within``: only
        these passages (store keys) may be returned — how ``capr eval`` runs this pipeline on a candidate pool."""
        given = options or SearchOptions(**kw)
        options = self.resolve(given)
        pq = query if isinstance(query, ParsedQuery) else self.parse(query, options.expand)
        if self.cdv is None:
            pq = read_query(self.store, pq, read=options.reading)
        options = self.profile.question_options(self.store, given, options, pq)
        self.check(options)
        if self.cdv is None:
            try:
                check_searchable(self.store.analyzer, pq.query, options.retriever, pq.expand)
            except QueryError as e:
                raise e.about("text") from None
        if not self.store.live_count():
            # a valid query on an index whose documents were all deleted: no results, not an error (and no
            # filter to check: there is nothing to filter)
            return SearchResult(pq, options, [], options.retriever.value, self.reranker_name, None, [EMPTY_INDEX_MESSAGE])
        if pq.reading is not None and pq.reading.withheld:  # written in a script the index has no word of
            return SearchResult(pq, options, [], options.retriever.value, self.reranker_name, None, [pq.reading.notice])
        if self.reranker is not None and options.group_by is GroupBy.passage and options.k > options.rerank_depth:
            return self._rerank_head(pq, options, within)
        aspect = self.query_prior_aspect(pq) if options.aspect_boost else None
        notices, wording_notice = aspect_notices(pq, aspect, options)
        notices[:0] = [pq.reading.notice] if pq.reading is not None and pq.reading.notice else []
        tiers: dict[str, tuple[int, bool]] | None = {} if self.reranker is not None else None
        asked, asked.lexical_memo = pq, {}
        try:
            pq, first, retriever = self._ranked(pq, options, within, notices, tiers)
        finally:
            asked.lexical_memo = None
        if wording_notice and first and prior_shown(self.store, pq, first, aspect):
            notices.insert(0, wording_notice)
        if self.reranker is not None:
            first = self.rerank(pq, first, options, tiers, self._depth(options)
                                if options.group_by is GroupBy.doc else options.k)
        if options.group_by is GroupBy.doc:
            first = best_per_document(first, options.k)
        hits = [Hit(rank=h.rank, score=h.score, passage=h.passage) for h in first]
        scores_falling_with_rank(hits)
        wants_forms = options.evidence is not Evidence.none or (options.highlights and options.entity_first)
        forms = entity_forms(self.store, pq, options.entity_synonyms) if wants_forms and pq.entity else []
        if options.highlights:
            annotate(self.store, pq, hits, forms[1:] if options.entity_first else [])
        method = None
        if options.evidence is not Evidence.none:  # a sentence denying the entity, by any of its names, is no evidence
            method = add_evidence(self.store, pq, hits, options, self.cdv, forms)
        return SearchResult(pq, options, hits, retriever, self.reranker_name, method, notices)

    def _depth(self, options: SearchOptions) -> int:
        """First-stage hits a search reads: the k, or the re-rank depth, and for k documents enough passages."""
        depth = max(options.k, options.rerank_depth) if self.reranker is not None else options.k
        return max(depth * GROUP_DEPTH_FACTOR, PRIOR_DEPTH) if options.group_by is GroupBy.doc else depth

    def _ranked(self, pq: ParsedQuery, options: SearchOptions, within: np.ndarray | None,
                notices: list[str], tiers: dict[str, tuple[int, bool]] | None) -> tuple[ParsedQuery, list[ScoredPassage], str]:
        """The first stage under the filter and ``within``, in the entity's tiers (``tiers`` receives each hit's), the
        query as searched (a question that names a title is about it), and what ranked the first stage."""
        try:
            flt = self.store.compile_filter(options.filters)
        except QueryError as e:
            raise e.about("filters") from None
        # which documents are about the entity is decided over every passage a search may see (the candidate pool
        # under ``within``), never only over those a filter keeps: a filter narrows the answers, not the entity
        scope = None
        if within is not None:
            scope = self.store.restrict(None, np.asarray(within, dtype=np.int64))
            flt = self.store.restrict(flt, np.asarray(within, dtype=np.int64))
        if options.question_focus and options.entity_first and self.cdv is None and not pq.structured:
            # the focus is read under the filter: never a title the caller may not see
            focus = question_focus(self.store, pq, flt)
            if focus:
                pq = with_reading(self.parse(Query(pq.qid, text=pq.text, entity=focus), pq.expand, validate=False),
                                  pq.reading)
        depth = self._depth(options)
        if self.cdv is not None:
            first, retriever = self.cdv.first_stage(self.store, pq, depth, options.filters), "cdv"
        elif options.entity_first and pq.entity:
            first = tiered_first_stage(self, pq, depth, options, flt, notices, tiers, scope)
            retriever = options.retriever.value
        else:
            first, retriever = self.first_stage(pq, depth, options, flt), options.retriever.value
        if not first and options.filters:
            try:
                self.store.explain_empty(options.filters)  # a filter value no passage has: say so
            except QueryError as e:
                raise e.about("filters") from None
        return pq, first, retriever

    def _rerank_head(self, pq: ParsedQuery, options: SearchOptions, within: np.ndarray | None) -> SearchResult:
        """k beyond the re-rank depth: the second stage re-orders the first stage's top ``rerank_depth`` (a search of
        that depth), and the rest of the k follow in the first stage's order, with its scores."""
        head = self.search(pq, replace(options, k=options.rerank_depth), within)
        first_stage = copy(self)
        first_stage.reranker = None
        whole = first_stage.search(pq, options, within)
        seen = {h.pid for h in head.hits}
        rest = [h for h in whole.hits if h.pid not in seen][: options.k - len(head.hits)]
        for rank, h in enumerate(rest, len(head.hits) + 1):
            h.rank = rank
        hits = head.hits + rest
        scores_falling_with_rank(hits)
        notices = list(dict.fromkeys(head.notices + whole.notices))
        return replace(head, options=options, hits=hits, notices=notices)

    def first_stage(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any = None, keep: Any = None,
                    named: np.ndarray | None = None, forms: list[list[str]] | None = None,
                    names: dict[int, bool] | None = None) -> list[ScoredPassage]:
        """Top-k passages of the resolved ``options``' retriever, with the priors (capr.search.priors)."""
        return ranked_with_priors(self.store, self.first_stage_retriever(options), pq, k, options,
                                  self.query_prior_aspect(pq), flt, keep, named, forms, names)

    def rerank(self, pq: ParsedQuery, hits: list[ScoredPassage], options: SearchOptions,
               tiers: dict[str, tuple[int, bool]], k: int) -> list[ScoredPassage]:
        """The second stage over the first stage's hits, within the entity's tiers, with the priors (capr.search.priors)."""
        aspect = self.query_prior_aspect(pq) if options.aspect_boost else None
        return reranked_with_priors(self.store, self.reranker, pq, hits, options, tiers, aspect, k)

    def first_stage_retriever(self, options: SearchOptions) -> FirstStage:
        """The first stage of resolved ``options`` over this store: BM25, TF-IDF, dense or hybrid."""
        return first_stage_retriever(self.store, options.retriever, options.fusion, options.template)

    def lexical_scores(self, pq: ParsedQuery, keys: np.ndarray | None, method: Retriever = Retriever.bm25) -> np.ndarray:
        """The lexical score of each given passage (``None``: every passage; exhaustive stores only)."""
        return lexical_retriever(self.store, method).scores(pq, keys)

    def encode(self, queries: Sequence[ParsedQuery], template: str = DEFAULT_TEMPLATE, batch_size: int = 256,
               progress: Any = None) -> np.ndarray:
        """Query vectors, encoded in batches."""
        texts, encode = [q.dense_text(template) for q in queries], self.store.encoder().encode_queries
        starts = range(0, len(texts), batch_size)
        return np.concatenate([encode(texts[i : i + batch_size]) for i in (progress or (lambda x: x))(starts)])


def search(store: Store, query: Query | str, k: int = 10, **options: Any) -> list[Hit]:
    """One query through the default pipeline (or ``options``, the :class:`SearchOptions` fields)."""
    return Searcher(store).search(query, SearchOptions(k=k, **options)).hits


__all__ = ["Searcher", "search"]
