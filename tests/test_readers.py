"""Every reader on a real sample from ../shared/data, plus malformed input."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from capr.corpus import Format, ReadReport, detect_format, read_documents
from capr.corpus.beir import read_beir_qrels, read_beir_queries
from capr.corpus.medquad import read_medquad_cdv_queries
from capr.eval.runs import read_qrels, read_run, write_qrels, write_run
from capr.errors import BadInputError
from capr.records import Qrel, Run, ScoredPassage

from conftest import need_data


def _cdv_rows(n: int) -> list[dict]:
    path = need_data("medquad_cdv_test", "passages.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in itertools.islice(fh, n)]


def test_medquad_tarball_streams_real_documents():
    tar = need_data("medquad", "MedQuAD.tar.gz")
    report = ReadReport()
    docs = list(itertools.islice(read_documents(tar, report=report), 40))
    assert len(docs) == 40
    for d in docs:
        assert d.title and d.sections
        for s in d.sections:
            assert s.section_id.startswith(d.metadata["source"] + "_")
            assert d.text[s.start:s.end].strip()
            assert s.aspect  # MedQuAD qtype, normalized


def test_medquad_all_schema_variants_are_read(tmp_path):
    tar = need_data("medquad", "MedQuAD.tar.gz")
    import tarfile

    wanted = {"MedQuAD/6_NINDS_QA/0000007.xml", "MedQuAD/9_CDC_QA/0000397.xml", "MedQuAD/1_CancerGov_QA/0000001_1.xml"}
    with tarfile.open(tar) as t:
        for m in t:
            if m.name in wanted:
                (tmp_path / Path(m.name).name).write_bytes(t.extractfile(m).read())
    docs = {d.doc_id: d for d in read_documents(tmp_path, Format.medquad)}
    assert set(docs) == {"NINDS_0000007", "CDC_0000397", "CancerGov_0000001_1"}
    assert docs["NINDS_0000007"].title == "Holmes-Adie"
    assert docs["CDC_0000397"].title == "Parasites - Taeniasis"


def test_medquad_invalid_xml_names_the_file(tmp_path):
    bad = tmp_path / "broken.xml"
    bad.write_text("<Document id='1'><Focus>x</Focus><QAPairs><QAPair>")
    with pytest.raises(BadInputError, match=r"broken\.xml.*invalid XML"):
        list(read_documents(bad, Format.medquad))


def test_medquad_cdv_test_split_counts():
    path = need_data("medquad_cdv_test")
    docs = list(read_documents(path))
    assert len(docs) == 1111
    assert sum(len(d.sections) for d in docs) == 3762
    queries, qrels, _ = read_medquad_cdv_queries(path)
    assert len(queries) == 3293 and len({q.pid for q in qrels}) > 3000
    q = queries[0]
    assert q.entity and q.aspect and q.text


def test_mtsamples_restores_flattened_headings():
    path = need_data("mtsamples", "mtsamples.csv.gz")
    report = ReadReport()
    docs = list(itertools.islice(read_documents(path, report=report), 30))
    first = docs[0]
    assert first.doc_id == "mtsamples-1"
    assert "\nMEDICATIONS: Her only medication" in first.text
    assert first.metadata["specialty"] == "Allergy / Immunology"
    from capr.corpus.segment import detect_sections

    aspects = [s.aspect for s in detect_sections(first.text)]
    assert aspects[:3] == ["history of present illness", "medications", "allergies"]
    assert "assessment" in aspects and "plan" in aspects


def test_mtsamples_whole_file_dedupes_and_ignores_empty():
    path = need_data("mtsamples", "mtsamples.csv.gz")
    report = ReadReport()
    n = sum(1 for _ in read_documents(path, report=report))
    assert n == 2357  # 2,358 distinct transcriptions minus the empty one
    assert report.empty == 33 and report.duplicates > 2000


def test_mts_dialog_sections_have_gold_aspects():
    path = need_data("mts_dialog")
    docs = list(read_documents(path))
    assert len(docs) == 1701
    by_header = {d.metadata["section_header"]: d.sections[0].aspect for d in docs}
    assert by_header["GENHX"] == "history of present illness"
    assert by_header["PASTMEDICALHX"] == "past medical history"
    assert by_header["ROS"] == "review of systems"


def test_text_directory_and_jsonl_on_real_passages(tmp_path):
    rows = _cdv_rows(25)
    txt = tmp_path / "txt"
    txt.mkdir()
    for r in rows:
        (txt / f"{r['pid']}.txt").write_text(f"# {r['doc_title']}\n\n{r['text']}\n", encoding="utf-8")
    docs = list(read_documents(txt))
    assert detect_format(txt) is Format.text
    assert {d.doc_id: d.title for d in docs} == {r["pid"]: r["doc_title"] for r in rows}

    jl = tmp_path / "docs.jsonl"
    jl.write_text("".join(json.dumps({"id": r["pid"], "title": r["doc_title"], "text": r["text"], "url": r["url"]}) + "\n" for r in rows))
    docs = list(read_documents(jl))
    assert detect_format(jl) is Format.jsonl
    assert [d.doc_id for d in docs] == [r["pid"] for r in rows]
    assert docs[0].metadata["url"] == rows[0]["url"]


def test_jsonl_bad_lines_fail_or_are_skipped_with_location(tmp_path):
    jl = tmp_path / "docs.jsonl"
    jl.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": \n{"id": "c"}\n{"id": "d", "text": "also fine"}\n')
    with pytest.raises(BadInputError, match=r"docs\.jsonl \[line 2\]: invalid JSON"):
        list(read_documents(jl))
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(jl, report=report)] == ["a", "d"]
    assert [e.record for e in report.skipped] == ["line 2", "line 3"]
    assert "missing string field 'text'" in str(report.skipped[1])


def test_documents_as_one_json_array_or_json_lines_under_a_json_name(tmp_path):
    """Exports often write documents as one JSON array (docs.json), or JSON lines under a .json name: both read as the
    JSONL file of the same documents, alone, gzip'd or in a folder; a bad element is named by its place in the array."""
    docs = [{"id": "a", "title": "Gout", "text": "Gout is treated with colchicine.", "ward": "W1"},
            {"id": "b", "text": "Asthma is treated with inhalers."}]
    jl = tmp_path / "docs.jsonl"
    jl.write_text("".join(json.dumps(d) + "\n" for d in docs))
    array = tmp_path / "array.json"
    array.write_text(json.dumps(docs, indent=2))
    lines = tmp_path / "lines.json"
    lines.write_text(jl.read_text())
    packed = tmp_path / "array.json.gz"
    packed.write_bytes(gzip.compress(array.read_bytes()))
    expected = list(read_documents(jl))
    for source in (array, lines, packed):
        assert detect_format(source) is Format.jsonl
        assert list(read_documents(source)) == expected
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "part1.json").write_text(json.dumps(docs[:1]))
    (folder / "part2.json").write_text(json.dumps(docs[1]) + "\n")
    assert detect_format(folder) is Format.jsonl and list(read_documents(folder)) == expected

    array.write_text(json.dumps([docs[0], {"text": "no id"}, docs[1]]))
    with pytest.raises(BadInputError, match=r"array\.json \[record 2\]: missing document id"):
        list(read_documents(array))
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(array, report=report)] == ["a", "b"]
    array.write_text('[{"id": "a", "text": "x"},\n {"id": "b" "text": "y"}]')
    with pytest.raises(BadInputError, match=r"array\.json: invalid JSON: .*line 2"):
        list(read_documents(array))
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(docs[0], indent=2))
    with pytest.raises(BadInputError, match="an array of documents or one document per line"):
        detect_format(pretty)


def test_an_array_of_documents_wrapped_in_an_object_as_exports_write_it(tmp_path):
    """{"data": [...]} (and documents, records, results, …): the array under an object's one wrapping key is read as
    the bare array; a queries file wrapped so ({"queries": [...]}) too. An object whose first key wraps nothing stays
    refused, and one with two wrapping arrays says which keys it has."""
    from capr.corpus.queries import read_queries

    docs = [{"id": "a", "title": "Gout", "text": "Gout is treated with colchicine."},
            {"id": "b", "text": "Asthma is treated with inhalers."}]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(docs))
    expected = list(read_documents(bare))
    for key, text in (("data", json.dumps({"data": docs}, indent=2)), ("documents", json.dumps({"documents": docs})),
                      ("records", json.dumps({"records": docs, "exported": "2026-11-26"}, indent=4))):
        wrapped = tmp_path / f"{key}.json"
        wrapped.write_text(text)
        assert detect_format(wrapped) is Format.jsonl
        assert list(read_documents(wrapped)) == expected
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"data": docs, "results": docs}))
    with pytest.raises(BadInputError, match=r"both\.json: expected a JSON array of documents, got dict .*has data, results"):
        list(read_documents(both))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"meta": {"n": 2}, "data": docs}, indent=2))
    with pytest.raises(BadInputError, match="an array of documents or one document per line"):
        detect_format(other)
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps({"queries": [{"_id": "q1", "text": "gout treatment"}]}, indent=2))
    assert [(q.qid, q.text) for q in read_queries(questions)] == [("q1", "gout treatment")]


def test_a_tsv_of_documents_reads_as_the_csv_of_the_same_documents(tmp_path):
    rows = [("id", "title", "text", "ward"), ("a", "Gout", "Gout is treated with colchicine, and rest.", "W1"),
            ("b", "", "Asthma is treated with inhalers.", "")]
    import csv

    with open(tmp_path / "docs.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    with open(tmp_path / "docs.tsv", "w", newline="") as fh:
        csv.writer(fh, delimiter="\t").writerows(rows)
    (tmp_path / "docs.tsv.gz").write_bytes(gzip.compress((tmp_path / "docs.tsv").read_bytes()))
    expected = list(read_documents(tmp_path / "docs.csv"))
    assert [d.metadata for d in expected] == [{"ward": "W1"}, {}]
    for name in ("docs.tsv", "docs.tsv.gz"):
        assert detect_format(tmp_path / name) is Format.csv
        assert list(read_documents(tmp_path / name)) == expected
    (tmp_path / "collection.tsv").write_text("7\tGout is treated with colchicine.\n")  # headerless (MS MARCO's)
    with pytest.raises(BadInputError, match="collection.tsv: TSV columns fit no reader: a TSV of documents has a "
                                            "header line naming columns text and an id"):
        detect_format(tmp_path / "collection.tsv")


def test_beir_layout_round_trip_on_real_sample(tmp_path):
    rows = _cdv_rows(30)
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": r["pid"], "title": r["doc_title"], "text": r["text"]}) + "\n" for r in rows))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"{r['entity']} {r['aspect']}"}) + "\n" for i, r in enumerate(rows)))
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\t{r['pid']}\t1\n" for i, r in enumerate(rows)))
    assert detect_format(tmp_path) is Format.beir
    docs = list(read_documents(tmp_path))
    assert [d.doc_id for d in docs] == [r["pid"] for r in rows]
    assert len(list(read_beir_queries(tmp_path))) == 30
    assert read_beir_qrels(tmp_path)[0] == Qrel("q0", rows[0]["pid"], 1)


def test_trec_qrels_and_run_round_trip(tmp_path):
    path = need_data("medquad_cdv_test")
    _, qrels, _ = read_medquad_cdv_queries(path)
    write_qrels(tmp_path / "qrels.txt", qrels)
    assert read_qrels(tmp_path / "qrels.txt") == qrels
    run = Run("bm25", {"q1": [ScoredPassage("p2", 3.5, 1), ScoredPassage("p1", 1.25, 2)]})
    write_run(tmp_path / "run.trec", run)
    back = read_run(tmp_path / "run.trec")
    assert back.name == "bm25" and [(h.pid, h.rank, h.score) for h in back.results["q1"]] == [("p2", 1, 3.5), ("p1", 2, 1.25)]
    (tmp_path / "bad.trec").write_text("q1 Q0 p1 1\n")
    with pytest.raises(BadInputError, match=r"bad\.trec \[line 1\]: run lines have 6 columns"):
        read_run(tmp_path / "bad.trec")


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("empty.txt", b"", "file is empty"),
        ("blob.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR", "binary file"),
        ("latin1.txt", "Patient mit Müdigkeit".encode("latin-1"), "not UTF-8"),
    ],
)
def test_bad_files_get_clear_errors_and_can_be_skipped(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    (tmp_path / "good.txt").write_text("FINDINGS: normal.")
    with pytest.raises(BadInputError, match=message) as e:
        list(read_documents(tmp_path, Format.text))
    assert name in str(e.value)
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(tmp_path, Format.text, report)] == ["good"]
    assert len(report.skipped) == 1


def test_compressed_files_no_reader_opens_are_said_to_be_compressed(tmp_path):
    import bz2
    import lzma
    import zipfile

    line = b'{"doc_id": "d1", "text": "PLAN: rest."}\n'
    (tmp_path / "docs.jsonl.bz2").write_bytes(bz2.compress(line))
    (tmp_path / "docs.jsonl.xz").write_bytes(lzma.compress(line))
    with zipfile.ZipFile(tmp_path / "notes.zip", "w") as z:
        z.writestr("n.txt", "PLAN: rest.")
    (tmp_path / "note.rtf.gz").write_bytes(gzip.compress(rb"{\\rtf1 PLAN: rest.}"))
    for name, what in [("docs.jsonl.bz2", "a bzip2-compressed file"), ("docs.jsonl.xz", "an xz-compressed file"),
                       ("notes.zip", "a zip-compressed file"), ("note.rtf.gz", "a gzip-compressed file of a kind")]:
        with pytest.raises(BadInputError, match=f"{name}: {what}.*decompress it"):
            list(read_documents(tmp_path / name))
    # read as asked, the data is said to be compressed (not "binary"), and gzip under another name to want .gz
    with pytest.raises(BadInputError, match=r"docs\.jsonl\.bz2: bzip2-compressed data, not text: decompress it"):
        list(read_documents(tmp_path / "docs.jsonl.bz2", Format.jsonl))
    (tmp_path / "gz.jsonl").write_bytes(gzip.compress(line))
    with pytest.raises(BadInputError, match=r"gz\.jsonl: gzip-compressed data under a name that does not end in \.gz"):
        list(read_documents(tmp_path / "gz.jsonl"))
    (tmp_path / "gz.jsonl").unlink()
    # in a folder: one bad record naming it; the other files are read with --skip-bad
    (tmp_path / "good.txt").write_text("PLAN: rest.")
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(tmp_path, report=report)] == ["good"]
    assert any("notes.zip: a zip-compressed file" in str(e) for e in report.skipped)


def test_unknown_format_and_missing_source(tmp_path):
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    with pytest.raises(BadInputError, match="cannot detect the format"):
        list(read_documents(tmp_path / "x.parquet"))
    with pytest.raises(BadInputError, match="unknown format 'rtf'"):
        list(read_documents(tmp_path, "rtf"))
    with pytest.raises(BadInputError, match="no such file"):
        list(read_documents(tmp_path / "nope.jsonl"))
