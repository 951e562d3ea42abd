"""First-stage retrievers as objects: each has one method, ``top(pq, k, flt, keep) -> (keys, scores)``, and keeps
what its backend can do inside it (an exhaustive store scores every passage and takes the top; another store
returns top lists, which a disjunction-max over phrasings merges). A hybrid retriever composes two retrievers and
fuses their lists, as Pyserini's ``HybridSearcher`` composes a sparse and a dense searcher.

    bm25 = lexical_retriever(store)                          # Retriever.bm25 over this store's primitives
    hybrid = HybridRetriever(bm25, DenseRetriever(store), FusionConfig())
    keys, scores = hybrid.top(parsed_query, 100, store.compile_filter(filters))

``keep(keys) -> bool mask``: a condition the backend cannot filter by, applied to each retriever's list (before
fusion, so the fused ranks are those of the kept passages, as a filter would give)."""

from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from capr.index.scoring import few_rows, top_among
from capr.records import LEXICAL, Retriever

from capr.search.query import DEFAULT_TEMPLATE, ParsedQuery
from capr.search.fusion import FusionConfig, fuse
from capr.store.protocol import Capability, Ranked, Store

Keep = Callable[[np.ndarray], np.ndarray]


class FirstStage(Protocol):
    """A first-stage retriever. ``reorders``: its order is not its lists' (fusion), so a caller that re-orders the
    top (an aspect prior) asks it for a deeper list."""

    reorders: bool

    def top(self, pq: ParsedQuery, k: int, flt: Any = None, keep: Keep | None = None) -> Ranked: ...


def _kept(ranked: Ranked, keep: Keep | None) -> Ranked:
    if keep is None or not len(ranked[0]):
        return ranked
    sel = keep(ranked[0])
    return ranked[0][sel], ranked[1][sel]


WORD_COLUMNS = 1 << 24  # scores held at once (64 MB) by _dismax_by_word; a larger tier is scored phrasing by phrasing


def _dismax_by_word(store: Store, base: list[str], phrases: list[list[str]], keys: np.ndarray) -> np.ndarray | None:
    """BM25 of ``base`` plus the best of ``phrases`` at ``keys``, each distinct word looked up once: an aspect's
    phrasings share most of their words ("physical examination", "physical exam", "examination"), and at a few rows
    the lookups are the cost. BM25 adds a query's words one by one in float32, so a phrasing's sum of its words'
    columns, in its order, is its score to the bit. None when the columns would hold more than WORD_COLUMNS scores."""
    words = list(dict.fromkeys([*base, *(t for toks in phrases for t in toks)]))
    if len(words) * len(keys) > WORD_COLUMNS:
        return None
    columns = {t: store.lexical_scores([t], keys, Retriever.bm25) for t in words}

    def summed(toks: list[str]) -> np.ndarray:
        out = np.zeros(len(keys), dtype=np.float32)
        for t in toks:
            out += columns[t]
        return out

    scores = summed(base)
    best = None
    for toks in phrases:
        s = summed(toks)
        best = s if best is None else np.maximum(best, s, out=best)
    return scores if best is None else scores + best


class LexicalRetriever:
    """BM25 or TF-IDF over an exhaustive store: every passage is scored exactly (a query's phrasings as a
    disjunction-max), then the top k are taken — what a rebuild-equal index can afford."""

    reorders = False

    def __init__(self, store: Store, method: Retriever = Retriever.bm25) -> None:
        if method not in LEXICAL:
            raise ValueError(f"{method} is not a lexical retriever")
        self.store = store
        self.method = method

    def scores(self, pq: ParsedQuery, keys: np.ndarray | None = None) -> np.ndarray:
        """The lexical score of each given passage (``None``: every passage; exhaustive stores only). Within one
        search (``pq.lexical_memo``) a passage is scored once: every passage's scores are handed out read-only, and
        a tier ranked again without some documents looks its rows up instead of scoring them again (a passage's
        score does not depend on which others are asked with it)."""
        memo = pq.lexical_memo
        if memo is None:
            return self._scores(pq, keys)
        key = (id(self.store), self.method, tuple(pq.terms), repr(pq.dismax))
        every = memo.get(key)
        if keys is not None:
            return every[keys] if every is not None else self._scores_once(pq, keys, memo, (*key, "rows"))
        if every is None:
            every = memo[key] = self._scores(pq, None)
            every.setflags(write=False)
        return every

    def _scores_once(self, pq: ParsedQuery, keys: np.ndarray, memo: dict[Any, Any], key: tuple) -> np.ndarray:
        """:meth:`_scores` at ``keys``, scoring only the rows this search has not scored yet."""
        keys = np.asarray(keys, dtype=np.int64)
        ascending = len(keys) < 2 or bool((keys[1:] > keys[:-1]).all())  # as a tier's rows come
        held = memo.get(key)
        if held is None:
            scores = self._scores(pq, keys)
            if ascending:
                scores.setflags(write=False)
                memo[key] = (keys.copy(), scores)
                return scores
            held = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=scores.dtype))
        held_keys, held_scores = held
        wanted = keys if ascending else np.unique(keys)
        at = np.searchsorted(held_keys, wanted)
        known = at < len(held_keys)
        known[known] = held_keys[at[known]] == wanted[known]
        if not known.all():
            missing = wanted[~known]
            held_keys = np.concatenate([held_keys, missing])
            held_scores = np.concatenate([held_scores, self._scores(pq, missing)])
            order = np.argsort(held_keys, kind="stable")
            held_keys, held_scores = held_keys[order], held_scores[order]
            held_scores.setflags(write=False)
            memo[key] = (held_keys, held_scores)
        return held_scores[np.searchsorted(held_keys, keys)]

    def _scores(self, pq: ParsedQuery, keys: np.ndarray | None) -> np.ndarray:
        store, method = self.store, self.method
        if pq.dismax is None:
            return store.lexical_scores(pq.terms, keys, method)
        base, phrases = pq.dismax
        if Retriever(method) is Retriever.bm25:
            if keys is not None:
                fast = _dismax_by_word(store, base, phrases, keys)
            else:
                dismax = getattr(store, "lexical_dismax", None)  # an embedded store with the compiled loop
                fast = dismax(base, phrases) if dismax is not None else None
            if fast is not None:
                return fast
        n = store.row_count() if keys is None else len(keys)
        scores = store.lexical_scores(base, keys, method) if base else np.zeros(n, dtype=np.float32)
        # in place into the one array made here (not into a store's): an array per step of ten million rows costs
        # more in page faults than its arithmetic
        best, owned = None, False
        for toks in phrases:
            s = store.lexical_scores(toks, keys, method)
            if best is None:
                best = s
            elif owned:
                np.maximum(best, s, out=best)
            else:
                best, owned = np.maximum(best, s), True
        if best is None:
            return scores
        return np.add(scores, best, out=best) if owned else scores + best

    def top(self, pq: ParsedQuery, k: int, flt: Any = None, keep: Keep | None = None) -> Ranked:
        if pq.dismax is None:
            return _kept(self.store.lexical_top(pq.terms, k, flt, self.method), keep)
        keys = few_rows(flt) if flt is not None else None
        if keys is not None:  # a filter or tier that keeps few rows: only those are scored
            return _kept(top_among(keys, self.scores(pq, keys), k), keep)
        return _kept(self.store.top(self.scores(pq, None), k, flt), keep)


class ListedLexicalRetriever(LexicalRetriever):
    """BM25 over a store that returns top lists: the disjunction-max over each phrasing's top k, exact for every
    passage those lists hold."""

    def top(self, pq: ParsedQuery, k: int, flt: Any = None, keep: Keep | None = None) -> Ranked:
        store, method = self.store, self.method
        if pq.dismax is None:
            return _kept(store.lexical_top(pq.terms, k, flt, method), keep)
        base, phrases = pq.dismax
        found: dict[int, float] = {}
        if base:
            bk, bv = store.lexical_top(base, k, flt, method)
            found = dict(zip(bk.tolist(), bv.tolist()))
        best: dict[int, float] = {}
        for toks in phrases:
            pk, pv = store.lexical_top(toks, k, flt, method)
            for key, v in zip(pk.tolist(), pv.tolist()):
                best[key] = max(best.get(key, 0.0), v)
        keys = np.asarray(sorted(set(found) | set(best)), dtype=np.int64)
        vals = np.asarray([found.get(int(c), 0.0) + best.get(int(c), 0.0) for c in keys], dtype=np.float64)
        vals = vals.astype(np.float32)
        order = np.lexsort((keys, -vals))[:k]
        return _kept((keys[order], vals[order]), keep)


def lexical_retriever(store: Store, method: Retriever = Retriever.bm25) -> LexicalRetriever:
    """The lexical retriever this store supports: exact scores of every passage, or merged top lists."""
    exhaustive = Capability.exhaustive in store.capabilities
    return (LexicalRetriever if exhaustive else ListedLexicalRetriever)(store, method)


class DenseRetriever:
    """Nearest passages to the query's vector (encoded with ``template``) among those passing the filter."""

    reorders = False

    def __init__(self, store: Store, template: str = DEFAULT_TEMPLATE) -> None:
        self.store = store
        self.template = template

    def encode(self, pq: ParsedQuery) -> np.ndarray:
        return self.store.encoder().encode_queries([pq.dense_text(self.template)])[0]

    def top(self, pq: ParsedQuery, k: int, flt: Any = None, keep: Keep | None = None) -> Ranked:
        return _kept(self.store.dense_top(self.encode(pq), k, flt), keep)


class HybridRetriever:
    """Two retrievers' lists fused (capr.search.fusion): each list is read ``fusion.depth`` deep, or k when
    deeper. With ``keep``, each kept list is cut to the fusion's depth, as a list of only those passages would be."""

    reorders = True

    def __init__(self, first: FirstStage, second: FirstStage, fusion: FusionConfig) -> None:
        self.first = first
        self.second = second
        self.fusion = fusion

    def top(self, pq: ParsedQuery, k: int, flt: Any = None, keep: Keep | None = None) -> Ranked:
        cfg = self.fusion
        a = self.first.top(pq, max(cfg.depth, k), flt, keep)
        b = self.second.top(pq, max(cfg.depth, k), flt, keep)
        if keep is None:
            return fuse([a, b], cfg)
        return fuse([(a[0][: cfg.depth], a[1][: cfg.depth]), (b[0][: cfg.depth], b[1][: cfg.depth])], cfg)


def first_stage_retriever(store: Store, retriever: Retriever, fusion: FusionConfig | None = None,
                          template: str = DEFAULT_TEMPLATE) -> FirstStage:
    """The first stage ``retriever`` names, over ``store``: BM25 and TF-IDF, dense, or hybrid (BM25 and dense,
    fused by ``fusion``)."""
    if retriever in LEXICAL:
        return lexical_retriever(store, retriever)
    if retriever is Retriever.dense:
        return DenseRetriever(store, template)
    return HybridRetriever(lexical_retriever(store), DenseRetriever(store, template), fusion or FusionConfig())


__all__ = ["DenseRetriever", "FirstStage", "HybridRetriever", "LexicalRetriever", "ListedLexicalRetriever",
           "first_stage_retriever", "lexical_retriever"]
