"""Incremental updates: adds, replaces and deletes give exactly what a fresh rebuild gives."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from capr import Query, build_index, load_index, read_documents
from capr.errors import BadInputError, CaprError, QueryError
from capr.index import IndexWriter
from capr.models import EncoderConfig
from capr.records import Document
from capr.search import Searcher, search

from test_index import _kill_mid_write, _tmp_dirs

QUERIES = [
    Query("q1", entity="IgA nephropathy", aspect="symptoms"),
    Query("q2", entity="cardiomyopathy", aspect="family history"),
    Query("q3", text="how is atrial fibrillation treated"),
    Query("q4", text="colchicine for an acute gout flare"),
]


@pytest.fixture(scope="module")
def docs(demo_dir) -> list[Document]:
    return list(read_documents(demo_dir))


def _edited(doc: Document) -> Document:
    text = doc.text + "\n\nADDENDUM:\nReviewed again today; plan unchanged."
    return Document(doc.doc_id, doc.title, text, dict(doc.metadata))


def _scores(index, q, retriever) -> dict[str, float]:
    rows = index.pid_rows()
    searcher = Searcher(index)
    pq = searcher.parse(q)
    s = searcher.lexical_scores(pq, None, retriever) if retriever in ("bm25", "tfidf") else None
    if s is None:
        v = searcher.encode([pq])[0]
        r = np.asarray(sorted(rows.values()))
        return {index.passage(int(i)).pid: float(x) for i, x in zip(r, index.dense_scores(v, r))}
    return {pid: float(s[row]) for pid, row in rows.items()}


@pytest.fixture(scope="module")
def incremental_and_fresh(tmp_path_factory, docs):
    """Builds the same final collection twice: by a sequence of updates, and from scratch."""
    base = tmp_path_factory.mktemp("upd")
    dense = EncoderConfig(model="minilm")
    inc = base / "incremental"
    build_index(docs[:20], inc, dense=dense)
    with IndexWriter(inc, mode="update") as w:  # add 10 more
        for d in docs[20:30]:
            w.add(d)
    with IndexWriter(inc, mode="update") as w:  # delete 4
        for d in docs[3:7]:
            w.delete(d.doc_id)
    with IndexWriter(inc, mode="update") as w:  # add the rest, replace two with edited text
        for d in docs[30:]:
            w.add(d)
        w.add(_edited(docs[0]))
        w.add(_edited(docs[25]))
    final = [_edited(docs[0])] + docs[1:3] + docs[7:25] + [_edited(docs[25])] + docs[26:]
    fresh = build_index(final, base / "fresh", dense=dense)
    return load_index(inc), fresh, final


def test_counts_and_documents_match_a_fresh_rebuild(incremental_and_fresh):
    inc, fresh, final = incremental_and_fresh
    assert len(inc.manifest["segments"]) == 3  # nothing was rebuilt: one segment per add
    assert inc.counts == fresh.counts
    assert sorted(inc.document_ids()) == sorted(d.doc_id for d in final)
    assert inc.document(final[0].doc_id).text.endswith("plan unchanged.")


@pytest.mark.parametrize("retriever", ["bm25", "tfidf", "dense"])
def test_scores_equal_a_fresh_rebuild(incremental_and_fresh, retriever):
    inc, fresh, _ = incremental_and_fresh
    for q in QUERIES:
        a, b = _scores(inc, q, retriever), _scores(fresh, q, retriever)
        assert a.keys() == b.keys()
        np.testing.assert_allclose([a[p] for p in sorted(a)], [b[p] for p in sorted(a)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_search_results_equal_a_fresh_rebuild(incremental_and_fresh, retriever):
    """Same scores at every rank and the same passages; only equal scores may come in another order (ties break
    by insertion order, and an update re-inserts the documents it replaces). Hybrid RRF scores are ranks: two
    passages tied in one list and swapped move one rank there, which changes an RRF score by less than
    1/(61·62) ≈ 2.6e-4 — that much is allowed for hybrid, nothing else."""
    inc, fresh, _ = incremental_and_fresh
    tol = 3e-4 if retriever == "hybrid" else 0.0
    for q in QUERIES:
        a = [(h.pid, round(h.score, 5)) for h in search(inc, q, k=10, retriever=retriever)]
        b = [(h.pid, round(h.score, 5)) for h in search(fresh, q, k=10, retriever=retriever)]
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=tol), q
        last = min(s for _, s in a + b) if a else 0.0
        assert {p for p, s in a if s > last + tol} == {p for p, s in b if s > last + tol}, q
        for (pa, sa), (pb, _) in zip(a, b):
            if pa != pb:  # only inside a group of equal scores
                assert pb in {p for p, s in a + b if abs(s - sa) <= tol}, (q, pa, pb, sa)


def test_filters_apply_to_dense_and_hybrid(incremental_and_fresh):
    inc, _, _ = incremental_and_fresh
    for retriever in ("dense", "hybrid"):
        hits = search(inc, "blood thinners", k=5, retriever=retriever, filters={"aspect": "treatment"})
        assert len(hits) == 5 and all(h.passage.aspect == "treatment" for h in hits)


def test_deleted_documents_never_come_back(tmp_path, docs):
    root = tmp_path / "idx"
    build_index(docs[:10], root)
    gone = docs[2]
    with IndexWriter(root, mode="update") as w:
        w.delete(gone.doc_id)
    with IndexWriter(root, mode="update") as w:  # a later, unrelated update
        w.add(docs[11])
    idx = load_index(root)
    assert not idx.has_document(gone.doc_id)
    with pytest.raises(QueryError, match="no document with id"):
        idx.document(gone.doc_id)
    assert all(h.passage.doc_id != gone.doc_id for h in search(idx, gone.title, k=50))
    with pytest.raises(QueryError, match="no document with id 'nope'"):
        with IndexWriter(root, mode="update") as w:
            w.delete("nope")
    assert load_index(root).counts["documents"] == 10


def test_fully_deleted_segments_are_collected(tmp_path, docs):
    root = tmp_path / "idx"
    build_index(docs[:3], root)
    with IndexWriter(root, mode="update") as w:
        w.add(docs[3])
    with IndexWriter(root, mode="update") as w:
        w.delete(docs[3].doc_id)
    idx = load_index(root)
    assert len(idx.manifest["segments"]) == 1
    assert sorted(p.name for p in (root / "segments").iterdir()) == idx.manifest["segments"]


def test_cli_add_replace_delete(tmp_path, demo_dir):
    root = tmp_path / "idx"
    run = lambda *a, check=True: subprocess.run([sys.executable, "-m", "capr", *a], capture_output=True, text=True, check=check)  # noqa: E731
    run("index", "--lexical-only", str(demo_dir), "--out", str(root))
    new = tmp_path / "new.jsonl"
    new.write_text(
        json.dumps({"id": "note_20_gout_urgent_care", "title": "Gout follow-up", "text": "PLAN: febuxostat started for tophaceous gout."}) + "\n"
        + json.dumps({"id": "extra-1", "title": "Sarcoidosis", "text": "SYMPTOMS: cough, erythema nodosum and bilateral hilar lymphadenopathy."}) + "\n"
    )
    out = run("add", str(root), str(new))
    assert "37 documents" in out.stderr
    res = json.loads(run("search", str(root), "febuxostat tophaceous", "--json").stdout)
    assert res["results"][0]["doc_id"] == "note_20_gout_urgent_care"
    assert not json.loads(run("search", str(root), "colchicine", "--filter", "doc_id=note_20_gout_urgent_care", "--json", check=False).stdout or "{}").get("results")
    out = run("delete", str(root), "--doc-id", "extra-1")
    assert "36 documents" in out.stderr
    assert run("search", str(root), "sarcoidosis hilar", "--json", check=False).stdout.count('"extra-1"') == 0
    bad = run("delete", str(root), "--doc-id", "missing-doc", check=False)
    assert bad.returncode == 2 and "no document with id 'missing-doc'" in bad.stderr


def test_add_with_malformed_document_changes_nothing(tmp_path, docs):
    root = tmp_path / "idx"
    build_index(docs[:5], root)
    before = load_index(root).manifest["generation"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "ok", "text": "fine"}\n{"id": "broken", "text": 12}\n')
    from capr.corpus import ReadReport

    with pytest.raises(BadInputError, match=r"bad\.jsonl \[line 2\]: missing string field 'text'"):
        with IndexWriter(root, mode="update", report=ReadReport()) as w:
            for d in read_documents(bad, report=w.report):
                w.add(d)
    idx = load_index(root)
    assert idx.manifest["generation"] == before and not idx.has_document("ok")
    assert not _tmp_dirs(root)


def test_killed_add_leaves_index_at_previous_state(tmp_path, docs):
    root = tmp_path / "idx"
    build_index(docs, root)
    q = Query("q", entity="gout", aspect="treatment")
    before = [(h.pid, h.score) for h in search(load_index(root), q, k=5)]
    big = tmp_path / "big.jsonl"
    with big.open("w") as fh:
        for i in range(60000):
            fh.write(json.dumps({"id": f"n{i}", "text": f"ASSESSMENT: patient {i} has gout. PLAN: colchicine, review in {i % 9} weeks."}) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "capr", "add", str(root), str(big)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_mid_write(proc, root)
    idx = load_index(root)
    assert idx.counts["documents"] == len(docs)
    assert [(h.pid, h.score) for h in search(idx, q, k=5)] == before
    with IndexWriter(root, mode="update") as w:  # the next writer cleans up after the dead one
        w.add(Document("x", "", "FINDINGS: fine."))
    assert not _tmp_dirs(root)


def test_same_document_twice_in_one_batch_is_bad_input(tmp_path, docs):
    with pytest.raises(BadInputError, match="duplicate document id"):
        build_index([docs[0], docs[0]], tmp_path / "i")
    with pytest.raises(CaprError, match="added in this same update"):
        build_index(docs[:2], tmp_path / "j")
        with IndexWriter(tmp_path / "j", mode="update") as w:
            w.add(docs[3])
            w.delete(docs[3].doc_id)


def test_second_concurrent_writer_is_refused(tmp_path, docs):
    root = tmp_path / "idx"
    build_index(docs[:3], root)
    first = IndexWriter(root, mode="update")
    try:
        with pytest.raises(CaprError, match="another process is writing this index"):
            IndexWriter(root, mode="update")
        first.add(docs[4])
        first.commit()
    finally:
        first.abort()
    assert load_index(root).counts["documents"] == 4


def test_a_deleted_or_replaced_documents_values_are_not_offered_as_close_filter_values(tmp_path):
    """A filter value no live passage has is refused with the close values a live passage has: never the value
    of a deleted or replaced document (it would match nothing, and it is the removed record's data)."""
    root = tmp_path / "idx"
    build_index([Document("d1", "Asthma", "PLAN:\nInhaled steroids.", {"specialty": "Pulmonology", "ward": "Ward 9"}),
                 Document("d2", "Gout", "PLAN:\nColchicine.", {"specialty": "Rheumatology", "ward": "Ward 1"}),
                 *[Document(f"d{i}", "Migraine", "PLAN:\nTriptans.", {"specialty": "Psychiatry"}) for i in (3, 4, 5)]],
                root)  # d3-d5 keep the first segment (its deleted rows a minority: not rewritten)
    with IndexWriter(root, mode="update") as w:  # d1 replaced with another specialty, then d2 deleted
        w.add(Document("d1", "Asthma", "PLAN:\nAlbuterol.", {"specialty": "Allergy", "ward": "Ward 2"}))
    with IndexWriter(root, mode="update") as w:
        w.delete("d2")
    idx = load_index(root)
    with pytest.raises(QueryError) as e:
        search(idx, "asthma", filters={"specialty": "Pulmonology"})
    assert str(e.value) == "no passage has specialty='Pulmonology'"
    with pytest.raises(QueryError) as e:
        search(idx, "asthma", filters={"ward": "Ward 8"})
    assert str(e.value) == "no passage has ward='Ward 8' (close: Ward 2)"
    assert sorted(idx.stored_values("specialty")) == ["Allergy", "Psychiatry"]


def test_a_field_or_aspect_only_deleted_documents_had_is_not_present(tmp_path):
    """After deletes and replacements, the fields a filter accepts and the aspects the index has are those of its
    live documents, as a fresh rebuild of them has: a field or aspect only deleted passages had is neither listed
    nor accepted (a filter on it is an unknown field, as in the rebuild) nor taken as the aspect a query asks for."""
    root = tmp_path / "idx"
    build_index([Document("d1", "Asthma", "SOCIAL HISTORY:\nSmokes.", {"ward": "W9", "grade": "II"}),
                 Document("d2", "Gout", "PLAN:\nColchicine.", {"room": "12"}),
                 *[Document(f"d{i}", "Migraine", "PLAN:\nTriptans.", {"grade": "I"}) for i in (3, 4, 5)]],
                root)  # d3-d5 keep the first segment (its deleted rows a minority: not rewritten)
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        w.delete("d1")
        w.add(Document("d2", "Gout", "PLAN:\nAllopurinol.", {"grade": "III"}))  # replaced without its room
    with IndexWriter(root, mode="update", merge_policy=None) as w:  # a commit that leaves that segment as it is
        w.add(Document("d6", "Flu", "PLAN:\nFluids.", {"grade": "I"}))
    idx = load_index(root)
    assert len(idx.segments) == 3 and not idx.live.all()
    fresh = build_index([idx.document(d) for d in idx.document_ids()], tmp_path / "fresh")
    assert idx.fields() == fresh.fields() == ["aspect", "doc_id", "grade", "heading", "title"]
    cold = load_index(root)
    asked = {a: cold.has_aspect(a) for a in ("social history", "plan", "Plan", "history")}
    assert "aspect" not in cold._values  # answered segment by segment, no aspect's passages counted
    cold.aspects()
    assert asked == {a: cold.has_aspect(a) for a in asked} == {"social history": False, "plan": True, "Plan": False,
                                                               "history": False}
    assert idx.has_aspect("social history") is fresh.has_aspect("social history") is False
    assert idx.has_aspect("plan") and idx.aspects() == fresh.aspects() == ["plan"]
    assert Searcher(idx).prior_aspect("social history") == Searcher(fresh).prior_aspect("social history")
    for index in (idx, fresh):
        with pytest.raises(QueryError, match="unknown filter field 'ward'"):
            search(index, "asthma", filters={"ward": "W9"})
        with pytest.raises(QueryError, match="unknown filter field 'room'"):
            search(index, "gout", filters={"room": "12"})
    # a manifest written before it recorded its segments' fields without a live value: found again at the next commit
    gen = idx.gen / "manifest.json"
    manifest = json.loads(gen.read_text())
    manifest.pop("dead_fields")
    gen.write_text(json.dumps(manifest))
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        w.add(Document("d7", "Flu", "PLAN:\nRest.", {"grade": "I"}))
    assert load_index(root).fields() == fresh.fields()


def test_a_value_is_spelled_as_a_live_document_spells_it(tmp_path):
    """A column lists the values its live passages hold (values that differ in case are two values since issue 52),
    as a rebuild of the live documents lists them — in listings, in the close values offered for a misspelt one, and
    in the compacted index — when a passage that held one is deleted or replaced."""
    from capr.index import compact_index

    root = tmp_path / "idx"
    build_index([Document("d1", "asthma", "Plan:\nInhaled steroids.", {"note_type": "DISCHARGE", "grade": "ii"}),
                 Document("d2", "Gout", "PLAN:\nColchicine.", {"note_type": "Progress", "grade": "iii"}),
                 Document("d3", "Asthma", "PLAN:\nAlbuterol.", {"note_type": "discharge", "grade": "II"}),
                 *[Document(f"d{i}", "Migraine", "PLAN:\nTriptans.", {"note_type": "progress", "grade": "III"})
                   for i in (4, 5, 6)]],
                root)  # d3-d6 keep the first segment (its deleted rows a minority: not rewritten)
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        w.delete("d1")
        w.add(Document("d2", "Gout", "PLAN:\nAllopurinol.", {"note_type": "progress", "grade": "III"}))
    idx = load_index(root)
    assert not idx.live.all() and len(idx.segments) == 2
    fresh = build_index([idx.document(d) for d in idx.document_ids()], tmp_path / "fresh")
    for field in ("note_type", "grade", "title", "heading"):
        assert idx.stored_values(field) == fresh.stored_values(field), field
    assert idx.stored_values("note_type") == ["discharge", "progress"]
    assert idx.live_values("title") == ["Asthma", "Migraine", "Gout"]
    for index in (idx, fresh):
        with pytest.raises(QueryError) as e:
            search(index, "asthma", filters={"note_type": "dischage"})
        assert str(e.value) == "no passage has note_type='dischage' (close: discharge)"
    compacted = compact_index(root)
    for field in ("note_type", "grade", "title", "heading"):
        assert compacted.segments[0].column(field).values == fresh.segments[0].column(field).values, field
