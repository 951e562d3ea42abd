"""Merging segments (issue 19): the tiered merge policy at commit, `capr compact`, and generations that reuse the
segments they share. Whatever is merged, every search gives what a fresh rebuild of the live documents gives."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from capr import Query, build_index, load_index, read_documents
from capr.index import Index, IndexWriter, MergePolicy, compact_index
from capr.records import Document
from capr.search import Searcher, search

QUERIES = [
    Query("q1", entity="IgA nephropathy", aspect="symptoms"),
    Query("q2", entity="cardiomyopathy", aspect="family history"),
    Query("q3", text="how is atrial fibrillation treated"),
    Query("q4", text="colchicine for an acute gout flare"),
    Query("q5", text="wheeze and cough at night"),
]


@pytest.fixture(scope="module")
def docs(demo_dir) -> list[Document]:
    return list(read_documents(demo_dir))


def _variant(doc: Document, k: int, edit: int = 0) -> Document:
    """Document ``doc`` under id DOC~k; ``edit`` > 0 appends a line (a replacement with other text)."""
    text = doc.text + (f"\n\nADDENDUM:\nReviewed again ({edit}); plan unchanged." if edit else "")
    return Document(f"{doc.doc_id}~{k}", doc.title, text, dict(doc.metadata))


def _rows(index: Index) -> list[str]:
    """pid of every live row, in row order."""
    return [index.segments[si].pids[i] for si, live in enumerate(index.seg_live) for i in np.flatnonzero(live)]


def _live_docs_in_order(index: Index) -> list[Document]:
    return [index.document(d) for d in index.document_ids()]


def assert_same_results(a: Index, b: Index) -> None:
    """Every live passage has the same BM25 and TF-IDF score in both, and searches (filters included) return the
    same passages with the same scores in the same order."""
    assert a.counts == b.counts
    assert a.aspect_counts() == b.aspect_counts()
    ra, rb = a.pid_rows(), b.pid_rows()
    assert ra.keys() == rb.keys()
    pids = sorted(ra)
    for q in QUERIES:
        for retriever in ("bm25", "tfidf"):
            sa, sb = Searcher(a), Searcher(b)
            xa = sa.lexical_scores(sa.parse(q), None, retriever)
            xb = sb.lexical_scores(sb.parse(q), None, retriever)
            np.testing.assert_allclose([xa[ra[p]] for p in pids], [xb[rb[p]] for p in pids], rtol=1e-6, atol=1e-7)
        for filters in (None, {"aspect": "treatment"}):
            ha = [(h.pid, round(h.score, 5)) for h in search(a, q, k=10, filters=filters)]
            hb = [(h.pid, round(h.score, 5)) for h in search(b, q, k=10, filters=filters)]
            assert ha == hb, (q, filters)


def _random_updates(root, docs, n_ops: int, policy: MergePolicy | None, seed: int) -> tuple[Index, list[tuple[int, int]]]:
    """``n_ops`` single-document commits in random order: new documents, replacements, deletes."""
    rng = random.Random(seed)
    live: set[str] = set()
    by_id: dict[str, Document] = {}
    counts = []
    index = None
    for op in range(n_ops):
        choice = rng.random()
        with IndexWriter(root, mode="update", merge_policy=policy, base=index) as w:
            if live and choice < 0.35:
                doc_id = rng.choice(sorted(live))
                w.delete(doc_id)
                live.discard(doc_id)
            elif live and choice < 0.5:  # replace
                doc_id = rng.choice(sorted(live))
                w.add(_variant(by_id[doc_id], int(doc_id.rsplit("~", 1)[1]), edit=op))
            else:
                src = rng.choice(docs)
                d = _variant(src, op)
                by_id[d.doc_id] = src
                w.add(d)
                live.add(d.doc_id)
        index = load_index(root, previous=index)
        counts.append((len(index.segments), index.counts["passages"]))
    return index, counts


@pytest.mark.parametrize("policy", [MergePolicy(), MergePolicy(merge_factor=3, floor=10)], ids=["default", "small-floor"])
def test_random_adds_and_deletes_equal_a_rebuild_with_bounded_segments(tmp_path, docs, policy):
    """The acceptance check of issue 19 at unit-test size (bench/bench_nrt.py runs 1,000 operations): single-
    document adds, replaces and deletes in random order, each its own commit with the merge policy on."""
    root = tmp_path / "inc"
    build_index(docs, root)
    n_ops = 120 if policy.floor == 10 else 60
    index, counts = _random_updates(root, docs, n_ops, policy, seed=7)
    assert all(n <= policy.bound(live) for n, live in counts), counts  # after every commit
    assert len(index.segments) < n_ops // 4  # without merging there would be one segment per add
    fresh = build_index(_live_docs_in_order(index), tmp_path / "fresh")
    assert _rows(index) == _rows(fresh)
    assert_same_results(index, fresh)


def test_compact_equals_a_rebuild_row_for_row(tmp_path, docs):
    root = tmp_path / "idx"
    build_index(docs[:20], root)
    for i, d in enumerate(docs[20:]):  # one segment per add, no merging
        with IndexWriter(root, mode="update", merge_policy=None) as w:
            w.add(d)
            if i % 3 == 0:
                w.delete(docs[i].doc_id)
    before = load_index(root)
    for seg in before.segments:  # compaction deletes the segments it merged: read them now (as the service does)
        seg.preload()
    live_docs = _live_docs_in_order(before)
    assert len(before.segments) == len(docs) - 20 + 1 and not before.live.all()
    compacted = compact_index(root)
    assert len(compacted.segments) == 1 and compacted.live.all() and compacted.seg_doc_live[0].all()
    fresh = build_index(live_docs, tmp_path / "fresh")
    assert _rows(compacted) == _rows(before) == _rows(fresh)
    assert compacted.matrix.vocab.keys() == fresh.matrix.vocab.keys()  # terms of deleted passages are gone
    np.testing.assert_array_equal(np.asarray(compacted.segments[0].matrix.doc_len), np.asarray(fresh.segments[0].matrix.doc_len))
    assert_same_results(compacted, fresh)
    assert_same_results(compacted, before)
    assert compacted.document(docs[25].doc_id).text == docs[25].text
    # a compacted index is an ordinary one: later writes and deletes work on it
    with IndexWriter(root, mode="update") as w:
        w.delete(docs[25].doc_id)
    assert not load_index(root).has_document(docs[25].doc_id)


def test_cli_compact(tmp_path, demo_dir, docs):
    root = tmp_path / "idx"
    build_index(docs[:30], root)
    for d in docs[30:33]:
        with IndexWriter(root, mode="update", merge_policy=None) as w:
            w.add(d)
    proc = subprocess.run([sys.executable, "-m", "capr", "compact", str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "4 segment(s)" in proc.stderr and "→ 1 segment(s)" in proc.stderr
    assert len(load_index(root).segments) == 1
    bad = subprocess.run([sys.executable, "-m", "capr", "compact", str(tmp_path / "nope")], capture_output=True, text=True)
    assert bad.returncode != 0 and "no such index directory" in bad.stderr


def test_merge_policy_merges_only_adjacent_small_segments_and_stays_bounded():
    policy = MergePolicy(merge_factor=4, floor=100, max_passages=10_000)
    assert policy.find_merges([5_000, 50, 60], [5_000, 50, 60]) == []
    assert policy.find_merges([5_000, 50, 60, 70, 80], [5_000] + [50, 60, 70, 80]) == [(1, 5)]
    # a segment of max_passages live passages is never merged; one with most rows deleted is rewritten
    assert policy.find_merges([10_000, 40, 40, 40, 40], [10_000] + [40] * 4) == [(1, 5)]
    assert policy.find_merges([10_000, 300], [10_000, 1_000]) == [(1, 2)]
    # a full segment that lost a few rows stays as it is, beside small neighbours; half deleted, it is rewritten alone
    assert policy.find_merges([9_990, 9_990, 9_990, 9_990, 40], [10_000] * 4 + [40]) == []
    assert policy.find_merges([9_990, 4_000, 40, 40, 40, 40], [10_000] * 2 + [40] * 4) == [(1, 2), (2, 6)]
    rng = random.Random(3)
    sizes: list[int] = []
    for _ in range(3_000):  # simulate commits of random sizes, merging as the writer does
        sizes.append(rng.choice([1, 3, 10, 40, 200]))
        while merges := policy.find_merges(sizes, sizes):
            for lo, hi in reversed(merges):
                sizes[lo:hi] = [sum(sizes[lo:hi])]
        small = [s for s in sizes if s < policy.max_passages]
        assert len(small) <= policy.bound(sum(small)) * (len(sizes) - len(small) + 1), sizes
    assert sum(sizes) > 100_000 and len(sizes) < 40


def test_a_new_generation_reuses_the_segments_it_shares(tmp_path, docs):
    root = tmp_path / "idx"
    first = build_index(docs[:30], root)
    first.segments[0].doc_ids  # opened once ...
    with IndexWriter(root, mode="update", base=first) as w:
        w.add(docs[30])
    second = load_index(root, previous=first)
    assert second.segments[0] is first.segments[0]  # ... and kept: same object, same maps
    assert second.has_document(docs[30].doc_id) and second.has_document(docs[0].doc_id)
    # a writer given a generation that is no longer current opens the current one
    with IndexWriter(root, mode="update", base=first) as w:
        w.delete(docs[30].doc_id)
    assert not load_index(root).has_document(docs[30].doc_id)


def test_merged_segments_keep_their_vectors(tmp_path, docs):
    """Merges copy vectors (nothing is re-encoded): dense and hybrid results equal a rebuild's."""
    from capr.models import EncoderConfig

    dense = EncoderConfig(model="minilm")
    root = tmp_path / "idx"
    build_index(docs[:12], root, dense=dense)
    policy = MergePolicy(merge_factor=2, floor=1)
    for i, d in enumerate(docs[12:18]):
        with IndexWriter(root, mode="update", merge_policy=policy) as w:
            w.add(d)
            if i == 2:
                w.delete(docs[1].doc_id)
    index = load_index(root)
    assert len(index.segments) < 7 and index.has_dense
    fresh = build_index(_live_docs_in_order(index), tmp_path / "fresh", dense=dense)
    assert _rows(index) == _rows(fresh)
    for q in QUERIES:
        for retriever in ("dense", "hybrid"):
            a = [(h.pid, round(h.score, 4)) for h in search(index, q, k=10, retriever=retriever)]
            b = [(h.pid, round(h.score, 4)) for h in search(fresh, q, k=10, retriever=retriever)]
            assert a == b, (q, retriever)


def test_background_cleanup_removes_obsolete_folders(tmp_path, docs):
    """The service's commits rename obsolete generations and segments aside and delete them in a thread; what an
    exit leaves behind is deleted by the next writer."""
    import time

    from capr.index.segment import SEGMENTS

    root = tmp_path / "idx"
    build_index(docs[:10], root)
    with IndexWriter(root, mode="update", merge_policy=None, background_cleanup=True) as w:
        w.add(docs[10])
    with IndexWriter(root, mode="update", merge_policy=None, background_cleanup=True) as w:
        w.delete(docs[10].doc_id)  # its segment is now fully deleted: dropped
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        names = [p.name for p in root.iterdir()] + [p.name for p in (root / SEGMENTS).iterdir()]
        if not any(n.startswith(".trash-") for n in names):
            break
        time.sleep(0.05)
    gens = [n for n in (p.name for p in root.iterdir()) if n.startswith("gen-")]
    assert len(gens) == 1 and sorted(p.name for p in (root / SEGMENTS).iterdir()) == ["seg-000001"]
    assert not any(n.startswith(".trash-") for n in names)
    # a trash folder of a process that is gone is deleted by the next writer
    leftover = root / SEGMENTS / ".trash-seg-000009-999999999-0"
    leftover.mkdir()
    with IndexWriter(root, mode="update") as w:
        w.add(docs[11])
    assert not leftover.exists()
    assert load_index(root).has_document(docs[11].doc_id)


def test_a_field_only_deleted_documents_had_is_no_longer_filterable(tmp_path):
    """The filterable fields are those of the live documents once their segments are dropped or merged, as a
    fresh rebuild lists them: `capr compact` does not keep a field of deleted documents (listed by /stats and in
    the unknown-field error, where a filter on it matched nothing)."""
    from capr.errors import QueryError

    root = tmp_path / "idx"
    build_index([Document(f"d{i}", "Gout", "PLAN:\nColchicine.", {"specialty": "Rheumatology"}) for i in range(3)], root)
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        w.add(Document("d1", "Gout", "PLAN:\nAllopurinol.", {"specialty": "Rheumatology"}))
        w.add(Document("w1", "Asthma", "PLAN:\nSteroids.", {"ward": "W9"}))
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        w.add(Document("x1", "Migraine", "PLAN:\nTriptans.", {"room": "12"}))
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        w.delete("w1")
        w.delete("x1")  # its segment is dropped: "room" goes with it
    assert "room" not in load_index(root).fields()
    compacted = compact_index(root)
    fresh = build_index(_live_docs_in_order(compacted), tmp_path / "fresh")
    assert compacted.fields() == fresh.fields() == ["aspect", "doc_id", "heading", "specialty", "title"]
    with pytest.raises(QueryError, match="unknown filter field 'ward'"):
        search(compacted, "gout", filters={"ward": "W9"})


def test_compact_summary_is_the_generation_it_compacted(tmp_path, runner, monkeypatch):
    """`capr compact` (and EmbeddedStore.compact) report the generation they compacted, read under the writer lock:
    a write another process commits while compact waits for the lock is counted in "before", not missed."""
    import time

    from capr.cli import app
    from capr.store.embedded import EmbeddedStore

    root = tmp_path / "idx"
    build_index([Document(f"d{i}", "Gout", f"PLAN:\nColchicine {i}.") for i in range(3)], root)
    writer = IndexWriter(root, mode="update", merge_policy=None)  # holds the lock until it commits
    writer.add(Document("n1", "Flu", "PLAN:\nFluids."))
    real_sleep, pending = time.sleep, [writer]

    def sleep(s: float) -> None:  # compact waits for the lock: the other write commits meanwhile
        while pending:
            pending.pop().commit()
        real_sleep(s)

    monkeypatch.setattr(time, "sleep", sleep)
    res = runner.invoke(app, ["compact", str(root), "--wait", "30"])
    assert res.exit_code == 0, res.output
    assert f"compacted {root}: 2 segment(s), 4 rows → 1 segment(s), 4 rows (4 documents, 4 passages)" in res.output
    store = EmbeddedStore(root)  # a store opened before another writer's commit
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        w.delete("d0")
    assert store.compact() == {"segments_before": 1, "rows_before": 4, "segments_after": 1, "rows_after": 3,
                               "documents": 3, "passages": 3}
    store.close()


def test_a_merged_segment_holds_exactly_the_live_postings_and_values_of_its_sources(tmp_path, docs):
    """A merge writes postings term by term (never the whole matrix in memory): each term's rows and frequencies
    are its sources' live ones, renumbered in order, and no term without a live posting is kept."""
    root = tmp_path / "idx"
    build_index(docs[:20], root, segment_passages=60)
    with IndexWriter(root, mode="update") as w:
        for d in docs[20:]:
            w.add(d)
    with IndexWriter(root, mode="update") as w:
        for d in docs[::5]:
            w.delete(d.doc_id)
    before = load_index(root)
    assert len(before.segments) > 1 and not before.live.all()
    expected: dict[str, tuple[list[int], list[float]]] = {}
    offset = 0
    for seg, live in zip(before.segments, before.seg_live):
        new_row = np.cumsum(live) - 1 + offset
        for term, j in seg.postings.vocab.to_dict().items():
            rows, tf = seg.postings.postings(j)
            keep = live[rows]
            if keep.any():
                got = expected.setdefault(term, ([], []))
                got[0].extend(new_row[rows[keep]].tolist())
                got[1].extend(tf[keep].tolist())
        offset += int(live.sum())
    live_rows = np.flatnonzero(before.live)
    want_values = {f: [before.columns[f].values[c] for c in np.asarray(before.columns[f].codes)[live_rows]]
                   for f in before.fields()}
    want_texts = [before.passage(int(r)).text for r in live_rows]
    compact_index(root)
    after = load_index(root)
    (seg,) = after.segments
    vocab = seg.postings.vocab.to_dict()
    assert set(vocab) == set(expected)
    for term, (rows, tf) in expected.items():
        got_rows, got_tf = seg.postings.postings(vocab[term])
        assert got_rows.tolist() == rows and got_tf.tolist() == tf, term
    for f, want in want_values.items():
        col = seg.column(f)
        assert [col.values[c] for c in np.asarray(col.codes)] == want, f
    assert [after.passage(r).text for r in range(len(after))] == want_texts
