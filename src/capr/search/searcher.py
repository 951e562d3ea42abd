"""The one search pipeline. Every caller — the CLI, the service, ``capr eval`` and the batch jobs — searches
through a :class:`Searcher`; backends (``capr.store``) only give primitives.

    validate + parse (once) → first stage (lexical | dense | hybrid, or CDV) → fusion → aspect prior
    → optional re-rank → evidence sentences and highlights → :class:`Hit` (serialised one way: ``Hit.to_dict``)

    searcher = Searcher(capr.load_index("idx/notes"))
    for hit in searcher.search(Query("q1", entity="IgA nephropathy", aspect="symptoms"), k=5):
        print(hit.rank, hit.score, hit.passage.title, hit.highlights)
"""

from __future__ import annotations

from copy import copy
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from capr.text.aspects import GENERIC_ASPECTS, GENERIC_ASPECT_MIN_DOCUMENT_SHARE
from capr.errors import QueryError
from capr.records import OptionRange as R, check_option
from capr.records import Retriever
from capr.text.aspects import nearest_aspect
from capr.search.query import DEFAULT_TEMPLATE, ParsedQuery, check_searchable, check_template, parse_query, parse_store_query
from capr.search.question_focus import question_focus, wording_prior_rows
from capr.records import Passage, Query, Run, ScoredPassage
from capr.search.profile import DEFAULT_FUSION, Origin, SearchProfile, loaded_reranker
from capr.search.first_stage import FirstStage, first_stage_retriever, lexical_retriever
from capr.search.fusion import FusionConfig, FusionMethod
from capr.search.highlight import snippet, term_spans
from capr.search.mentions import names_entity
from capr.store import as_store
from capr.store.protocol import Capability, Store

if TYPE_CHECKING:
    from capr.search.evidence import SentenceScore

# The defaults below were chosen on dev sets only (experiments/default_dev.py; docs/RESULTS.md, issue 16 dev table).
DEFAULT_ASPECT_BOOST = 2.0  # a passage of the asked aspect's section scores ×3
DEFAULT_MENTION_BOOST = 0.5  # ⟨entity, aspect⟩: within the entity's documents, a passage naming it scores ×1.5
# Said (CLI, API) instead of "no matching passages" when a search finds nothing because nothing is left.
EMPTY_INDEX_MESSAGE = "the index is empty: all documents were deleted"
PRIOR_DEPTH = 100  # candidates a first stage returns when an aspect prior or fusion re-orders them
GROUP_DEPTH_FACTOR = 10  # --group-by doc: passages read per document asked for


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
    # when the fusion is left to the store
    fusion_by_question: bool = True

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


@dataclass
class Hit:
    """One ranked passage with its highlights (document offsets) and, when asked, scored sentences."""

    rank: int
    score: float
    passage: Passage
    highlights: list[tuple[int, int]] = field(default_factory=list)
    snippet: tuple[int, str, list[tuple[int, int]]] | None = None  # (offset in passage, text, highlights in it)
    sentences: list["SentenceScore"] | None = None

    @property
    def pid(self) -> str:
        return self.passage.pid

    def to_dict(self) -> dict[str, Any]:
        p = self.passage
        out = {"rank": self.rank, "pid": p.pid, "doc_id": p.doc_id, "title": p.title, "aspect": p.aspect,
               "heading": p.heading, "score": round(float(self.score), 4), "start": p.start, "end": p.end,
               "text": p.text, "highlights": [list(h) for h in self.highlights], "metadata": p.metadata}
        if self.snippet is not None:
            out["snippet_start"], out["snippet"], _ = self.snippet
        out["sentences"] = None if self.sentences is None else [s.to_dict() for s in self.sentences]
        return out


@dataclass
class SearchResult:
    query: ParsedQuery
    options: SearchOptions
    hits: list[Hit]
    retriever: str  # what ranked the first stage: a Retriever value, or "cdv"
    reranker: str | None = None
    evidence_method: str | None = None
    notices: list[str] = field(default_factory=list)  # what the user should know about these results

    def fusion_shown(self) -> dict[str, Any] | None:
        """How the hybrid first stage fused BM25 and dense for this query (the weights may be the question's own:
        capr.search.query_weights); None for any other first stage."""
        fusion = self.options.fusion
        if self.retriever != Retriever.hybrid.value or fusion is None:
            return None
        return {"method": fusion.method.value, "weights": {"bm25": fusion.weights[0], "dense": fusion.weights[-1]}}

    def to_dict(self) -> dict[str, Any]:
        q = self.query.query
        return {"query": {"text": q.text, "entity": q.entity, "aspect": q.aspect}, "retriever": self.retriever,
                "fusion": self.fusion_shown(), "reranker": self.reranker, "filters": _shown_filters(self.options.filters),
                "evidence_method": self.evidence_method, "notices": list(self.notices),
                "results": [h.to_dict() for h in self.hits]}


def _shown_filters(filters: Any) -> Any:
    """Filters as given: a {field: value} dict as it is, clauses (capr.filters) as their text."""
    if not filters or isinstance(filters, dict):
        return filters or {}
    return [str(c) for c in filters]


class Searcher:
    """Searches one store (an embedded ``Index`` snapshot or a Milvus collection). ``reranker`` (a loaded
    second stage) and ``cdv`` (``capr.cdv.search.CdvRetriever``: CDV ranks the first stage, and gives ``cdv`` evidence) are optional;
    :meth:`open` gives the searcher ``capr search`` uses — the store's profile with its second stage loaded."""

    def __init__(self, store: Store | Any, reranker: Any = None, cdv: Any = None, profile: SearchProfile | None = None) -> None:
        self.store = as_store(store)  # an Index is searched through its embedded adapter
        self.reranker = reranker
        self.cdv = cdv
        self._profile = profile
        self._prior_aspects: dict[tuple[str, bool], str | None] = {}

    @classmethod
    def open(cls, store: Store, reranker: str | None = None, cdv: Any = None) -> "Searcher":
        """A ready searcher: the store's :class:`~capr.search.profile.SearchProfile` (what the index records, over capr's
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
        if self.reranker is None:
            return None
        return self.profile.reranker or getattr(self.reranker, "name", None)

    # -- parsing ------------------------------------------------------------------------------------
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
        """The section aspect the aspect prior favours for a query asking about ``aspect``: itself when the
        store has it, else the store's aspect it reads as (:func:`capr.search.query.nearest_aspect`; "genetic
        inheritance" → inheritance), else None (no prior). ``inferred``: the aspect was read from a question's
        wording; a generic one ("what is X?" → information) counts only where most documents of the corpus
        have such a section (:data:`capr.text.aspects.GENERIC_ASPECTS`)."""
        if not aspect:
            return None
        key = (aspect, inferred and aspect in GENERIC_ASPECTS)
        if key not in self._prior_aspects:
            store = self.store
            found = aspect if store.has_aspect(aspect) else nearest_aspect(aspect, store.aspect_counts(), store.analyzer)
            if found and key[1]:
                passages = store.aspect_counts().get(found) or 0  # None: a backend that cannot count them
                documents = int(store.stats().get("documents", 0))
                found = found if documents and passages >= GENERIC_ASPECT_MIN_DOCUMENT_SHARE * documents else None
            self._prior_aspects[key] = found
        return self._prior_aspects[key]

    def query_prior_aspect(self, pq: ParsedQuery) -> str | None:
        """:meth:`prior_aspect` of a parsed query: its aspect is inferred when the query gave none."""
        return self.prior_aspect(pq.aspect, inferred=not pq.query.aspect)

    def default_retriever(self) -> Retriever:
        """The best first stage this store supports (docs/RESULTS.md, issue 16 dev table): hybrid with vectors."""
        return self.profile.retriever

    def default_fusion(self) -> FusionConfig:
        """How hybrid fuses BM25 and dense on this store: what its index records, else DEFAULT_FUSION."""
        return replace(self.profile.fusion)

    def resolve(self, options: SearchOptions) -> SearchOptions:
        """``options`` with what was left to the store (retriever, fusion, re-rank depth) taken from its profile."""
        if options.retriever is None:
            options = replace(options, retriever=self.default_retriever())
        if options.fusion is None:
            options = replace(options, fusion=self.default_fusion())
        if options.rerank_depth is None:
            options = replace(options, rerank_depth=self.profile.rerank_depth)
        return options

    def question_options(self, given: SearchOptions, resolved: SearchOptions, pq: ParsedQuery) -> SearchOptions:
        """``resolved`` with the fusion weights of a free-text question (capr.search.query_weights) when the fusion was
        left to the store and the store records none."""
        if (not given.fusion_by_question or given.fusion is not None or resolved.retriever is not Retriever.hybrid
                or pq.structured or self.profile.origins.get("fusion") is Origin.adapted):
            return resolved
        from capr.search.query_weights import question_fusion

        return replace(resolved, fusion=question_fusion(self.store, pq, resolved.fusion))

    def check(self, options: SearchOptions) -> None:
        """Refuses what this store cannot do, naming the capability it lacks."""
        r = self.resolve(options).retriever
        caps = self.store.capabilities
        if self.cdv is None:
            if r is Retriever.tfidf and Capability.tfidf not in caps:
                raise QueryError("tfidf is only available on the embedded backend; use bm25, dense or hybrid", "retriever")
            if r in (Retriever.bm25, Retriever.hybrid) and Capability.bm25 not in caps:
                raise QueryError(f"{self.store.name}: this index has no BM25 field ({self.store.backend.value} backend); "
                                 "use --retriever dense", "retriever")
            if r in (Retriever.dense, Retriever.hybrid) and Capability.dense not in caps:
                raise QueryError(f"retriever {r.value!r} needs an index built with vectors: {self.store.name}: "
                                 "index has no vectors; build it without --lexical-only", "retriever")
        if options.evidence is Evidence.dense and Capability.dense not in caps:
            raise QueryError("dense evidence needs an index built with vectors (capr index without --lexical-only)", "evidence")
        if options.evidence is Evidence.cdv and self.cdv is None:
            raise QueryError("cdv evidence needs a CDV model (--cdv DIR)", "evidence")

    # -- the pipeline -------------------------------------------------------------------------------
    def search(self, query: Query | str | ParsedQuery, options: SearchOptions | None = None,
               within: np.ndarray | None = None, **kw: Any) -> SearchResult:
        """The whole pipeline for one query. Keyword arguments are :class:`SearchOptions` fields. ``within``: only
        these passages (store keys) may be returned — how ``capr eval`` runs this pipeline on a candidate pool."""
        given = options or SearchOptions(**kw)
        options = self.resolve(given)
        notices: list[str] = []
        pq = query if isinstance(query, ParsedQuery) else self.parse(query, options.expand)
        options = self.question_options(given, options, pq)
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
        if self.reranker is not None and options.group_by is GroupBy.passage and options.k > options.rerank_depth:
            return self._rerank_head(pq, options, within)
        aspect = self.query_prior_aspect(pq) if options.aspect_boost else None
        # an aspect read from the question's wording favours only the sections of documents whose title the question
        # names: said once a hit shows that it favoured one (a question that names no title has no prior at all)
        wording_notice = None
        if aspect and aspect != pq.aspect:
            notice = f"no section of this index is about {pq.aspect!r}; sections about {aspect!r} are favoured"
            if pq.query.aspect or options.wording_prior is WordingPrior.everywhere:
                notices.append(notice)
            else:
                wording_notice = notice
        elif options.aspect_boost and pq.query.aspect and not aspect:
            # an asked aspect that no section has (or an index without headings): say so, or every hit looks like
            # an answer from that section
            notices.append(f"no section of this index is about {pq.aspect!r}; no section is favoured, "
                           "its words are searched")
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
                pq = self.parse(Query(pq.qid, text=pq.text, entity=focus), pq.expand, validate=False)
        depth = max(options.k, options.rerank_depth) if self.reranker is not None else options.k
        if options.group_by is GroupBy.doc:
            depth = max(depth * GROUP_DEPTH_FACTOR, PRIOR_DEPTH)  # enough passages for k distinct documents
        tiers: dict[str, tuple[int, bool]] | None = {} if self.reranker is not None else None
        if self.cdv is not None:
            first = self.cdv.first_stage(self.store, pq, depth, options.filters)
            retriever = "cdv"
        else:
            retriever = options.retriever.value
            first = self.entity_first_stage(pq, depth, options, flt, notices, tiers, scope) if options.entity_first and pq.entity \
                else self.first_stage(pq, depth, options, flt)
        if not first and options.filters:
            try:
                self.store.explain_empty(options.filters)  # a filter value no passage has: say so
            except QueryError as e:
                raise e.about("filters") from None
        if wording_notice and first:
            keys = self.store.keys_of([h.pid for h in first])
            favoured = self.store.aspect_flags(keys, aspect)
            if (favoured & wording_prior_rows(self.store, pq, keys, [h.passage.title for h in first])).any():
                notices.insert(0, wording_notice)
        if self.reranker is not None:
            first = self.rerank(pq, first, options, tiers, depth if options.group_by is GroupBy.doc else options.k)
        if options.group_by is GroupBy.doc:
            first = best_per_document(first, options.k)
        hits = [Hit(rank=h.rank, score=h.score, passage=h.passage) for h in first]
        scores_falling_with_rank(hits)
        if options.highlights:
            self.annotate(pq, hits, self.entity_forms(pq, options)[1:] if pq.entity and options.entity_first else [])
        method = self.add_evidence(pq, hits, options) if options.evidence is not Evidence.none else None
        return SearchResult(pq, options, hits, retriever, self.reranker_name, method, notices)

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

    def first_stage(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any = None,
                    keep: Any = None, named: np.ndarray | None = None,
                    forms: list[list[str]] | None = None, names: dict[int, bool] | None = None) -> list[ScoredPassage]:
        """Top-k passages of the retriever, with the aspect prior: the score of a passage from a section whose
        aspect is the one asked about (explicit, or inferred from the question) is multiplied by 1 + boost.
        ``keep(keys) -> bool mask``: a condition the backend cannot filter by, applied to each retriever's list
        before fusion (so the fused ranks are those of the kept passages, as a filter would give). ``named``: rows
        that name the query's entity, scored ×(1 + mention_boost); with the entity's ``forms``, only those whose
        title or one sentence names it, not to deny it ("No lymphadenopathy."); ``names`` keeps what each passage
        read so says, by row, for the next ranking of the same query."""
        store = self.store
        if not store.live_count():
            return []  # every document deleted
        retriever = self.first_stage_retriever(options)
        aspect = self.query_prior_aspect(pq)
        boost = options.aspect_boost if aspect else 0.0
        deep = boost or retriever.reorders or keep is not None or named is not None
        keys, vals = retriever.top(pq, max(k, PRIOR_DEPTH) if deep else k, flt, keep)
        read: dict[int, Passage] = {}  # passages already read, by key
        if boost and len(keys):
            favoured = store.aspect_flags(keys, aspect)
            if options.wording_prior is WordingPrior.named and favoured.any():
                favoured &= wording_prior_rows(store, pq, keys)
            vals = vals * np.where(favoured, 1.0 + boost, 1.0).astype(np.float32)
        if named is not None and len(keys):
            naming, unboosted = named[keys], vals

            def boosted() -> np.ndarray:
                return unboosted * np.where(naming, 1.0 + options.mention_boost, 1.0).astype(np.float32)

            checked = np.zeros(len(keys), dtype=bool)
            while forms:
                # read only the naming passages that reach the top k: one that only denies the entity (or scatters
                # its words over sentences) loses its bonus, and those it lets in are read in turn
                top = np.lexsort((keys, -boosted()))[:k]
                todo = top[naming[top] & ~checked[top]]
                if not len(todo):
                    break
                checked[todo] = True
                known = names if names is not None else {}
                unknown = np.asarray([i for i in todo.tolist() if int(keys[i]) not in known], dtype=np.int64)
                if len(unknown):
                    passages = store.passages(keys[unknown])
                    read.update(zip(keys[unknown].tolist(), passages))
                    known.update(zip(keys[unknown].tolist(), self.names_entity(passages, forms).tolist()))
                naming[todo] = [known[int(key)] for key in keys[todo].tolist()]
            vals = boosted()
        order = np.lexsort((keys, -vals))[:k]  # ties: insertion order
        unread = [key for key in keys[order].tolist() if key not in read]
        read.update(zip(unread, store.passages(np.asarray(unread, dtype=keys.dtype))) if unread else ())
        passages = [read[key] for key in keys[order].tolist()]
        return [ScoredPassage(pid=p.pid, score=float(v), rank=i + 1, passage=p)
                for i, (p, v) in enumerate(zip(passages, vals[order]))]

    def entity_first_stage(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any,
                           notices: list[str], tiers: dict[str, tuple[int, bool]] | None = None,
                           scope: Any = None) -> list[ScoredPassage]:
        """The first stage where the entity counts: passages that mention every term of the entity (in their text,
        or the document title indexed with them) first, then the other passages of documents that mention it, then
        the rest; each tier ranked by the retriever and the aspect prior, and narrowed by the filter ``flt`` only
        after the entity's documents are known (``scope``: the passages that may count, None for all). When nothing
        mentions the entity, a notice says so and the closest matches are shown. ``tiers`` receives each hit's
        (tier, names the entity), which a second stage keeps."""
        forms = self.entity_forms(pq, options)
        if not forms:
            return self.first_stage(pq, k, options, flt)
        hits = entity_tiers(self).rank(pq, k, options, flt, notices, tiers, scope, forms)
        return [ScoredPassage(pid=h.pid, score=h.score, rank=i + 1, passage=h.passage) for i, h in enumerate(hits)]

    # -- second stage -------------------------------------------------------------------------------
    def rerank(self, pq: ParsedQuery, hits: list[ScoredPassage], options: SearchOptions,
               tiers: dict[str, tuple[int, bool]], k: int) -> list[ScoredPassage]:
        """The re-ranker orders the first stage's hits *within the pipeline's structure*: the entity's tiers keep
        their order (a re-ranker cannot put the asked section of another disease above the entity's own passages),
        and the aspect prior and the entity-mention bonus apply to the re-ranker's ranking as they apply to the
        first stage's (reciprocal rank × (1 + boost)); ``options.rerank_share`` fuses that with the first stage's
        rank (which has them already)."""
        from capr.index.segment import passage_index_text
        from capr.search.second_stage import fuse_with_first_stage, rerank_share, score_passages

        if not hits:
            return []
        titles = self.store.includes_titles()
        scores = score_passages(self.reranker, pq.dense_text("plain"), [h.passage for h in hits],
                                [passage_index_text(h.passage, titles) for h in hits])
        rank = np.empty(len(hits), dtype=np.int64)
        rank[np.argsort(-scores, kind="stable")] = np.arange(1, len(hits) + 1)
        value = 1.0 / (options.fusion.rrf_k + rank)
        aspect = self.query_prior_aspect(pq) if options.aspect_boost else None
        if aspect:
            keys = self.store.keys_of([h.pid for h in hits])
            favoured = self.store.aspect_flags(keys, aspect)
            if options.wording_prior is WordingPrior.named and favoured.any():
                favoured &= wording_prior_rows(self.store, pq, keys, [h.passage.title for h in hits])
            value *= np.where(favoured, 1.0 + options.aspect_boost, 1.0)
        level, named = (np.asarray(column) for column in zip(*(tiers.get(h.pid, (0, False)) for h in hits)))
        if options.mention_boost and options.entity_scope is EntityScope.document:
            value *= np.where(named, 1.0 + options.mention_boost, 1.0)
        share = rerank_share(self.reranker, options.rerank_share)
        value = fuse_with_first_stage(value, share, options.fusion.rrf_k)
        order = np.lexsort((rank, -value, level))[:k]  # tier first, then the structured score, then the re-ranker
        return [ScoredPassage(pid=hits[i].pid, score=float(value[i]), rank=r + 1, passage=hits[i].passage)
                for r, i in enumerate(order)]

    def names_entity(self, passages: Sequence[Passage], forms: list[list[str]]) -> np.ndarray:
        """For each passage, whether it names the entity (one of its ``forms``) in one sentence, not to deny it,
        or its title does (capr.search.mentions)."""
        return np.fromiter((names_entity(p, forms, self.store.analyzer) for p in passages), dtype=bool,
                           count=len(passages))

    def entity_forms(self, pq: ParsedQuery, options: SearchOptions) -> list[list[str]]:
        """The analysed terms of each name the entity is written as: its own first, then (with
        ``options.entity_synonyms``) its synonyms'. Empty when the entity has no searchable term."""
        from capr.labels.synonyms import entity_synonyms

        names = [pq.entity or ""]
        if options.entity_synonyms and pq.entity:
            names += entity_synonyms().forms(pq.entity)
        forms: list[list[str]] = []
        for name in names:
            terms = list(dict.fromkeys(self.store.analyzer(name)))
            if terms and terms not in forms:
                forms.append(terms)
        return forms

    # -- first-stage retrievers (capr.search.first_stage) ---------------------------------------------
    def first_stage_retriever(self, options: SearchOptions) -> FirstStage:
        """The first stage of resolved ``options`` over this store: BM25, TF-IDF, dense or hybrid."""
        return first_stage_retriever(self.store, options.retriever, options.fusion, options.template)

    def lexical_scores(self, pq: ParsedQuery, keys: np.ndarray | None, method: Retriever = Retriever.bm25) -> np.ndarray:
        """The lexical score of each given passage (``None``: every passage; exhaustive stores only)."""
        return lexical_retriever(self.store, method).scores(pq, keys)

    # -- dense --------------------------------------------------------------------------------------
    def encode(self, queries: Sequence[ParsedQuery], template: str = DEFAULT_TEMPLATE, batch_size: int = 256,
               progress: Any = None) -> np.ndarray:
        """Query vectors, encoded in batches."""
        enc = self.store.encoder()
        texts = [q.dense_text(template) for q in queries]
        starts = range(0, len(texts), batch_size)
        return np.concatenate([enc.encode_queries(texts[i : i + batch_size]) for i in (progress or (lambda x: x))(starts)])

    # -- presentation -------------------------------------------------------------------------------
    def annotate(self, pq: ParsedQuery, hits: list[Hit], synonym_forms: Sequence[list[str]] = ()) -> None:
        """Query-term highlights (document offsets) and the best snippet window of each hit; a passage that names
        the entity by a synonym has that synonym highlighted too."""
        analyzer = self.store.analyzer
        for h in hits:
            p = h.passage
            terms = set(pq.terms)
            if synonym_forms:
                words = set(analyzer(p.text))
                terms.update(*(form for form in synonym_forms if set(form) <= words))
            h.highlights = [(a + p.start, b + p.start) for a, b in term_spans(p.text, terms, analyzer)]
            snip = snippet(p.text, terms, analyzer)
            h.snippet = (snip.start, snip.text, [(a + snip.start + p.start, b + snip.start + p.start) for a, b in snip.highlights])

    def add_evidence(self, pq: ParsedQuery, hits: list[Hit], options: SearchOptions) -> str:
        from capr.search.evidence import dense_sentence_scores, lexical_sentence_scores

        method = options.evidence
        passages = [h.passage for h in hits]
        if method is Evidence.cdv:
            scored = self.cdv.evidence(pq, passages, options.thetas)
        elif method is Evidence.dense:  # a sentence that denies the entity (by any of its names) is no evidence
            scored = dense_sentence_scores(self.store, pq, passages, options.template,
                                           self.entity_forms(pq, options)) if passages else []
        else:
            forms = self.entity_forms(pq, options)
            scored = [lexical_sentence_scores(self.store, pq, p, forms=forms) for p in passages]
        for h, s in zip(hits, scored):
            h.sentences = list(s)
        return method.value


class RowTiers:
    """The entity's tiers on an exhaustive store, as row masks: passages that name the entity (in their text or
    their document's title, by any of its forms), then the other passages of their documents, then the rest; each
    tier ranked by the searcher's first stage (``entity_scope`` document: the first two tiers are one, a passage
    that names the entity scored ×(1 + mention_boost)). A passage that holds the entity's words but names it in no
    sentence, or only to deny it ("No lymphadenopathy."), gets no bonus, and under ``entity_scope`` passage ranks
    after those that name it."""

    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher

    def rank(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any, notices: list[str],
             tiers: dict[str, tuple[int, bool]] | None, scope: Any, forms: list[list[str]]) -> list[ScoredPassage]:
        searcher, store = self.searcher, self.searcher.store
        mention = self._mention_mask(forms, scope)
        if mention is None:
            closest = searcher.first_stage(pq, k, options, flt)
            notices.append(_entity_notice(pq.entity, filtered=flt is not None, shown=bool(closest)))
            return closest
        # tiers: the passage (or its title) names the entity; another passage of its document does; the rest
        in_document = store.document_rows(mention) & ~mention
        mentioned = mention  # whether a document names the entity is read in all its passages, filtered or not
        none_named = False
        if flt is not None:
            mention = mention & flt
            in_document &= flt
            none_named = not (mention | in_document).any()
        if options.entity_scope is EntityScope.passage:
            levels = [(mention, None), (in_document, None), (flt, None)]
        else:
            levels = [(mention | in_document, mention if options.mention_boost else None), (flt, None)]
        # the tier of a document's other passages holds only documents that name the entity, not only deny it
        document_level = 1 if options.entity_scope is EntityScope.passage else 0
        verdicts: dict[str, bool] = {}
        verdict_of_row: dict[int, bool] = {}  # whether a passage names the entity, by row: each read once a search
        hits: list[ScoredPassage] = []
        for level, (tier, named) in enumerate(levels):
            if len(hits) >= k:
                break
            seen = {h.pid for h in hits}

            def ranked(tier: Any, named: np.ndarray | None) -> list[ScoredPassage]:
                return [h for h in searcher.first_stage(pq, k, options, tier, named=named, forms=forms,
                                                          names=verdict_of_row)
                        if h.pid not in seen][: k - len(hits)]

            found = ranked(tier, named)
            if level == document_level:
                found = self._naming_documents(found, tier, named, mentioned, forms, verdicts, ranked,
                                               verdict_of_row)
                if level == 0 and verdicts and not any(verdicts.values()) and not found:
                    notices.append(_denied_notice(pq.entity, filtered=flt is not None))
            demote = level == 0 and options.entity_scope is EntityScope.passage
            if not found or (tiers is None and not demote):
                hits += found  # only a second stage, or the passage scope, reads which hits name the entity
                continue
            names = mention[store.keys_of([h.pid for h in found])]
            if names.any():
                names[names] = searcher.names_entity([h.passage for h, n in zip(found, names) if n], forms)
            if demote:
                # a passage that only denies the entity, or scatters its words, ranks after those that name it
                found = [h for h, n in zip(found, names) if n] + [h for h, n in zip(found, names) if not n]
                names = np.sort(names)[::-1]
            if tiers is not None:
                tiers.update((h.pid, (level, bool(n))) for h, n in zip(found, names))
            hits += found
        if none_named:
            notices.append(_entity_notice(pq.entity, filtered=True, shown=bool(hits)))
        return hits

    def _naming_documents(self, found: list[ScoredPassage], tier: np.ndarray, named: np.ndarray | None,
                          mention: np.ndarray, forms: list[list[str]], verdicts: dict[str, bool],
                          ranked: Any, names: dict[int, bool]) -> list[ScoredPassage]:
        """``found`` (ranked from ``tier``) with the passages of documents that hold the entity's words but never
        name it (every mention denies it, "No lymphadenopathy.", or scatters its words) taken out of the tier and
        the tier ranked again; such documents rank with the rest. ``verdicts`` keeps each document read."""
        store = self.searcher.store
        for round_ in range(_DOCUMENT_ROUNDS):
            self._read_documents([h for h in found if h.passage.doc_id not in verdicts], mention, forms, verdicts, names)
            silent = [h.pid for h in found if not verdicts[h.passage.doc_id]]
            if not silent or round_ == _DOCUMENT_ROUNDS - 1:
                break
            rows = np.zeros(store.row_count(), dtype=bool)
            rows[store.keys_of(silent)] = True
            rows = store.document_rows(rows)
            tier = tier & ~rows
            named = None if named is None else named & ~rows
            found = ranked(tier, named) if tier.any() else []
        return [h for h in found if verdicts[h.passage.doc_id]]  # after the last round, the rest rank lower

    def _read_documents(self, hits: list[ScoredPassage], mention: np.ndarray, forms: list[list[str]],
                        verdicts: dict[str, bool], names: dict[int, bool]) -> None:
        """Whether each document of ``hits`` names the entity in one of its passages (rows of ``mention`` hold its
        words), into ``verdicts``. A document's own hit usually names it, and the first stage has read it (``names``);
        the other passages of a document are read one at a time, until one names it."""
        store = self.searcher.store

        def naming(rows: list[int], passages: list[Passage] | None = None) -> list[bool]:
            todo = [i for i, row in enumerate(rows) if row not in names]
            if todo:
                read = [passages[i] for i in todo] if passages is not None else \
                    store.passages(np.asarray([rows[i] for i in todo], dtype=np.int64))
                names.update(zip([rows[i] for i in todo], self.searcher.names_entity(read, forms).tolist()))
            return [names[row] for row in rows]

        keys = store.keys_of([h.pid for h in hits]).tolist() if hits else []
        held = [(h, key) for h, key in zip(hits, keys) if mention[key]]
        for (h, _), n in zip(held, naming([key for _, key in held], [h.passage for h, _ in held])):
            if n:
                verdicts[h.passage.doc_id] = True
        for h, key in zip(hits, keys):
            doc_id = h.passage.doc_id
            if doc_id in verdicts:
                continue
            one = np.zeros(store.row_count(), dtype=bool)
            one[key] = True
            verdicts[doc_id] = any(naming([row])[0] for row in np.flatnonzero(store.document_rows(one) & mention).tolist())

    def _mention_mask(self, forms: list[list[str]], flt: Any) -> np.ndarray | None:
        """Live rows passing the filter whose indexed text has every term of at least one of ``forms``; None when
        no row has."""
        store = self.searcher.store
        live = np.ones(store.row_count(), dtype=bool) if flt is None else flt  # deleted rows score 0 below
        has: dict[str, np.ndarray] = {}
        mask = np.zeros(store.row_count(), dtype=bool)
        for terms in forms:
            rows = live.copy()
            for t in terms:
                if t not in has:
                    has[t] = store.lexical_scores([t], None, Retriever.bm25) > 0
                rows &= has[t]
                if not rows.any():
                    break
            mask |= rows
        return mask if mask.any() else None


class ListTiers:
    """The entity's tiers on a store that returns top lists: each list is narrowed to the passages that name the
    entity (read from the passages themselves), then to the others; no document tier (that would need every
    passage)."""

    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher

    def rank(self, pq: ParsedQuery, k: int, options: SearchOptions, flt: Any, notices: list[str],
             tiers: dict[str, tuple[int, bool]] | None, scope: Any, forms: list[list[str]]) -> list[ScoredPassage]:
        searcher, store = self.searcher, self.searcher.store
        wanted, holds_words = [set(terms) for terms in forms], {}

        def mentions(keys: np.ndarray) -> np.ndarray:
            todo = [int(x) for x in keys if int(x) not in holds_words]
            for key, p in zip(todo, store.passages(np.asarray(todo, dtype=np.int64))):
                words = set(store.analyzer(f"{p.title} {p.text}"))
                holds_words[key] = any(form <= words for form in wanted)
            return np.asarray([holds_words[int(x)] for x in keys], dtype=bool)

        hits = searcher.first_stage(pq, k, options, flt, keep=mentions)
        # as RowTiers ranks them: a passage that only denies the entity, or scatters its words, after those that name it
        named = {h.pid for h, n in zip(hits, searcher.names_entity([h.passage for h in hits], forms)) if n}
        hits = [h for h in hits if h.pid in named] + [h for h in hits if h.pid not in named]
        about: set[str] = set()
        if not hits and options.filters:
            # the filter may drop every passage that names the entity and keep other passages of its documents
            about = {h.passage.doc_id for h in searcher.first_stage(pq, k, options, scope, keep=mentions)}
            if about:
                hits = searcher.first_stage(pq, k, options, flt, keep=lambda keys: np.asarray(
                    [p.doc_id in about for p in store.passages(keys)], dtype=bool))
        if not hits:
            closest = searcher.first_stage(pq, k, options, flt)
            notices.append(_entity_notice(pq.entity, filtered=bool(options.filters), shown=bool(closest)))
            return closest
        seen = {h.pid for h in hits}
        rest = [h for h in searcher.first_stage(pq, k, options, flt, keep=lambda keys: ~mentions(keys))
                if h.pid not in seen][: k - len(hits)] if len(hits) < k else []
        if tiers is not None:
            tiers.update([(h.pid, (0, h.pid in named)) for h in hits] + [(h.pid, (1, False)) for h in rest])
        return hits + rest


def entity_tiers(searcher: Searcher) -> RowTiers | ListTiers:
    """How this searcher's store tiers an entity's passages: row masks on an exhaustive store, else narrowed lists."""
    return (RowTiers if Capability.exhaustive in searcher.store.capabilities else ListTiers)(searcher)


def _entity_notice(entity: str | None, filtered: bool, shown: bool = True) -> str:
    """What a user is told when no result is about the entity. Under a filter it speaks of what the filter keeps
    only: whether passages it drops (another patient's notes) name the entity is not the client's to learn.
    ``shown``: whether any closest match is shown (none may match at all)."""
    if filtered:
        said = f"no passage that passes the filter mentions {entity!r}"
        return said + ("; showing the closest matches that pass it" if shown else "")
    return f"no passage mentions {entity!r}" + ("; showing the closest matches" if shown else "")


def _denied_notice(entity: str | None, filtered: bool) -> str:
    """What a user is told when every document that holds the entity's words denies it (or scatters them)."""
    where = "that passes the filter " if filtered else ""
    return (f"no passage {where}names {entity!r} other than to deny it; showing the closest matches")


_DOCUMENT_ROUNDS = 4  # rankings of the document tier, each without the documents that never name the entity


def scores_falling_with_rank(hits: Sequence[Hit | ScoredPassage]) -> None:
    """Make each score at most the one ranked above it, keeping the order. A ranking built in parts (the entity's
    tiers, each ranked on its own; the re-ranked head before the first stage's tail) can score a lower part's best
    above a higher part's last; a client that sorts by score (trec_eval reads a run file so) would then undo the
    ranking. Each such part, with all below it, is scaled down (or, at scores <= 0, shifted down) to fit under the
    hit above it: order within it, and every rank, stay as they were."""
    for i in range(1, len(hits)):
        above, here = hits[i - 1].score, hits[i].score
        if here <= above:
            continue
        if above > 0:
            factor = above / here * _BELOW
            for h in hits[i:]:
                h.score *= factor
        else:
            drop = here - above + (1 - _BELOW) * max(abs(above), abs(here))
            for h in hits[i:]:
                h.score -= drop


_BELOW = 0.999  # a part moved under the hit above it ends this much below it


def best_per_document(ranked: list[ScoredPassage], k: int) -> list[ScoredPassage]:
    """One hit per document, its best-ranked passage, in rank order: a document scores as its best passage."""
    out: list[ScoredPassage] = []
    seen: set[str] = set()
    for h in ranked:
        if h.passage.doc_id in seen:
            continue
        seen.add(h.passage.doc_id)
        out.append(ScoredPassage(pid=h.pid, score=h.score, rank=len(out) + 1, passage=h.passage))
        if len(out) >= k:
            break
    return out


def search_each(searcher: Searcher, queries: Sequence[Query], options: SearchOptions,
                progress: Callable[[Sequence[Query]], Iterable[Query]] | None = None,
                name: str = "capr") -> tuple[Run, dict[str, str]]:
    """Every query through ``searcher`` as one run: passage ids, or document ids when ``options`` groups by
    document. A question the pipeline cannot search (only stopwords) gets an empty ranking and its reason under its
    id, as `capr eval` scores it; any other refusal (a bad filter) ends the run, naming the question."""
    run = Run(name=name)
    unsearchable: dict[str, str] = {}
    ids_only = replace(options, highlights=False)
    by_doc = options.group_by is GroupBy.doc
    for q in (progress(queries) if progress is not None else queries):
        try:
            hits = searcher.search(q, ids_only).hits
        except QueryError as e:
            if e.field != "text":
                raise QueryError(f"question {q.qid!r}: {e}", e.field) from None
            unsearchable[q.qid] = str(e)
            hits = []
        run.results[q.qid] = [ScoredPassage(pid=h.passage.doc_id if by_doc else h.pid, score=h.score, rank=h.rank)
                              for h in hits]
    return run, unsearchable


def search(store: Store, query: Query | str, k: int = 10, **options: Any) -> list[Hit]:
    """One query through the default pipeline (or ``options``, the :class:`SearchOptions` fields)."""
    return Searcher(store).search(query, SearchOptions(k=k, **options)).hits


__all__ = ["DEFAULT_ASPECT_BOOST", "DEFAULT_FUSION", "EMPTY_INDEX_MESSAGE", "EntityScope", "Evidence", "GroupBy", "best_per_document", "Hit", "scores_falling_with_rank", "SearchOptions", "SearchResult", "Searcher", "WordingPrior", "search", "search_each"]
