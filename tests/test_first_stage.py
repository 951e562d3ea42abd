"""First-stage retrievers as objects (capr.search.first_stage): one ``top`` method each; the top-list lexical
retriever (what a Milvus store runs) is exact for the passages its lists hold; a hybrid composes any two
retrievers, and ``keep`` narrows each list before fusion."""

from __future__ import annotations

import numpy as np
import pytest

from capr import build_index
from capr.corpus import read_documents
from capr.records import Retriever
from capr.records import Query
from capr.search.first_stage import (HybridRetriever, LexicalRetriever, ListedLexicalRetriever, first_stage_retriever,
                                       lexical_retriever)
from capr.search.fusion import FusionConfig, fuse
from capr.search import SearchOptions, Searcher
from capr.store import as_store


@pytest.fixture(scope="module")
def store(tmp_path_factory, demo_dir):
    return as_store(build_index(read_documents(demo_dir), tmp_path_factory.mktemp("first-stage") / "idx"))


QUERIES = [Query("q1", entity="IgA nephropathy", aspect="symptoms"), Query("q2", text="how is atrial fibrillation treated")]


def test_the_top_list_retriever_is_exact_for_the_passages_it_lists(store):
    searcher = Searcher(store)
    exhaustive, listed = lexical_retriever(store), ListedLexicalRetriever(store)
    assert type(exhaustive) is LexicalRetriever  # an embedded store scores every passage
    for q in QUERIES:
        for expand in (False, True):
            pq = searcher.parse(q, expand=expand)
            keys, vals = listed.top(pq, 10)
            every = exhaustive.scores(pq)
            assert len(keys) == 10 and np.allclose(vals, every[keys], atol=1e-5), (q.qid, expand)
            if pq.dismax is None:  # one list: the same top as scoring every passage
                assert sorted(exhaustive.top(pq, 10)[0].tolist()) == sorted(keys.tolist())


def test_a_hybrid_composes_any_two_retrievers_and_keeps_before_fusing(store):
    pq = Searcher(store).parse(QUERIES[1])
    bm25, tfidf = LexicalRetriever(store, Retriever.bm25), LexicalRetriever(store, Retriever.tfidf)
    cfg = FusionConfig(depth=30)
    hybrid = HybridRetriever(bm25, tfidf, cfg)
    keys, vals = hybrid.top(pq, 10)
    want = fuse([bm25.top(pq, 30), tfidf.top(pq, 30)], cfg)
    assert keys.tolist() == want[0].tolist() and np.allclose(vals, want[1])
    even = lambda ks: ks % 2 == 0  # noqa: E731
    kept = hybrid.top(pq, 10, keep=even)
    assert len(kept[0]) and (kept[0] % 2 == 0).all()
    lists = [r.top(pq, 30, keep=even) for r in (bm25, tfidf)]
    assert kept[0].tolist() == fuse([(k[:30], v[:30]) for k, v in lists], cfg)[0].tolist()


def test_the_searchers_first_stage_is_the_retrievers_top(store):
    searcher = Searcher(store)
    for retriever in (Retriever.bm25, Retriever.tfidf):
        options = searcher.resolve(SearchOptions(k=5, retriever=retriever, aspect_boost=0.0))
        pq = searcher.parse(QUERIES[1])
        hits = searcher.first_stage(pq, 5, options)
        keys, vals = first_stage_retriever(store, retriever).top(pq, 5)  # the top k, in key order
        best = keys[np.lexsort((keys, -vals))]
        assert [h.pid for h in hits] == [p.pid for p in store.passages(best)]


def test_phrasings_combine_as_base_plus_their_max_without_touching_the_stores_arrays(store):
    """An aspect's phrasings (disjunction-max, combined in place into an array of the retriever's own): the same bits
    as base + max over the phrasings, and the store's own score arrays left as the store returned them."""
    searcher = Searcher(store)
    for q in (QUERIES[0], Query("q3", entity="cardiomyopathy", aspect="family history")):
        pq = searcher.parse(q, expand=True)
        base, phrases = pq.dismax
        assert len(phrases) >= 3, phrases  # the in-place path runs
        parts = [store.lexical_scores(p, None, Retriever.bm25) for p in phrases]
        before = [p.copy() for p in parts]
        want = store.lexical_scores(base, None, Retriever.bm25) + np.maximum.reduce(parts)
        got = LexicalRetriever(store).scores(pq)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert all(np.array_equal(p, b) for p, b in zip(parts, before))


def test_phrasings_at_a_few_rows_are_scored_word_by_word_to_the_bit(store):
    """At a tier's few rows each distinct word of the phrasings is looked up once and a phrasing's score summed
    from its words: the same bits as scoring each phrasing at those rows, and as every row's scores there."""
    searcher = Searcher(store)
    rng = np.random.default_rng(0)
    every = np.arange(store.row_count())
    for q in (QUERIES[0], Query("q3", entity="cardiomyopathy", aspect="family history")):
        pq = searcher.parse(q, expand=True)
        base, phrases = pq.dismax
        assert len(phrases) >= 3 and any(set(a) & set(b) for a in phrases for b in phrases if a is not b), phrases
        whole = LexicalRetriever(store).scores(pq)
        matched = np.flatnonzero(whole)
        for keys in (np.concatenate([rng.choice(every, 40, replace=False), matched[:5]]),  # unsorted
                     np.sort(rng.choice(every, 200, replace=False)), np.repeat(matched[::-1][:5], 2)):
            parts = [store.lexical_scores(p, keys, Retriever.bm25) for p in phrases]
            want = store.lexical_scores(base, keys, Retriever.bm25) + np.maximum.reduce(parts)
            got = LexicalRetriever(store).scores(pq, keys)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
            assert np.array_equal(got.view(np.uint32), whole[keys].view(np.uint32))
            assert (got > 0).any()
        asked: list[list[str]] = []
        real = store.lexical_scores
        store.lexical_scores = lambda terms, keys=None, method=Retriever.bm25: asked.append(list(terms)) or real(terms, keys, method)
        try:
            LexicalRetriever(store).scores(pq, every[:50])
        finally:
            del store.lexical_scores
        words = {t for toks in [base, *phrases] for t in toks}
        assert sorted(map(tuple, asked)) == sorted((t,) for t in words)  # one lookup per distinct word
        import capr.search.first_stage as first_stage  # past its memory bound: phrasing by phrasing, the same bits

        bound, first_stage.WORD_COLUMNS = first_stage.WORD_COLUMNS, len(words) * 50 - 1
        asked.clear()
        store.lexical_scores = lambda terms, keys=None, method=Retriever.bm25: asked.append(list(terms)) or real(terms, keys, method)
        try:
            assert np.array_equal(LexicalRetriever(store).scores(pq, every[:50]).view(np.uint32),
                                  whole[:50].view(np.uint32))
        finally:
            first_stage.WORD_COLUMNS = bound
            del store.lexical_scores
        assert sorted(map(tuple, asked)) == sorted(map(tuple, [base, *phrases] if base else phrases))


def test_a_search_scores_every_passage_once_per_phrasing_and_keeps_nothing_after(store, monkeypatch):
    """⟨entity, aspect⟩ tiers ask for every passage's lexical scores more than once in one search: each is computed
    once (a memo on the parsed query, read-only) and the memo ends with the search; the hits are those without it."""
    searcher = Searcher(store)
    queries = [Query("q1", entity="IgA nephropathy", aspect="symptoms"), Query("q4", entity="appendicitis", aspect="diagnosis"),
               Query("q5", entity="stroke", aspect="treatment")]
    plain = {}
    with monkeypatch.context() as m:
        m.setattr(LexicalRetriever, "scores", lambda self, pq, keys=None: self._scores(pq, keys))
        for q in queries:
            plain[q.qid] = [(h.pid, h.score) for h in searcher.search(q, SearchOptions(k=50)).hits]
    asked: list[tuple] = []
    original = LexicalRetriever._scores

    def counting(self, pq, keys):
        if keys is None:
            asked.append((tuple(pq.terms), repr(pq.dismax), self.method))
        return original(self, pq, keys)

    monkeypatch.setattr(LexicalRetriever, "_scores", counting)
    repeated = total = 0
    for q in queries:
        pq = searcher.parse(q)
        asked.clear()
        got = [(h.pid, h.score) for h in searcher.search(pq, SearchOptions(k=50)).hits]
        assert got == plain[q.qid] and got
        repeated += len(asked) - len(set(asked))
        total += len(asked)
        assert pq.lexical_memo is None
    assert total >= 2 and repeated == 0  # without the memo, q4's and q5's are each asked twice


def test_within_a_search_a_row_is_scored_once_however_its_tiers_are_cut(store, monkeypatch):
    """A tier ranked again without some documents asks for a subset of its rows: within one search they are looked
    up, and only rows not scored yet are scored; the bits are those of scoring the rows afresh (unsorted and
    repeated keys too). Once every row is scored, any rows are cut from it."""
    searcher = Searcher(store)
    retriever = LexicalRetriever(store)
    asked: list[np.ndarray] = []
    original = LexicalRetriever._scores

    def counting(self, pq, keys):
        asked.append(None if keys is None else np.asarray(keys).copy())
        return original(self, pq, keys)

    rng = np.random.default_rng(1)
    n = store.row_count()
    for q in (QUERIES[0], Query("q3", entity="cardiomyopathy", aspect="family history"), QUERIES[1]):
        pq = searcher.parse(q, expand=True)
        tier = np.sort(rng.choice(n, n // 2, replace=False))
        cut = tier[rng.random(len(tier)) < 0.6]
        wider = np.concatenate([cut[::-1], rng.choice(n, 30), cut[:5]])  # unsorted, repeated, partly new
        fresh = {name: original(retriever, pq, keys) for name, keys in (("tier", tier), ("cut", cut), ("wider", wider))}
        monkeypatch.setattr(LexicalRetriever, "_scores", counting)
        pq.lexical_memo = {}
        try:
            for name, keys in (("tier", tier), ("cut", cut), ("wider", wider)):
                asked.clear()
                got = retriever.scores(pq, keys)
                assert np.array_equal(got.view(np.uint32), fresh[name].view(np.uint32)), (q.qid, name)
                if name == "tier":
                    assert len(asked) == 1 and np.array_equal(asked[0], tier)
                elif name == "cut":
                    assert asked == []  # every row was scored with the tier
                else:
                    assert len(asked) == 1 and set(asked[0].tolist()) == set(wider.tolist()) - set(tier.tolist())
            every = retriever.scores(pq)
            asked.clear()
            assert np.array_equal(retriever.scores(pq, wider).view(np.uint32), every[wider].view(np.uint32))
            assert asked == []
        finally:
            pq.lexical_memo = None
            monkeypatch.setattr(LexicalRetriever, "_scores", original)
        assert (fresh["tier"] > 0).any()


def test_with_the_compiled_loop_phrasings_over_every_row_give_the_same_bits(store):
    """A long-lived process (the service) scores an aspect's phrasings over every row by the rows they reach
    (capr.index.compiled): the same bits as base + the best phrasing, through the retriever the searcher uses."""
    pytest.importorskip("numba", reason="numba is not installed")
    from capr.index import compiled

    searcher = Searcher(store)
    assert compiled.enable()
    try:
        for q in (QUERIES[0], Query("q3", entity="cardiomyopathy", aspect="family history")):
            pq = searcher.parse(q, expand=True)
            base, phrases = pq.dismax
            want = store.lexical_scores(base, None, Retriever.bm25) + np.maximum.reduce(
                [store.lexical_scores(p, None, Retriever.bm25) for p in phrases])
            assert np.array_equal(store.lexical_dismax(base, phrases).view(np.uint32), want.view(np.uint32))
            assert np.array_equal(LexicalRetriever(store).scores(pq).view(np.uint32), want.view(np.uint32))
    finally:
        compiled.disable()
    assert store.lexical_dismax(base, phrases) is None
