"""BM25's top k as the index serves it (SegmentedBM25.top: a filter's few rows scored alone, recent tops kept, the
k-th best bounded from a sample) gives exactly what scoring every row and selecting gives: the same rows, the same
float32 scores, the same ties — over several segments, with deleted rows, filters, repeated and common words."""

from __future__ import annotations

import random

import numpy as np
import pytest

from capr import build_index, load_index
from capr.index import IndexWriter
from capr.index.scoring import top_rows
from capr.records import Document

# a Zipf-like vocabulary: a few words in most passages, many rare ones; passages long enough to differ in length
_WORDS = [f"w{i}" for i in range(400)]
_WEIGHTS = [1.0 / (i + 1) ** 1.1 for i in range(len(_WORDS))]


def _doc(rng: random.Random, i: int) -> Document:
    sections = []
    for s in range(rng.randint(1, 4)):
        words = rng.choices(_WORDS, _WEIGHTS, k=rng.randint(3, 60))
        sections.append(f"SECTION {s}:\n" + " ".join(words) + ".")
    return Document(f"d{i}", f"title {rng.choice(_WORDS)}", "\n\n".join(sections),
                    {"patient_id": f"p{i % 7}"})


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    rng = random.Random(7)
    root = tmp_path_factory.mktemp("pruned") / "idx"
    build_index([_doc(rng, i) for i in range(300)], root, segment_passages=150)
    with IndexWriter(root, mode="update") as w:
        for i in range(300, 420):
            w.add(_doc(rng, i))
    with IndexWriter(root, mode="update") as w:
        for i in range(0, 420, 9):
            w.delete(f"d{i}")
    idx = load_index(root)
    assert len(idx.segments) > 1 and not idx.live.all()
    return idx


def _queries(idx, rng: random.Random) -> list[list[str]]:
    out = [["w0"], ["w0", "w1", "w2"], ["w0", "w0", "w3"], ["nothing"], ["w399", "nothing"]]
    for _ in range(120):
        n = rng.randint(1, 25)
        words = rng.choices(_WORDS, _WEIGHTS, k=n) if rng.random() < 0.5 else rng.sample(_WORDS, k=min(n, 40))
        out.append(idx.analyzer(" ".join(words)))
    return out


def test_lexical_top_equals_scoring_every_row(index):
    rng = random.Random(3)
    bm25 = index.bm25()
    patient = np.asarray([index.passage(r).metadata.get("patient_id") == "p3" if index.live[r] else False
                          for r in range(len(index))])
    allowed = {"live": index.live.copy(), "patient": patient, "half": index.live & (np.arange(len(index)) % 2 == 0)}
    compared = 0
    for tokens in _queries(index, rng):
        scores = bm25.scores(tokens)
        for k in (1, 5, 10, 50, 100, 1000):
            for name, mask in allowed.items():
                want = top_rows(scores, k, mask)
                got = bm25.top(tokens, k, mask)
                assert np.array_equal(want[0], got[0]), (tokens, k, name)
                assert np.array_equal(want[1], got[1]) and got[1].dtype == np.float32, (tokens, k, name)
                compared += 1
    assert compared > 2000


def test_kept_tops_cut_to_a_shallower_k_equal_a_fresh_selection(index):
    bm25 = index.bm25()
    tokens = index.analyzer("w0 w1 w5 w9 w17 w33")
    scores = bm25.scores(tokens)
    deep = bm25.top(tokens, 200, index.live)  # kept
    assert np.array_equal(deep[0], top_rows(scores, 200, index.live)[0])
    for k in (1, 3, 10, 77, 200):
        want = top_rows(scores, k, index.live)
        got = index.lexical_top(tokens, k)
        assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1]), k


def test_scores_at_given_rows_equal_every_rows_scores(index):
    rng = np.random.default_rng(0)
    bm25 = index.bm25()
    for tokens in _queries(index, random.Random(5))[:40]:
        keys = rng.integers(0, len(index), 300)  # unsorted, repeated, deleted rows included
        assert np.array_equal(index.lexical_scores(tokens, keys), bm25.scores(tokens)[keys]), tokens


def test_a_cold_scorer_scores_a_few_rows_with_only_their_length_norms(index):
    """A process's first search at a tier's rows computes the length norms of those rows alone, not of every row of
    their segments, and gives the bits every row's scores give."""
    from capr.index.scoring import SegmentedBM25

    rng = np.random.default_rng(3)
    warm = index.bm25()
    for tokens in _queries(index, random.Random(6))[:20]:
        cold = SegmentedBM25(index)
        keys = np.unique(rng.integers(0, len(index), 50))
        got = cold.scores_at(tokens, keys)
        assert all(n is None for n in cold._norms)
        assert np.array_equal(got.view(np.uint32), warm.scores(tokens)[keys].view(np.uint32)), tokens
        assert np.array_equal(got.view(np.uint32), warm.scores_at(tokens, keys).view(np.uint32))


def test_term_rows_and_document_keys_equal_their_masks(index):
    for term in ("w0", "w7", "w250", "nothing"):
        rows = index.term_rows(term)
        assert np.array_equal(rows, np.flatnonzero(index.bm25().scores([term]) > 0)), term
    rng = np.random.default_rng(1)
    for n in (1, 5, 60):
        keys = rng.integers(0, len(index), n)
        mask = np.zeros(len(index), dtype=bool)
        mask[keys] = True
        assert np.array_equal(index.document_keys(keys), np.flatnonzero(index.document_rows(mask)))
        docs = {index.passage(int(r)).doc_id for r in keys if index.live[r]}
        assert {index.passage(int(r)).doc_id for r in index.document_keys(keys)} == docs


def _reference_top(scores: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero((scores > 0) & allowed)
    best = np.sort(rows[np.lexsort((rows, -scores[rows]))][:k])
    return best, scores[best]


@pytest.mark.parametrize("share", [1.0, 0.3, 0.001, 0.0])
def test_top_rows_of_a_long_array_equals_a_plain_selection(share):
    """Over 300,000 rows the k-th best is first bounded from a sample; ties, zeros and filters as a plain sort."""
    rng = np.random.default_rng(11)
    n = 300_000
    scores = np.where(rng.random(n) < share, rng.integers(1, 50, n) / 7.0, 0.0).astype(np.float32)
    for allowed in (np.ones(n, dtype=bool), rng.random(n) < 0.5, rng.random(n) < 0.0005):
        for k in (1, 10, 100, 5000):
            want = _reference_top(scores, k, allowed)
            got = top_rows(scores, k, allowed)
            assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1]), (share, k)


def test_finding_a_few_rows_in_long_posting_lists_equals_decoding_them(tmp_path):
    """Postings.find decodes only the blocks that may hold the asked rows: the same answer as the whole list, for
    lists of every gap width, keys before, inside, between and after the postings."""
    from capr.index.lexical import TermMatrix
    from capr.index.postings import SKIP, Postings, write_postings

    rng = np.random.default_rng(4)
    n_rows = 3_000_000
    lists = [np.sort(rng.choice(n_rows, size, replace=False)) for size in (1, 5, SKIP, SKIP + 1, 20_000, 400_000)]
    lists.append(np.arange(0, n_rows, 70_001))  # 4-byte gaps
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in lists])])
    matrix = TermMatrix({f"t{i}": i for i in range(len(lists))}, indptr, np.concatenate(lists).astype(np.int32),
                        np.ones(int(indptr[-1]), dtype=np.float32), np.ones(n_rows, dtype=np.float32))
    write_postings(tmp_path, matrix)
    postings = Postings(tmp_path)
    for j, rows in enumerate(lists):
        for n_keys in (1, 3, 40, 300):
            keys = np.unique(np.concatenate([rng.choice(rows, min(n_keys, len(rows))), rng.integers(0, n_rows, n_keys),
                                             [0, n_rows - 1]]))
            hit, pos = postings.find(j, keys)
            want = np.isin(keys, rows)
            assert np.array_equal(hit, want), (j, n_keys)
            assert np.array_equal(rows[pos[hit]], keys[hit]), (j, n_keys)
