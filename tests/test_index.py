"""The index directory: build, reopen, search, filters, errors, and crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from capr import Query, build_index, load_index, read_documents
from capr.errors import CaprError, IndexError_, QueryError
from capr.records import Document
from capr.search import search


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory, demo_dir):
    root = tmp_path_factory.mktemp("idx") / "demo"
    build_index(read_documents(demo_dir), root)
    return load_index(root)


def test_manifest_and_layout(demo_index):
    m = demo_index.manifest
    assert m["format_version"] == 3 and len(m["segments"]) == 1
    assert m["analyzer"]["language"] == "english" and m["analyzer"]["stem"] is True
    assert m["counts"]["documents"] == 36 and m["counts"]["passages"] == len(demo_index) > 100
    root = demo_index.root
    assert (root / "CURRENT").read_text().strip() == demo_index.gen.name
    # arrays are memory-mapped, not read into memory
    assert _mapped(demo_index.segments[0].postings.tf) and _mapped(demo_index.segments[0].postings._rows)
    assert _mapped(demo_index.segments[0].store.pass_offsets)


def _mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a file mapping (a memmap, or a plain view of one)."""
    while array is not None:
        if isinstance(array, np.memmap):
            return True
        array = getattr(array, "base", None)
    return False


def test_structured_and_free_text_queries(demo_index):
    top = search(demo_index, Query("q", entity="IgA nephropathy", aspect="symptoms"), k=1)[0].passage
    assert top.aspect == "symptoms" and "IgA" in top.title
    assert "hematuria" in top.text.lower() or "blood in the urine" in top.text.lower()
    top = search(demo_index, Query("q", entity="cardiomyopathy", aspect="family history"), k=1)[0].passage
    assert top.aspect == "family history" and "cardiomyopathy" in top.text.lower()
    top = search(demo_index, "how is atrial fibrillation treated", k=1)[0].passage
    assert top.aspect == "treatment" and "anticoagula" in top.text.lower()


def test_passage_offsets_point_into_the_stored_document(demo_index):
    for hit in search(demo_index, "heart failure", k=5):
        p = hit.passage
        doc = demo_index.document(p.doc_id)
        assert doc.text[p.start:p.end] == p.text
        for a, b in p.sentences:
            assert p.start <= a < b <= p.end


def test_filters_on_aspect_and_metadata(demo_index):
    hits = search(demo_index, "mg daily", k=20, filters={"aspect": "medications"})
    assert hits and all(h.passage.aspect == "medications" for h in hits)
    # aspect filter values are normalized like headings are
    assert [h.pid for h in search(demo_index, "mg daily", k=5, filters={"aspect": "MEDS"})] == [h.pid for h in hits[:5]]
    path = "note_02_dilated_cardiomyopathy_consult.txt"
    hits = search(demo_index, "cardiomyopathy", k=50, filters={"path": path})
    assert hits and {h.passage.doc_id for h in hits} == {"note_02_dilated_cardiomyopathy_consult"}


def test_missing_values_never_match_a_filter(tmp_path):
    idx = build_index([Document("a", "", "Plain paragraph without heading."), Document("b", "", "NOTE: none here.")], tmp_path / "i")
    assert [h.pid for h in search(idx, "paragraph heading none here", filters={"aspect": "note"})] == ["b#s0"]
    with pytest.raises(QueryError, match="no passage has aspect='none'"):
        search(idx, "paragraph", filters={"aspect": "none"})


def test_an_unfilterable_value_leaves_out_only_its_document(tmp_path):
    """A metadata value no filter can match (a list, an object, a long text) in one document leaves the field out of
    that document's filters alone: the other documents of the same batch keep it, and `capr index` / `capr add` say
    once per field which document's value was left out."""
    from conftest import capr_cli, write_jsonl

    src, more, root = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "idx"
    write_jsonl(src, [
        {"id": "d1", "title": "Gout", "text": "PLAN:\nColchicine for gout.", "note_type": "discharge", "grade": "II"},
        {"id": "d2", "title": "Asthma", "text": "PLAN:\nSteroids for asthma.", "note_type": ["discharge", "progress"],
         "grade": "III", "ward": None},
        {"id": "d3", "title": "Migraine", "text": "PLAN:\nTriptans for migraine.", "note_type": "radiology",
         "grade": {"value": "I"}, "ward": "W9"},
        {"id": "d4", "title": "Flu", "text": "PLAN:\nOseltamivir for flu.", "note_type": "discharge", "grade": "x" * 300},
    ])
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(root))
    notes = [line.strip() for line in proc.stderr.splitlines() if "filterable value" in line]
    assert notes == [
        "note: field 'note_type' of document 'd2' is a list, not a filterable value: left out of that document's "
        "filters (the other documents keep the field)",
        "note: field 'grade' holds no filterable value in 2 documents (the first, 'd3', has an object): left out of "
        "their filters (the other documents keep the field)",
    ] and "Traceback" not in proc.stderr
    res = json.loads(capr_cli("search", str(root), "plan", "--filter", "note_type=discharge", "--json").stdout)
    assert sorted(r["doc_id"] for r in res["results"]) == ["d1", "d4"]
    res = json.loads(capr_cli("search", str(root), "plan", "--filter", "grade in (II, III)", "--json").stdout)
    assert sorted(r["doc_id"] for r in res["results"]) == ["d1", "d2"]
    res = json.loads(capr_cli("search", str(root), "plan", "--filter", "ward=W9", "--json").stdout)
    assert [r["doc_id"] for r in res["results"]] == ["d3"]  # a null is a value d2 lacks, not an unusable one
    assert load_index(root).document("d2").metadata["note_type"] == ["discharge", "progress"]  # the record keeps it
    write_jsonl(more, [{"id": "d5", "title": "Angina", "text": "PLAN:\nNitrates.", "note_type": {"a": 1}, "grade": "I"}])
    proc = capr_cli("add", str(root), str(more))
    assert "field 'note_type' of document 'd5' is an object" in proc.stderr
    res = json.loads(capr_cli("search", str(root), "plan", "--filter", "grade=I", "--json").stdout)
    assert [r["doc_id"] for r in res["results"]] == ["d5"]


def test_query_errors_are_clear(demo_index):
    with pytest.raises(QueryError, match="empty query"):
        search(demo_index, "   ")
    with pytest.raises(ValueError, match="empty"):
        Query("q", entity=" ", aspect="")
    with pytest.raises(QueryError, match="unknown filter field 'specialty'; filterable fields: .*aspect"):
        search(demo_index, "asthma", filters={"specialty": "x"})
    with pytest.raises(QueryError, match=r"unknown aspect 'symptons'; did you mean symptoms"):
        search(demo_index, Query("q", entity="asthma", aspect="symptons"))
    with pytest.raises(QueryError, match=r"no passage has aspect='treatmnt' \(close: treatment"):
        search(demo_index, "asthma", filters={"aspect": "treatmnt"})


def test_reopen_gives_identical_results(tmp_path, demo_dir):
    root = tmp_path / "idx"
    first = build_index(read_documents(demo_dir), root)
    q = Query("q", entity="gout", aspect="treatment")
    before = [(h.pid, h.score) for h in search(first, q, k=10)]
    again = load_index(root)
    assert [(h.pid, h.score) for h in search(again, q, k=10)] == before
    assert [(h.pid, round(h.score, 5)) for h in search(again, q, k=10, retriever="tfidf")]


def test_refuses_to_overwrite_a_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("precious")
    with pytest.raises(IndexError_, match="not empty and is not a capr index"):
        build_index([Document("a", "", "FINDINGS: ok.")], tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "precious"
    with pytest.raises(IndexError_, match="not a capr index"):
        load_index(tmp_path)


def test_failed_rebuild_keeps_previous_index(tmp_path):
    root = tmp_path / "idx"
    build_index([Document("a", "", "FINDINGS: the liver is normal.")], root)

    def docs():
        yield Document("b", "", "FINDINGS: kidneys normal.")
        raise CaprError("reader failed halfway")

    with pytest.raises(CaprError, match="halfway"):
        build_index(docs(), root)
    idx = load_index(root)
    assert [h.pid for h in search(idx, "liver")] == ["a#s0"]
    assert not [p for p in root.iterdir() if p.name.startswith(".gen-")]
    assert [p.name for p in (root / "segments").iterdir()] == idx.manifest["segments"]


def test_killed_index_process_leaves_previous_index_intact(tmp_path, demo_dir):
    """SIGKILL `capr index` while it writes a new generation: the old index still opens, unchanged."""
    root = tmp_path / "idx"
    build_index(read_documents(demo_dir), root)
    before = [(h.pid, h.score) for h in search(load_index(root), "atrial fibrillation anticoagulation", k=5)]
    big = tmp_path / "big.jsonl"
    with big.open("w") as fh:
        for i in range(60000):
            fh.write(json.dumps({"id": f"n{i}", "text": f"ASSESSMENT: patient {i} has gout. PLAN: colchicine and follow up in {i % 9} weeks."}) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "capr", "index", "--lexical-only", str(big), "--out", str(root), "--replace"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_mid_write(proc, root)
    idx = load_index(root)
    assert idx.counts["documents"] == 36
    assert [(h.pid, h.score) for h in search(idx, "atrial fibrillation anticoagulation", k=5)] == before
    # the next write cleans up the dead writer's leftovers
    build_index(read_documents(demo_dir), root)
    assert not _tmp_dirs(root)


def _tmp_dirs(root: Path) -> list[Path]:
    return [p for p in [*root.iterdir(), *(root / "segments").iterdir()] if ".tmp-" in p.name]


def _kill_mid_write(proc: subprocess.Popen, root: Path) -> None:
    """SIGKILL a capr writer once it is well into writing its new segment."""
    deadline = time.time() + 120
    while time.time() < deadline and not _tmp_dirs(root):
        time.sleep(0.05)
    time.sleep(1.0)
    assert proc.poll() is None, "the write finished before it could be killed; make the input bigger"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _tmp_dirs(root)  # it really died mid-write


def test_a_long_write_is_cut_into_segments_with_the_same_results(tmp_path, demo_dir):
    """`segment_passages` bounds what one write holds in memory: the index gets several segments, and every
    lexical score, filter and document equals the one-segment build (rows keep their order)."""
    from capr.index import IndexWriter
    from capr.index.segment import SEGMENTS

    docs = list(read_documents(demo_dir))
    one = build_index(docs, tmp_path / "one")
    with IndexWriter(tmp_path / "cut", segment_passages=40) as w:
        for d in docs:
            w.add(d)
    cut = load_index(tmp_path / "cut")
    assert len(one.segments) == 1 and len(cut.segments) >= len(one) // 40 >= 7  # cut at document boundaries
    assert cut.counts == one.counts and [cut.passage(r).pid for r in range(len(cut))] == [one.passage(r).pid for r in range(len(one))]
    queries = [Query("q", entity="IgA nephropathy", aspect="symptoms"), "how is atrial fibrillation treated", "colchicine gout"]
    for q in queries:
        for retriever in ("bm25", "tfidf"):
            assert [(h.pid, h.score) for h in search(cut, q, k=10, retriever=retriever)] == \
                [(h.pid, h.score) for h in search(one, q, k=10, retriever=retriever)]
        assert [h.pid for h in search(cut, q, k=5, filters={"aspect": "treatment"})] == \
            [h.pid for h in search(one, q, k=5, filters={"aspect": "treatment"})]
    # a write that fails after some segments were cut leaves none of them behind, and the old index current
    def failing():
        yield from docs[:30]
        raise RuntimeError("reader broke")

    before = sorted(p.name for p in (tmp_path / "cut" / SEGMENTS).iterdir())
    with pytest.raises(RuntimeError):
        with IndexWriter(tmp_path / "cut", mode="update", segment_passages=40) as w:
            for d in failing():
                w.add(Document(d.doc_id + "-new", d.title, d.text, dict(d.metadata)))
    assert sorted(p.name for p in (tmp_path / "cut" / SEGMENTS).iterdir()) == before
    assert load_index(tmp_path / "cut").counts == one.counts


def test_duplicate_passage_ids_across_documents_are_bad_records(tmp_path):
    """Passage ids a source assigns (section ids) may collide across documents, with each other or with the ids
    capr makes ("DOC#sN"); either way the later document is a bad record, not a second passage with that id."""
    from capr.corpus import ReadReport
    from capr.index import IndexWriter
    from capr.records import Section

    def doc(doc_id: str, section_id: str | None) -> Document:
        text = f"Answer about {doc_id}: warfarin dosing."
        return Document(doc_id, doc_id, text, sections=[Section("", "treatment", 0, len(text), section_id)])

    report = ReadReport(skip_bad=True)
    with IndexWriter(tmp_path / "idx", report=report) as w:
        assert w.add(doc("d1", "ans-1")) == 1
        assert w.add(doc("d2", "ans-1")) == 0  # the same source id again
        assert w.add(doc("d3", None)) == 1  # capr's own id: d3#s0
        assert w.add(doc("d4", "d3#s0")) == 0  # a source id equal to capr's id of d3's passage
        assert w.add(doc("d5", "d5-answer")) == 1
    assert [e.record for e in report.skipped] == ["d2", "d4"]
    assert sorted(load_index(tmp_path / "idx").pid_rows()) == ["ans-1", "d3#s0", "d5-answer"]
