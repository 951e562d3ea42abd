"""The compiled BM25 loop (capr.index.compiled, numba) gives numpy's scores to the bit: on stored postings of every
gap width and frequency type, and through an index of several segments with deleted rows."""

from __future__ import annotations

import random

import numpy as np
import pytest

from capr import build_index, load_index
from capr.index import IndexWriter, compiled
from capr.index.lexical import TermMatrix
from capr.index.postings import Postings, write_postings
from capr.records import Document
from capr.text import bm25
from capr.text.bm25 import BM25Params

pytest.importorskip("numba", reason="numba is not installed")


@pytest.fixture
def compiled_loop():
    assert compiled.enable()
    yield compiled.accumulator()
    compiled.disable()


def _matrix(rng: np.random.Generator, n_rows: int, tf_max: int) -> TermMatrix:
    """Terms whose largest gap needs 1, 2 and 4 bytes, one with a single posting, one with none."""
    lists = [np.arange(0, n_rows, 3), np.sort(rng.choice(n_rows, 2_000, replace=False)),
             np.asarray([5, 70_000, n_rows - 1]), np.asarray([n_rows // 2]), np.zeros(0, dtype=np.int64)]
    indptr = np.cumsum([0] + [len(r) for r in lists])
    rows = np.concatenate(lists).astype(np.int64)
    tf = rng.integers(1, tf_max + 1, size=len(rows)).astype(np.float32)
    doc_len = rng.integers(1, 400, size=n_rows).astype(np.float32)
    return TermMatrix({f"t{i}": i for i in range(len(lists))}, indptr, rows, tf, doc_len)


@pytest.mark.parametrize("tf_max", [200, 3_000, 70_000])
def test_compiled_loop_equals_numpy_on_every_stored_layout(tmp_path, compiled_loop, tf_max):
    rng = np.random.default_rng(tf_max)
    n_rows = 1 << 18
    write_postings(tmp_path, _matrix(rng, n_rows, tf_max))
    postings = Postings(tmp_path)
    assert {int(w) for w in postings.width[:3]} == {1, 2, 4}
    norm = bm25.length_norm(np.asarray(postings.doc_len), 123.4, BM25Params())
    expected = np.zeros(n_rows, dtype=np.float32)
    got = np.zeros(n_rows, dtype=np.float32)
    for j in range(len(postings.indptr) - 1):
        idf = np.float32(rng.uniform(0.1, 9.0))
        docs, tf = postings.postings(j)
        np.add.at(expected, docs, bm25.term_score(idf, tf, norm[docs]))
        compiled_loop(got, *postings.stored(j), norm, idf)
    assert expected.any()
    assert np.array_equal(expected.view(np.uint32), got.view(np.uint32))


def _doc(rng: random.Random, i: int) -> Document:
    words = [f"w{int(rng.paretovariate(1.1)) % 300}" for _ in range(rng.randint(3, 80))]
    return Document(f"d{i}", "a title", "SECTION:\n" + " ".join(words) + ".", {"patient_id": f"p{i % 5}"})


def _segments_with_deletions(root, rng: random.Random, every: int):
    """An index of 250 random documents in segments of 100 passages, every ``every``-th document deleted."""
    build_index([_doc(rng, i) for i in range(250)], root, segment_passages=100)
    with IndexWriter(root, mode="update") as w:
        for i in range(0, 250, every):
            w.delete(f"d{i}")
    index = load_index(root)
    assert len(index.segments) > 1 and not index.live.all()
    return index


def test_an_index_scores_the_same_with_and_without_the_compiled_loop(tmp_path):
    rng = random.Random(11)
    root = tmp_path / "idx"
    index = _segments_with_deletions(root, rng, 7)
    queries = [[f"w{rng.randint(0, 40)}" for _ in range(rng.randint(1, 12))] for _ in range(60)] + [["w1", "w1"]]
    plain = [index.bm25().scores(q) for q in queries]
    assert compiled.enable()
    try:
        fast = [load_index(root).bm25().scores(q) for q in queries]
    finally:
        compiled.disable()
    assert all(p.any() for p in plain[:-1])
    for p, f in zip(plain, fast):
        assert np.array_equal(p.view(np.uint32), f.view(np.uint32))


def test_phrasings_scored_by_the_rows_they_reach_give_every_rows_bits(tmp_path):
    """An aspect's phrasings over every row (SegmentedBM25.dismax): base + the best phrasing, row by row, equal to
    scoring each phrasing over every row — on several segments with deleted rows, phrasings sharing words, a word
    twice, words the index lacks, no base — and again on the arrays the last search gave back."""
    rng = random.Random(5)
    root = tmp_path / "idx"
    index = _segments_with_deletions(root, rng, 9)
    cases = [([], [["w1"], ["w2", "w3"], ["w3", "w1"]]), (["w4"], [["w5", "w5"], ["absent"], ["w0", "w6", "w7"]]),
             (["w2", "w9"], [["w8"]]), ([], [["absent"]])]
    cases += [([f"w{rng.randint(0, 30)}" for _ in range(rng.randint(0, 3))],
               [[f"w{rng.randint(0, 40)}" for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(2, 12))])
              for _ in range(30)]
    bm = index.bm25()
    assert bm.dismax(["w1"], [["w2"]]) is None  # numpy alone: the caller scores phrasing by phrasing
    want = []
    for base, phrases in cases:
        parts = [bm.scores(p) for p in phrases]
        want.append((bm.scores(base) if base else np.zeros(len(index), dtype=np.float32)) + np.maximum.reduce(parts))
    assert compiled.enable()
    try:
        fresh = load_index(root)
        for (base, phrases), expected in zip(cases, want):
            got = fresh.lexical_dismax(base, phrases)
            assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), (base, phrases)
            again = fresh.lexical_dismax(base, phrases)  # on the arrays the last call gave back
            assert np.array_equal(again.view(np.uint32), expected.view(np.uint32))
    finally:
        compiled.disable()
    assert [bool(w.any()) for w in want[:4]] == [True, True, True, False]
