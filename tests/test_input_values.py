"""Corpus input and filter values a user can hand capr: JSON nested too deeply, symbolic links in a
corpus folder, a plain-text note's title line, bad filter values, an aspect filter that reads as ``-a``
does, a generic id/title/text CSV and a FHIR file read as text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from capr import load_index
from capr.corpus import Format, ReadReport, detect_format, read_documents
from capr.errors import BadInputError, QueryError
from capr.index import build_index
from capr.search import search

from conftest import capr_cli, write_jsonl

DEEP = "[" * 100_000  # json raises RecursionError on it, not JSONDecodeError


def _one_line_error(proc, *needles: str) -> None:
    """A failed command: non-zero exit, the reason on stderr in one line, no Python traceback."""
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)


def _generation(index_dir: Path) -> str:
    return (index_dir / "CURRENT").read_text().strip()


# ------------------------------------------------------------------ JSON nested too deeply
def _deep_jsonl(path: Path) -> Path:
    path.write_text(json.dumps({"id": "a", "text": "chest pain"}) + "\n" + DEEP + "\n"
                    + json.dumps({"id": "b", "text": "cough at night"}) + "\n")
    return path


def test_deeply_nested_jsonl_line_is_one_bad_record(tmp_path):
    src = _deep_jsonl(tmp_path / "deep.jsonl")
    out = tmp_path / "idx"
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(out), check=False)
    _one_line_error(proc, f"{src} [line 2]: invalid JSON: nested too deeply")
    assert not out.exists()
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(out), "--skip-bad")
    said = proc.stdout + proc.stderr
    assert "1 bad record(s) skipped" in said and f"skipped {src} [line 2]: invalid JSON: nested too deeply" in said
    assert load_index(out).counts["documents"] == 2
    before = _generation(out)
    proc = capr_cli("add", str(out), str(src), check=False)  # nothing already indexed is lost
    _one_line_error(proc, f"{src} [line 2]: invalid JSON: nested too deeply")
    assert _generation(out) == before and load_index(out).counts["documents"] == 2
    proc = capr_cli("add", str(out), str(src), "--skip-bad")
    assert "1 bad record(s) skipped" in proc.stderr and load_index(out).counts["documents"] == 2
    with pytest.raises(BadInputError, match=r"\[line 2\]: invalid JSON: nested too deeply"):
        build_index(read_documents(src), tmp_path / "py")


def test_deeply_nested_json_in_every_json_reader(tmp_path):
    fhir = tmp_path / "bundle.json"
    fhir.write_text('{"resourceType": "Bundle", "type": "collection", "entry": ' + DEEP)
    with pytest.raises(BadInputError, match="invalid JSON: nested too deeply"):
        list(read_documents(fhir, Format.fhir))
    report = ReadReport(skip_bad=True)
    assert list(read_documents(fhir, Format.fhir, report)) == [] and "nested too deeply" in report.skipped[0].reason
    beir = tmp_path / "beir"
    beir.mkdir()
    _deep_jsonl(beir / "corpus.jsonl")
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(beir, Format.auto, report)] == ["a", "b"]
    assert report.skipped[0].record == "line 2"
    first = tmp_path / "first.jsonl"  # the format sniff parses the first line too
    first.write_text(DEEP + "\n")
    assert detect_format(first) is Format.jsonl
    with pytest.raises(BadInputError, match=r"\[line 1\]: invalid JSON: nested too deeply"):
        list(read_documents(first))


# ------------------------------------------------------------------ symbolic links in a corpus folder
@pytest.fixture
def linked_corpus(tmp_path) -> Path:
    """A corpus folder of two notes, a link to a folder of seven notes outside it, a broken link, a link
    back to the folder above it (a loop) and a second link to one of its own notes."""
    shared = tmp_path / "shared_notes"
    shared.mkdir()
    for i in range(7):
        (shared / f"n{i}.txt").write_text(f"MEDICATIONS:\nDrug{i} {i + 1} mg daily.\n")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("PLAN: rest.\n")
    (corpus / "b.txt").write_text("PLAN: fluids.\n")
    os.symlink(shared, corpus / "linked")
    os.symlink(tmp_path / "nowhere.txt", corpus / "broken.txt")
    os.symlink("..", corpus / "up")
    os.symlink("a.txt", corpus / "same_as_a.txt")
    return corpus


@pytest.mark.parametrize("fmt", [Format.auto, Format.text])
def test_symbolic_links_are_followed_and_bad_ones_reported(linked_corpus, fmt):
    report = ReadReport(skip_bad=True)
    ids = [d.doc_id for d in read_documents(linked_corpus, fmt, report)]
    assert ids == ["a", "b"] + [f"linked/n{i}" for i in range(7)]
    why = {Path(e.source).name: e.reason for e in report.skipped}
    assert why.keys() == {"broken.txt", "up", "same_as_a.txt"}
    assert why["broken.txt"].startswith("broken symbolic link") and "nowhere.txt" in why["broken.txt"]
    assert why["up"].startswith("symbolic link loop")
    assert why["same_as_a.txt"] == f"symbolic link to a file read already as {linked_corpus / 'a.txt'}"


def test_a_symbolic_link_to_itself_is_a_loop_not_a_broken_link(tmp_path):
    """A link to itself (or two links to each other) leads nowhere because it loops, not because a target is gone."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("PLAN: rest.\n")
    os.symlink("self.txt", corpus / "self.txt")
    os.symlink("b2.txt", corpus / "b1.txt")
    os.symlink("b1.txt", corpus / "b2.txt")
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(corpus, Format.auto, report)] == ["a"]
    why = {Path(e.source).name: e.reason for e in report.skipped}
    assert why == {"self.txt": "symbolic link loop (its target self.txt leads back to it)",
                   "b1.txt": "symbolic link loop (its target b2.txt leads back to it)",
                   "b2.txt": "symbolic link loop (its target b1.txt leads back to it)"}
    with pytest.raises(BadInputError, match="self.txt: symbolic link loop"):  # named as the source itself too
        list(read_documents(corpus / "self.txt"))


def test_symbolic_links_cli(linked_corpus, tmp_path):
    out = tmp_path / "idx"
    proc = capr_cli("index", "--lexical-only", str(linked_corpus), "--out", str(out), check=False)
    _one_line_error(proc, f"{linked_corpus / 'broken.txt'}: broken symbolic link")
    proc = capr_cli("index", "--lexical-only", str(linked_corpus), "--out", str(out), "--skip-bad")
    assert "indexed 9 documents" in proc.stderr and "3 bad record(s) skipped" in proc.stderr, proc.stderr


# ------------------------------------------------------------------ filter values
DATED = [
    {"id": "n1", "text": "MEDICATIONS: apixaban 5 mg daily.", "date": "2150-01-03T10:00:00", "note_seq": 1, "category": "Discharge"},
    {"id": "n2", "text": "MEDICATIONS: metformin 500 mg.", "date": "2151-05-01", "note_seq": 2, "category": "Radiology"},
    {"id": "n3", "text": "MEDICATIONS: aspirin 81 mg.", "note_seq": 3},
]


@pytest.fixture(scope="module")
def dated_index(tmp_path_factory):
    from conftest import index_of_documents

    return index_of_documents(tmp_path_factory, "dated", DATED)


def _docs(index, filters) -> set[str]:
    from capr.store.embedded import EmbeddedStore

    mask = EmbeddedStore.of(index).compile_filter(filters)
    return {p.doc_id for p in index.passages(np.flatnonzero(mask))}


@pytest.mark.parametrize("clause,needles", [
    ("date>=notadate", ["date holds dates", "'notadate' is not one"]),
    ("date<2150/01/01", ["date holds dates", "'2150/01/01'"]),
    ("date>=2150-13", ["date bound '2150-13' is not a valid date"]),
    ("note_seq>abc", ["note_seq holds numbers and 'abc' is not one"]),
])
def test_range_bound_of_the_wrong_kind_is_an_error(dated_index, clause, needles):
    with pytest.raises(QueryError) as e:
        search(dated_index, "medications", filters=[clause])
    assert all(n in str(e.value) for n in needles), str(e.value)


def test_a_deleted_documents_values_neither_decide_nor_show_in_a_range_bound_error(tmp_path_factory):
    """After a delete, the bound is checked against what the live notes hold: the deleted note's date is not the
    example the error shows, and a deleted note's word no longer makes a column of dates one of words."""
    from conftest import index_of_documents

    from capr.store.embedded import EmbeddedStore

    docs = DATED[:2] + [{"id": "n4", "text": "MEDICATIONS: insulin.", "date": "unknown"}] + [
        {"id": f"m{i}", "text": f"MEDICATIONS: drug {i}.", "date": f"2152-0{i}-01"} for i in range(1, 7)]
    store = EmbeddedStore.of(index_of_documents(tmp_path_factory, "dated-deleted", docs))
    assert search(store, "medications", filters=["date>=notadate"])  # words: compared as strings
    store.delete(["n1", "n4"])  # 2 of 9: the segment keeps their rows, marked deleted
    with pytest.raises(QueryError) as e:
        search(store, "medications", filters=["date>=notadate"])
    assert "e.g. 2151-05-01" in str(e.value) and "2150-01-03" not in str(e.value), str(e.value)


def test_range_filters_that_are_answers(dated_index):
    assert _docs(dated_index, ["date>=2151"]) == {"n2"}
    assert _docs(dated_index, ["category>=R"]) == {"n2"}  # a column of words compares as strings
    assert _docs(dated_index, ["note_seq<=2"]) == {"n1", "n2"}


def test_not_equal_and_not_in_leave_out_documents_without_the_field(dated_index):
    # SQL's NULL: n3 has no category, so no clause on category (!=, not in included) passes it
    assert _docs(dated_index, ["category!=Radiology"]) == {"n1"}
    assert _docs(dated_index, ["category not in (Radiology)"]) == {"n1"}


# ------------------------------------------------------------------ a generic CSV; a FHIR file read as text
def test_csv_of_documents_is_read_like_jsonl(tmp_path):
    src = tmp_path / "docs.csv"
    src.write_text('ID, Title ,text,date,ward\n'
                   'd1,Gout,"MEDICATIONS: colchicine 0.5 mg, twice daily.",2150-01-01,\n'
                   'd2,,"Wheeze at night, worse in winter.",2151-03-04,B\n'
                   'd3,Empty,,,\n')
    assert detect_format(src) is Format.csv
    report = ReadReport()
    docs = list(read_documents(src, report=report))
    assert [(d.doc_id, d.title, d.metadata) for d in docs] == [
        ("d1", "Gout", {"date": "2150-01-01"}), ("d2", "", {"date": "2151-03-04", "ward": "B"})]
    assert docs[0].text == "MEDICATIONS: colchicine 0.5 mg, twice daily." and report.empty == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("id,text\nd1,ok\nd2,too,many\n")
    with pytest.raises(BadInputError, match=r"\[line 3\]: row has more cells than the 2 columns"):
        list(read_documents(bad))


def test_semicolon_csv_of_documents_from_european_excel(tmp_path):
    """Excel saves "CSV" with semicolons where the comma is the decimal mark; the comma in a cell is text then."""
    src = tmp_path / "docs.csv"
    src.write_bytes(b'\xef\xbb\xbfid;title;text;dose\r\n'
                    b'd1;Gout;"MEDICATIONS:\r\ncolchicine 0,5 mg; twice daily.";0,5\r\n'
                    b'd2;;Wheeze at night, worse in winter.;\r\n')
    assert detect_format(src) is Format.csv
    docs = list(read_documents(src))
    assert [(d.doc_id, d.title, d.text, d.metadata) for d in docs] == [
        ("d1", "Gout", "MEDICATIONS:\ncolchicine 0,5 mg; twice daily.", {"dose": "0,5"}),
        ("d2", "", "Wheeze at night, worse in winter.", {})]
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"))
    assert load_index(tmp_path / "idx").counts["documents"] == 2, proc.stderr


def test_csv_no_reader_takes_says_how_to_convert(tmp_path):
    src = tmp_path / "notes.csv"
    src.write_text("name,body\nx,chest pain\n")
    with pytest.raises(BadInputError) as e:
        detect_format(src)
    assert "a CSV of documents has columns text and an id" in e.value.reason and "write JSONL" in e.value.reason


def test_text_format_refuses_a_file_another_reader_takes(tmp_path):
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({"resourceType": "Bundle", "type": "collection", "entry": []}))
    with pytest.raises(BadInputError, match="looks like fhir input, not a plain-text note; use --format fhir"):
        list(read_documents(bundle, Format.text))
    lines = tmp_path / "data.json"  # JSON lines under a .json name: the JSONL reader's
    lines.write_text('{"a": 1}')
    with pytest.raises(BadInputError, match="looks like jsonl input, not a plain-text note; use --format jsonl"):
        list(read_documents(lines, Format.text))
    plain = tmp_path / "settings.json"
    plain.write_text('{\n  "a": 1\n}')
    with pytest.raises(BadInputError, match="a JSON file, not a plain-text note"):
        list(read_documents(plain, Format.text))
    note = tmp_path / "note"  # no suffix, no other format: text, as asked
    note.write_text("PLAN: rest.\n")
    assert [d.doc_id for d in read_documents(note, Format.text)] == ["note"]


# ------------------------------------------------------------------ an aspect filter reads as -a does
@pytest.fixture(scope="module")
def notes_index(tmp_path_factory, demo_dir):
    notes = tmp_path_factory.mktemp("notes")
    for note in demo_dir.glob("note_*.txt"):  # clinical notes only: no "symptoms" section among them
        (notes / note.name).write_text(note.read_text())
    return build_index(read_documents(notes), tmp_path_factory.mktemp("notes-idx") / "idx")


def test_aspect_filter_reads_the_value_as_the_aspect_option_does(notes_index):
    from capr.store.embedded import EmbeddedStore

    store = EmbeddedStore.of(notes_index)
    meds = store.compile_filter({"aspect": "medications"})
    assert meds.sum() > 0
    for spelling in ("meds", "medication list", "Medications"):
        assert (store.compile_filter({"aspect": spelling}) == meds).all(), spelling
    assert (store.compile_filter(["aspect in (medication list)"]) == meds).all()


def test_milvus_aspect_filter_reads_the_value_as_the_embedded_index_does():
    from capr.text.analyzer import Analyzer, AnalyzerConfig
    from capr.store.milvus_backend import MilvusStore

    store = MilvusStore.__new__(MilvusStore)  # only filter_expr: no server needed
    store.meta = {"fields": ["aspect", "doc_id"], "aspects": ["medications", "history of present illness", "plan"]}
    store.analyzer = Analyzer(AnalyzerConfig())
    assert store.filter_expr(["aspect in (medication list, HPI)"]) == \
        'aspect in ["medications", "history of present illness"]'


def test_aspect_filter_no_passage_has_names_the_index_aspects(notes_index):
    from capr.store.embedded import EmbeddedStore

    EmbeddedStore.of(notes_index).check_aspect("symptoms")  # what `-a symptoms` is validated with: accepted
    with pytest.raises(QueryError) as e:  # the notes have no symptoms section: said, with what they have
        search(notes_index, "IgA nephropathy", k=3, retriever="bm25", filters={"aspect": "symptoms"})
    assert "no passage has aspect='symptoms'; this index's aspects: " in str(e.value)
    assert "history of present illness" in str(e.value) and "medications" in str(e.value)


# ------------------------------------------------------------------ a plain-text note's title line
CLINIC_NOTE = ("Cardiology clinic note\n\n"
               "HISTORY OF PRESENT ILLNESS:\nPalpitations for two weeks; ECG shows atrial fibrillation.\n\n"
               "MEDICATIONS:\nApixaban 5 mg twice daily. Metoprolol 25 mg daily.\n\n"
               "PLAN:\nRecheck in a month.\n")


@pytest.mark.parametrize("text,title", [
    (CLINIC_NOTE, "Cardiology clinic note"),
    ("Discharge summary – gout\nHOSPITAL COURSE:\nColchicine was started.\n", "Discharge summary – gout"),
    ("# Markdown title\n\nPLAN: rest.\n", "Markdown title"),
    ("MEDICATIONS:\nAspirin 81 mg.\n", "note x"),  # a heading, not a title
    ("MEDICATIONS\nAspirin 81 mg.\n", "note x"),
    ("Seen today for follow-up of her atrial fibrillation.\nShe is well.\n", "note x"),  # a sentence
    ("Date: 2150-01-02\nPLAN: rest.\n", "note x"),  # a field
    ("- aspirin 81 mg\n- metoprolol\n", "note x"),  # a list
    ("Cardiology clinic note\n", "note x"),  # nothing after it: the note itself
    ("A very long first line that goes on and on and on with far more words than any title has\nMore.\n", "note x"),
])
def test_short_first_line_is_the_title(tmp_path, text, title):
    (tmp_path / "note_x.txt").write_text(text)
    assert [d.title for d in read_documents(tmp_path)] == [title]


def test_title_line_is_no_passage_and_does_not_outrank_sections(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "note01.txt").write_text(CLINIC_NOTE)
    (notes / "note02.txt").write_text("Renal clinic note\n\nMEDICATIONS:\nLisinopril 10 mg daily.\n")
    (notes / "note03.txt").write_text("Asthma review\n\nMEDICATIONS:\nSalbutamol as needed.\n")
    from capr.corpus.segment import segment

    docs = list(read_documents(notes))
    assert docs[0].title == "Cardiology clinic note"
    assert [p.heading for p in segment(docs[0])] == ["HISTORY OF PRESENT ILLNESS", "MEDICATIONS", "PLAN"]
    index = build_index(iter(docs), tmp_path / "idx")
    hits = search(index, "cardiology clinic note medications", k=5, retriever="bm25")
    assert (hits[0].passage.doc_id, hits[0].passage.aspect) == ("note01", "medications")
    assert all(h.passage.aspect for h in hits)


def test_deeply_nested_labels_and_dev_set_lines(tmp_path):
    from capr.adapt.checks import jsonl_check
    from capr.labels.generate import read_labels

    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP + "\n")
    with pytest.raises(BadInputError, match="line 1 is not a label record: invalid JSON: nested too deeply"):
        list(read_labels(deep))
    with pytest.raises(BadInputError, match=r"\[line 1\]: expected .*nested too deeply"):
        jsonl_check(deep)


def test_a_document_of_nothing_but_its_title_keeps_it():
    """The title line is dropped as a passage only where other sections follow: a document whose whole text is its
    title is still a passage (it would otherwise be refused as empty)."""
    from capr.corpus.segment import segment
    from capr.records import Document

    only = segment(Document("d", "Purple rash since 1997", "Purple rash since 1997"))
    assert [p.text for p in only] == ["Purple rash since 1997"]


def test_a_range_bound_is_checked_against_the_whole_index_not_one_segment(tmp_path):
    """`grade>=II` on a column of words and numbers compares as strings, as a rebuild does, also when one added
    batch (a segment of its own) holds only numbers: no "grade holds numbers" error from that segment."""
    from capr.filters import parse_filters
    from capr.index import IndexWriter
    from capr.records import Document

    first = [Document(f"d{i}", "Tumour", "PLAN:\nResection.", {"grade": g}) for i, g in enumerate(["II", "III", "IV"])]
    added = [Document(f"a{i}", "Tumour", "PLAN:\nResection.", {"grade": g}) for i, g in enumerate([1, 2])]
    root = tmp_path / "idx"
    build_index(first, root)
    with IndexWriter(root, mode="update", merge_policy=None) as w:
        for d in added:
            w.add(d)
    fresh = build_index(first + added, tmp_path / "fresh")
    for clauses in (["grade>=II"], ["grade<III"]):
        got = sorted(h.passage.doc_id for h in search(load_index(root), "resection", k=10, filters=parse_filters(clauses)))
        assert got == sorted(h.passage.doc_id for h in search(fresh, "resection", k=10, filters=parse_filters(clauses)))
    assert sorted(h.passage.doc_id for h in search(load_index(root), "resection", k=10,
                                                   filters=parse_filters(["grade>=II"]))) == ["d0", "d1", "d2"]
    only_numbers = build_index(added, tmp_path / "numbers")  # where the column holds only numbers, still refused
    with pytest.raises(QueryError, match="grade holds numbers and 'II' is not one"):
        search(only_numbers, "resection", filters=parse_filters(["grade>=II"]))
