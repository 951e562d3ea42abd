"""The priors a search puts on a ranking: the aspect prior (a passage from the section of the aspect asked about
scores ×(1 + aspect_boost)), the wording prior (an aspect read from a question's wording favours its sections only in
documents whose title the question names) and, within an entity's first tier, the bonus of a passage that names the
entity (×(1 + mention_boost)). They apply to the first stage's scores and to a second stage's ranking alike."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from capr.records import Passage, ScoredPassage
from capr.search.config import EntityScope, SearchOptions, WordingPrior
from capr.search.first_stage import FirstStage
from capr.search.mentions import naming_flags
from capr.search.query import ParsedQuery
from capr.search.question_focus import wording_prior_rows
from capr.store.protocol import Store
from capr.text.aspects import GENERIC_ASPECT_MIN_DOCUMENT_SHARE, GENERIC_ASPECTS, nearest_aspect

PRIOR_DEPTH = 100  # candidates a first stage returns when an aspect prior or fusion re-orders them


class AspectPrior:
    """The section aspect of a store the aspect prior favours for a query's aspect, read once per aspect."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._found: dict[tuple[str, bool], str | None] = {}

    def aspect(self, aspect: str | None, inferred: bool = False) -> str | None:
        """The section aspect favoured for a query asking about ``aspect``: itself when the store has it, else the
        store's aspect it reads as (:func:`capr.text.aspects.nearest_aspect`; "genetic inheritance" → inheritance),
        else None (no prior). ``inferred``: the aspect was read from a question's wording; a generic one ("what is
        X?" → information) counts only where most documents of the corpus have such a section
        (:data:`capr.text.aspects.GENERIC_ASPECTS`)."""
        if not aspect:
            return None
        key = (aspect, inferred and aspect in GENERIC_ASPECTS)
        if key not in self._found:
            store = self.store
            found = aspect if store.has_aspect(aspect) else nearest_aspect(aspect, store.aspect_counts(), store.analyzer)
            if found and key[1]:
                passages = store.aspect_counts().get(found) or 0  # None: a backend that cannot count them
                documents = int(store.stats().get("documents", 0))
                found = found if documents and passages >= GENERIC_ASPECT_MIN_DOCUMENT_SHARE * documents else None
            self._found[key] = found
        return self._found[key]

    def of_query(self, pq: ParsedQuery) -> str | None:
        """:meth:`aspect` of a parsed query: its aspect is inferred when the query gave none."""
        return self.aspect(pq.aspect, inferred=not pq.query.aspect)


def favoured_rows(store: Store, pq: ParsedQuery, keys: np.ndarray, aspect: str, wording_prior: WordingPrior,
                  titles: Sequence[str] | None = None) -> np.ndarray:
    """Which of the candidates ``keys`` the aspect prior favours: those of ``aspect``'s sections, narrowed by the
    wording prior (``titles``: the candidates' titles when the caller has the passages already)."""
    favoured = store.aspect_flags(keys, aspect)
    if wording_prior is WordingPrior.named and favoured.any():
        favoured &= wording_prior_rows(store, pq, keys, titles)
    return favoured


def aspect_notices(pq: ParsedQuery, aspect: str | None, options: SearchOptions) -> tuple[list[str], str | None]:
    """What a user is told of the aspect prior: the notices to say now, and one to say only once a hit shows that
    the prior favoured a section (an aspect read from the question's wording favours only the sections of documents
    whose title the question names; a question that names no title has no prior at all)."""
    if aspect and aspect != pq.aspect:
        notice = f"no section of this index is about {pq.aspect!r}; sections about {aspect!r} are favoured"
        if pq.query.aspect or options.wording_prior is WordingPrior.everywhere:
            return [notice], None
        return [], notice
    if options.aspect_boost and pq.query.aspect and not aspect:
        # an asked aspect that no section has (or an index without headings): say so, or every hit looks like an
        # answer from that section
        return [f"no section of this index is about {pq.aspect!r}; no section is favoured, its words are searched"], None
    return [], None


def prior_shown(store: Store, pq: ParsedQuery, hits: Sequence[ScoredPassage], aspect: str) -> bool:
    """Whether the wording prior favoured one of ``hits`` (a section of ``aspect`` in a document the question names)."""
    keys = store.keys_of([h.pid for h in hits])
    favoured = store.aspect_flags(keys, aspect)
    return bool((favoured & wording_prior_rows(store, pq, keys, [h.passage.title for h in hits])).any())


def ranked_with_priors(store: Store, retriever: FirstStage, pq: ParsedQuery, k: int, options: SearchOptions,
                       aspect: str | None, flt: Any = None, keep: Any = None, named: np.ndarray | None = None,
                       forms: list[list[str]] | None = None,
                       names: dict[int, bool] | None = None) -> list[ScoredPassage]:
    """Top-k passages of ``retriever``, with the aspect prior: the score of a passage from a section of ``aspect``
    (the one asked about, explicit or inferred from the question) is multiplied by 1 + boost. ``keep(keys) -> bool
    mask``: a condition the backend cannot filter by, applied to each retriever's list before fusion (so the fused
    ranks are those of the kept passages, as a filter would give). ``named``: rows that name the query's entity,
    scored ×(1 + mention_boost); with the entity's ``forms``, only those whose title or one sentence names it, not
    to deny it ("No lymphadenopathy."); ``names`` keeps what each passage read so says, by row, for the next ranking
    of the same query."""
    if not store.live_count():
        return []  # every document deleted
    boost = options.aspect_boost if aspect else 0.0
    deep = boost or retriever.reorders or keep is not None or named is not None
    keys, vals = retriever.top(pq, max(k, PRIOR_DEPTH) if deep else k, flt, keep)
    read: dict[int, Passage] = {}  # passages already read, by key
    if boost and len(keys):
        favoured = favoured_rows(store, pq, keys, aspect, options.wording_prior)
        vals = vals * np.where(favoured, 1.0 + boost, 1.0).astype(np.float32)
    if named is not None and len(keys):
        vals = _mention_boosted(store, keys, vals, k, options.mention_boost, named[keys], forms, names, read)
    order = np.lexsort((keys, -vals))[:k]  # ties: insertion order
    unread = [key for key in keys[order].tolist() if key not in read]
    read.update(zip(unread, store.passages(np.asarray(unread, dtype=keys.dtype))) if unread else ())
    passages = [read[key] for key in keys[order].tolist()]
    return [ScoredPassage(pid=p.pid, score=float(v), rank=i + 1, passage=p)
            for i, (p, v) in enumerate(zip(passages, vals[order]))]


def _mention_boosted(store: Store, keys: np.ndarray, unboosted: np.ndarray, k: int, mention_boost: float,
                     naming: np.ndarray, forms: list[list[str]] | None, names: dict[int, bool] | None,
                     read: dict[int, Passage]) -> np.ndarray:
    """``unboosted`` with the naming rows' bonus. With ``forms``, only the naming passages that reach the top k are
    read: one that only denies the entity (or scatters its words over sentences) loses its bonus, and those it lets
    in are read in turn (``read`` receives the passages read)."""

    def boosted() -> np.ndarray:
        return unboosted * np.where(naming, 1.0 + mention_boost, 1.0).astype(np.float32)

    checked = np.zeros(len(keys), dtype=bool)
    while forms:
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
            known.update(zip(keys[unknown].tolist(), naming_flags(passages, forms, store.analyzer).tolist()))
        naming[todo] = [known[int(key)] for key in keys[todo].tolist()]
    return boosted()


def reranked_with_priors(store: Store, reranker: Any, pq: ParsedQuery, hits: list[ScoredPassage],
                         options: SearchOptions, tiers: dict[str, tuple[int, bool]], aspect: str | None,
                         k: int) -> list[ScoredPassage]:
    """The re-ranker orders the first stage's hits *within the pipeline's structure*: the entity's tiers keep their
    order (a re-ranker cannot put the asked section of another disease above the entity's own passages), and the
    aspect prior and the entity-mention bonus apply to the re-ranker's ranking as they apply to the first stage's
    (reciprocal rank × (1 + boost)); ``options.rerank_share`` fuses that with the first stage's rank (which has them
    already)."""
    from capr.index.segment import passage_index_text
    from capr.search.second_stage import fuse_with_first_stage, rerank_share, score_passages

    if not hits:
        return []
    titles = store.includes_titles()
    scores = score_passages(reranker, pq.dense_text("plain"), [h.passage for h in hits],
                            [passage_index_text(h.passage, titles) for h in hits])
    rank = np.empty(len(hits), dtype=np.int64)
    rank[np.argsort(-scores, kind="stable")] = np.arange(1, len(hits) + 1)
    value = 1.0 / (options.fusion.rrf_k + rank)
    if aspect:
        keys = store.keys_of([h.pid for h in hits])
        favoured = favoured_rows(store, pq, keys, aspect, options.wording_prior, [h.passage.title for h in hits])
        value *= np.where(favoured, 1.0 + options.aspect_boost, 1.0)
    level, named = (np.asarray(column) for column in zip(*(tiers.get(h.pid, (0, False)) for h in hits)))
    if options.mention_boost and options.entity_scope is EntityScope.document:
        value *= np.where(named, 1.0 + options.mention_boost, 1.0)
    share = rerank_share(reranker, options.rerank_share)
    value = fuse_with_first_stage(value, share, options.fusion.rrf_k)
    order = np.lexsort((rank, -value, level))[:k]  # tier first, then the structured score, then the re-ranker
    return [ScoredPassage(pid=hits[i].pid, score=float(value[i]), rank=r + 1, passage=hits[i].passage)
            for r, i in enumerate(order)]


__all__ = ["AspectPrior", "PRIOR_DEPTH", "aspect_notices", "favoured_rows", "prior_shown", "ranked_with_priors",
           "reranked_with_priors"]
