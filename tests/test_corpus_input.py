"""Input-reading defects: line endings, byte-order marks, sources with no documents, folders of several
formats, duplicate ids named by file and line, declared XML encodings, and failed writes leaving nothing."""

from __future__ import annotations

import base64
import codecs
import gzip
import json
from pathlib import Path

import pytest

from capr import load_index
from capr.corpus import Format, ReadReport, detect_format, normalize_newlines, read_documents
from capr.corpus.segment import segment
from capr.errors import BadInputError
from capr.records import Document, Section
from capr.search import search

from conftest import capr_cli

FIXTURES = Path(__file__).parent / "fixtures" / "ehr"
NOTE = "MEDICATIONS:\nWarfarin 5 mg daily.\n\nFAMILY HISTORY:\nFather had DVT.\n"
CCDA_MIN = """<?xml version="1.0" encoding="{enc}"?>
<ClinicalDocument xmlns="urn:hl7-org:v3">
  <id root="2.16.840.1.113883.19.5" extension="{doc_id}"/>
  <code code="18842-5" codeSystem="2.16.840.1.113883.6.1" displayName="Discharge summary"/>
  <title>Discharge Summary</title>
  <component><structuredBody>
    <component><section>
      <code code="10160-0" codeSystem="2.16.840.1.113883.6.1"/>
      <title>Current Outpatient Prescriptions</title>
      <text><paragraph>{body}</paragraph></text>
    </section></component>
  </structuredBody></component>
</ClinicalDocument>
"""
DOCREF = {"resourceType": "DocumentReference", "id": "dr1", "status": "current", "subject": {"reference": "Patient/p1"},
          "type": {"text": "Discharge summary"},
          "content": [{"attachment": {"contentType": "text/plain",
                                      "data": base64.b64encode(b"HOSPITAL COURSE:\nTreated for pneumonia.").decode()}}]}


def _one_line_error(proc, *needles: str) -> None:
    """A failed command: non-zero exit, the reason on stderr in one line, no Python traceback."""
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)


def _sections(doc: Document) -> list[tuple[str | None, str]]:
    return [(p.aspect, p.text) for p in segment(doc)]


def _generation(index_dir: Path) -> str:
    return (index_dir / "CURRENT").read_text().strip()


@pytest.fixture
def base_index(tmp_path) -> Path:
    src = tmp_path / "base.jsonl"
    src.write_text(json.dumps({"doc_id": "kept", "text": "PLAN: zorbifen for the wheeze."}) + "\n")
    out = tmp_path / "idx"
    capr_cli("index", "--lexical-only", str(src), "--out", str(out))
    return out


# ------------------------------------------------------------------ 1. CRLF and CR line endings
@pytest.mark.parametrize("eol", ["\r\n", "\r"])
def test_crlf_text_note_segments_like_lf(tmp_path, eol):
    (tmp_path / "lf").mkdir()
    (tmp_path / "crlf").mkdir()
    (tmp_path / "lf" / "note.txt").write_bytes(NOTE.encode())
    (tmp_path / "crlf" / "note.txt").write_bytes(NOTE.replace("\n", eol).encode())
    [lf] = read_documents(tmp_path / "lf")
    [crlf] = read_documents(tmp_path / "crlf")
    assert "\r" not in crlf.text and crlf.text == lf.text
    assert _sections(crlf) == _sections(lf) == [("medications", "MEDICATIONS:\nWarfarin 5 mg daily."),
                                                ("family history", "FAMILY HISTORY:\nFather had DVT.")]


@pytest.mark.parametrize("first", ["Cardiology clinic note", "# Cardiology clinic note"])
@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_title_from_the_first_line_whatever_the_line_ends(tmp_path, eol, first):
    (tmp_path / "n.txt").write_bytes((first + "\n" + NOTE).replace("\n", eol).encode())
    [doc] = read_documents(tmp_path / "n.txt")
    assert doc.title == "Cardiology clinic note"


def test_crlf_documents_given_directly_to_the_index_and_the_service(tmp_path):
    """Documents that never pass read_documents (the Python IndexWriter, the service's POST /documents) are
    segmented as the same note with LF line ends."""
    from fastapi.testclient import TestClient

    from capr.index import IndexWriter
    from capr.service import ServiceConfig, create_app

    root = tmp_path / "idx"
    with IndexWriter(root) as w:
        w.add(Document(doc_id="n1", title="Note", text=NOTE.replace("\n", "\r\n")))
    index = load_index(root)
    assert sorted(index.passage_by_pid(p).aspect for p in index.pid_rows()) == ["family history", "medications"]
    token = "t" * 32
    client = TestClient(create_app(root, ServiceConfig(tokens=(token,))))
    r = client.post("/documents", json={"doc_id": "n2", "title": "Other", "text": NOTE.replace("\n", "\r")},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text
    got = client.get("/documents/n2").json()
    assert "\r" not in got["text"]
    hits = client.post("/search", json={"text": "warfarin", "k": 5}).json()["results"]
    assert {h["doc_id"]: h["aspect"] for h in hits if h["doc_id"] == "n2"} == {"n2": "medications"}


def test_crlf_in_jsonl_text_and_csv_cells(tmp_path):
    jl = tmp_path / "notes.jsonl"
    jl.write_bytes((json.dumps({"doc_id": "n1", "title": "T\r\n", "text": NOTE.replace("\n", "\r\n")}) + "\r\n").encode())
    [doc] = read_documents(jl)
    assert doc.text == NOTE and doc.title == "T\n"
    csv = tmp_path / "mtsamples.csv"
    cell = NOTE.replace("\n", "\r\n")
    csv.write_bytes(f',description,medical_specialty,sample_name,transcription,keywords\r\n0,d,Cardiology,S,"{cell}",kw\r\n'.encode())
    [doc] = read_documents(csv)
    assert "\r" not in doc.text and [a for a, _ in _sections(doc)] == ["medications", "family history"]


def test_csv_and_json_lines_with_lone_cr_line_ends_are_detected(tmp_path):
    """Excel for Mac's "CSV (Macintosh)" ends lines with \r alone: the format sniff must see the header as a line."""
    csv = tmp_path / "docs.csv"
    csv.write_bytes(b'id,title,text\rc1,T,"MEDICATIONS:\rWarfarin."\rc2,T2,plain\r')
    assert detect_format(csv) is Format.csv
    assert [(d.doc_id, d.text) for d in read_documents(csv)] == [("c1", "MEDICATIONS:\nWarfarin."), ("c2", "plain")]
    tsv = tmp_path / "docs.tsv"
    tsv.write_bytes(b"id\ttext\rt1\tplain\r")
    assert [d.doc_id for d in read_documents(tsv)] == ["t1"]
    lines = tmp_path / "docs.json"
    lines.write_bytes(b'{"id": "a", "text": "PLAN: x"}\r{"id": "b", "text": "PLAN: y"}\r')
    assert [d.doc_id for d in read_documents(lines)] == ["a", "b"]


def test_newline_normalisation_moves_reader_sections_with_the_text():
    text = "Q1 answer:\r\nline one\r\nline two\r\n\r\nQ2 answer\rlone cr"
    a, b = text.index("Q1"), text.index("Q2")
    doc = Document("d", "t", text, sections=[Section("Q1", "treatment", a, text.index("\r\n\r\n")),
                                             Section("Q2", "symptoms", b, len(text))])
    expected = [text[s.start:s.end].replace("\r\n", "\n").replace("\r", "\n") for s in doc.sections]
    normalize_newlines(doc)
    assert "\r" not in doc.text
    assert [doc.text[s.start:s.end] for s in doc.sections] == expected


def test_crlf_folder_cli_gives_sections(tmp_path):
    src = tmp_path / "notes"
    src.mkdir()
    (src / "crlf.txt").write_bytes(NOTE.replace("\n", "\r\n").encode())
    capr_cli("index", str(src), "--out", str(tmp_path / "idx"), "--lexical-only")
    hits = search(load_index(tmp_path / "idx"), "warfarin")
    assert [(h.passage.aspect, h.passage.text) for h in hits][:1] == [("medications", "MEDICATIONS:\nWarfarin 5 mg daily.")]


# ------------------------------------------------------------------ 4. UTF-8 byte-order marks
def test_bom_jsonl_and_text_title(tmp_path):
    jl = tmp_path / "bom.jsonl"
    jl.write_bytes(codecs.BOM_UTF8 + b'{"doc_id": "bom1", "text": "SYMPTOMS:\\nItchy rash."}\n')
    [doc] = read_documents(jl)
    assert doc.doc_id == "bom1"
    gz = tmp_path / "bom.jsonl.gz"
    gz.write_bytes(gzip.compress(jl.read_bytes()))
    assert [d.doc_id for d in read_documents(gz)] == ["bom1"]
    txt = tmp_path / "notes"
    txt.mkdir()
    (txt / "a.txt").write_bytes(codecs.BOM_UTF8 + "# BOM title\r\n\r\nPLAN:\r\nRest.\r\n".encode())
    [doc] = read_documents(txt)
    assert doc.title == "BOM title" and not doc.text.startswith("\ufeff")


def test_bom_csv_header_and_fhir_json(tmp_path):
    mimic = tmp_path / "NOTEEVENTS.csv"
    mimic.write_bytes(codecs.BOM_UTF8 + (FIXTURES / "NOTEEVENTS.csv").read_bytes())
    assert detect_format(mimic) is Format.mimic3
    assert len(list(read_documents(mimic))) == len(list(read_documents(FIXTURES / "NOTEEVENTS.csv")))
    fhir = tmp_path / "docref.json"
    fhir.write_bytes(codecs.BOM_UTF8 + json.dumps(DOCREF).encode())
    assert detect_format(fhir) is Format.fhir
    assert [d.doc_id for d in read_documents(fhir)] == [d.doc_id for d in read_documents(_write(tmp_path / "plain.json", DOCREF))]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_with_a_byte_order_mark_is_read_in_every_text_format(tmp_path, encoding):
    """Excel's "Unicode text" and Notepad's "Unicode" save UTF-16 with a byte-order mark."""
    def utf16(name: str, text: str) -> Path:
        data = text.encode("utf-16") if encoding == "utf-16" else codecs.BOM_UTF16_BE + text.encode("utf-16-be")
        (tmp_path / name).write_bytes(data)
        return tmp_path / name

    note = utf16("note.txt", "Café clinic note\r\n" + NOTE.replace("\n", "\r\n"))
    [doc] = read_documents(note)
    assert (doc.doc_id, doc.title, doc.text) == ("note", "Café clinic note", "Café clinic note\n" + NOTE)
    jl = utf16("docs.jsonl", json.dumps({"doc_id": "j1", "text": "PLAN:\nRecheck INR in één week."}, ensure_ascii=False) + "\n")
    assert [(d.doc_id, d.text) for d in read_documents(jl)] == [("j1", "PLAN:\nRecheck INR in één week.")]
    csv = utf16("docs.csv", 'id,title,text\r\nc1,Tïtle,"MEDICATIONS:\r\nWarfarin é."\r\n')
    assert [(d.doc_id, d.title, d.text) for d in read_documents(csv)] == [("c1", "Tïtle", "MEDICATIONS:\nWarfarin é.")]
    fhir = utf16("docref.json", json.dumps(DOCREF))
    assert detect_format(fhir) is Format.fhir and len(list(read_documents(fhir))) == 1
    ccda = utf16("cda.xml", CCDA_MIN.format(enc="UTF-16", doc_id="u16", body="Warfarin é"))
    assert [d.text for d in read_documents(ccda)] == ["Current Outpatient Prescriptions\nWarfarin é"]
    gz = tmp_path / "docs.jsonl.gz"
    gz.write_bytes(gzip.compress(jl.read_bytes()))
    assert [d.doc_id for d in read_documents(gz)] == ["j1"]


@pytest.mark.parametrize("mark", [codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE])
def test_utf8_behind_a_stray_utf16_mark_is_read_as_utf8_not_garbage(tmp_path, mark):
    """A tool that prepends a UTF-16 byte-order mark to UTF-8 text: read as UTF-16 the note was garbage ("䥈呓剏...")
    and indexed so. Its text has no NUL byte and no whitespace read that way: it is the UTF-8 after the mark."""
    def stray(name: str, text: str) -> Path:
        data = text.encode("utf-8")
        (tmp_path / name).write_bytes(mark + data + (b"\n" if len(data) % 2 else b""))
        return tmp_path / name

    [doc] = read_documents(stray("note.txt", "Chest pain\n\n" + NOTE))
    assert doc.text.rstrip("\n") == "Chest pain\n\n" + NOTE.rstrip("\n") and doc.title == "Chest pain"
    csv = stray("docs.csv", "id,text\nc1,Warfarin é daily.\n")
    assert [(d.doc_id, d.text) for d in read_documents(csv)] == [("c1", "Warfarin é daily.")]
    page = stray("page.html", "<html><body><h2>Plan</h2><p>Warfarin é daily.</p></body></html>")
    assert "Warfarin é daily." in next(iter(read_documents(page))).text


def test_utf16_that_does_not_decode_names_the_file_and_offset(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes("PLAN:\nRest.\n".encode("utf-16") + b"\x00\xd8A\x00")  # a lone surrogate
    with pytest.raises(BadInputError, match=r"bad\.txt: not UTF-16 text \(invalid byte at offset 26\)"):
        list(read_documents(bad))


@pytest.mark.parametrize("name", ["note.txt", "docs.jsonl", "docs.csv", "docs.tsv"])
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_refused_with_a_hint(tmp_path, name, encoding):
    """UTF-16 without a byte-order mark (some exporters write it) has a NUL in every other byte: it is still refused,
    but the one line says what it likely is and what to do (a CSV was "CSV columns fit no reader"); binary data with
    NULs here and there gets no such hint."""
    text = {"note.txt": "Chest pain\n\nThe patient reports chest pain on exertion.\n",
            "docs.jsonl": json.dumps({"id": "a", "text": "chest pain"}) + "\n",
            "docs.csv": "id,text\na,chest pain\n", "docs.tsv": "id\ttext\na\tchest pain\n"}[name]
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    message = f"{path}: binary file (contains NUL bytes), expected text (UTF-16 without a byte-order mark? save it as UTF-8)"
    with pytest.raises(BadInputError) as e:
        list(read_documents(path))
    assert str(e.value) == message
    proc = capr_cli("index", "--lexical-only", str(path), "--out", str(tmp_path / "idx"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and message in proc.stderr
    blob = tmp_path / "blob.txt"
    blob.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    with pytest.raises(BadInputError) as e:
        list(read_documents(blob))
    assert str(e.value) == f"{blob}: binary file (contains NUL bytes), expected text"


def _write(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj))
    return path


# ------------------------------------------------------------------ 2. a source with no documents
@pytest.mark.parametrize("records,flags,why", [
    ([{"doc_id": "e1", "text": ""}, {"doc_id": "e2", "text": "  \n"}], [], "2 empty record(s) ignored"),
    ([{"doc_id": "b1"}, {"id": ["x"], "text": "t"}], ["--skip-bad"], "2 bad record(s) skipped; the first: "),
])
def test_no_documents_keeps_the_existing_index(tmp_path, base_index, records, flags, why):
    src = tmp_path / "nothing.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = _generation(base_index)
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(base_index), "--replace", *flags, check=False)
    _one_line_error(proc, f"{src}: no documents found (", why)
    assert _generation(base_index) == before and load_index(base_index).counts["documents"] == 1
    proc = capr_cli("add", str(base_index), str(src), *flags, check=False)  # nothing to add: said, and nothing changes
    _one_line_error(proc, f"{src}: no documents found (", why)
    assert _generation(base_index) == before and load_index(base_index).counts["documents"] == 1


def test_fhir_file_without_document_resources(tmp_path, base_index):
    src = _write(tmp_path / "patient.json", {"resourceType": "Patient", "id": "p1"})
    before = _generation(base_index)
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(base_index), "--replace", check=False)
    _one_line_error(proc, "no documents found (no DocumentReference, Composition or DiagnosticReport resource)")
    assert _generation(base_index) == before
    assert list(read_documents(src)) == []  # the library reads nothing; asked to require documents, it says why
    with pytest.raises(BadInputError, match="no documents found"):
        list(read_documents(src, require_documents=True))


def test_empty_folder_and_empty_file(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInputError, match=r"empty: no documents found \(the folder holds no files\)"):
        list(read_documents(tmp_path / "empty", require_documents=True))
    (tmp_path / "blank.jsonl").write_text("\n\n")  # said as it is opened
    with pytest.raises(BadInputError, match=r"blank\.jsonl: file contains only whitespace"):
        list(read_documents(tmp_path / "blank.jsonl"))
    (tmp_path / "blank.jsonl.gz").write_bytes(gzip.compress(b"\n\n"))  # (a compressed file is not read ahead)
    with pytest.raises(BadInputError, match=r"blank\.jsonl\.gz: no documents found \(the source holds no records\)"):
        list(read_documents(tmp_path / "blank.jsonl.gz", require_documents=True))


@pytest.mark.parametrize("name", ["empty.csv", "empty.tsv", "empty.json", "empty.jsonl", "empty.xml", "empty.txt"])
def test_empty_file_is_said_to_be_empty_alone_or_in_a_folder(tmp_path, name):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / name).write_bytes(b"")
    with pytest.raises(BadInputError, match=rf"{name}: file is empty$"):
        list(read_documents(tmp_path / "src" / name))
    (tmp_path / "src" / "note.txt").write_text("PLAN: rest.")
    report = ReadReport(skip_bad=True)
    assert [d.doc_id for d in read_documents(tmp_path / "src", report=report)] == ["note"]
    assert [str(e) for e in report.skipped] == [f"{tmp_path / 'src' / name}: file is empty"]


# ------------------------------------------------------------------ 3. folders of several formats
def _notes(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "note1.txt").write_text("ASSESSMENT:\nGout flare.\n\nPLAN:\nColchicine.\n")
    (folder / "note2.md").write_text("# Asthma\n\nTREATMENT:\nInhaled steroids.\n")
    return folder


def test_folder_of_notes_and_fhir_reads_both(tmp_path):
    src = _notes(tmp_path / "src")
    _write(src / "docref.json", DOCREF)
    report = ReadReport()
    assert sorted(d.doc_id for d in read_documents(src, report=report)) == ["DocumentReference-dr1", "note1", "note2"]
    assert report.summary() == "nothing skipped"
    assert detect_format(src) is Format.mixed


def test_folder_of_notes_and_jsonl_reads_both(tmp_path):
    src = _notes(tmp_path / "src")
    (src / "more.jsonl").write_text(json.dumps({"doc_id": "j1", "text": "PLAN: rest."}) + "\n")
    assert sorted(d.doc_id for d in read_documents(src)) == ["j1", "note1", "note2"]


@pytest.mark.parametrize("name,content,why", [
    ("empty.jsonl", b"", "file is empty"),
    ("blob.jsonl", b"\x00\x01\x02", "binary file"),
    ("bulk.ndjson", b"\x00\x01\x02", "binary file"),
    ("excel.csv", "id,text\nc1,Patient très fatigué, depuis une semaine et sans fièvre\n".encode("cp1252"),
     "not UTF-8 text (invalid byte at offset 21)"),
    ("short.csv", "id,text\nc1,fatigué\n".encode("cp1252"), "not UTF-8 text (invalid byte at offset 17)"),
])
def test_folder_file_refused_whole_is_skipped_with_skip_bad(tmp_path, base_index, name, content, why):
    src = _notes(tmp_path / "src")
    (src / name).write_bytes(content)
    before = _generation(base_index)
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(base_index), "--replace", check=False)
    _one_line_error(proc, f"{src / name}: {why}")
    assert _generation(base_index) == before
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(base_index), "--replace", "--skip-bad")
    assert f"skipped {src / name}: {why}" in proc.stderr
    assert sorted(load_index(base_index).document_ids()) == ["note1", "note2"]


def test_folder_of_notes_and_medquad_xml_reads_both(tmp_path):
    src = _notes(tmp_path / "src")
    (src / "0001.xml").write_text('<?xml version="1.0"?>\n<Document id="0001" source="GHR"><Focus>Gout</Focus><QAPairs>'
                                  '<QAPair pid="1"><Question qid="0001-1" qtype="treatment">How is gout treated?</Question>'
                                  '<Answer>With colchicine.</Answer></QAPair></QAPairs></Document>')
    assert sorted(d.doc_id for d in read_documents(src)) == ["GHR_0001", "note1", "note2"]


@pytest.mark.parametrize("stray", ["a_config.xml", "METADATA.XML"])
def test_ccda_folder_with_an_unrelated_xml_names_it(tmp_path, stray):
    src = tmp_path / "ccda"
    src.mkdir()
    for i in range(2):
        (src / f"doc{i}.xml").write_text(CCDA_MIN.format(enc="UTF-8", doc_id=f"d{i}", body="Tiotropium 18 mcg daily."))
    (src / stray).write_text('<?xml version="1.0"?><config/>')
    with pytest.raises(BadInputError, match=rf"{stray}: XML file is neither a C-CDA ClinicalDocument nor a MedQuAD Document"):
        list(read_documents(src))
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), check=False)
    _one_line_error(proc, f"{stray}: XML file is neither")
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), "--skip-bad")
    assert "indexed 2 documents" in proc.stderr and f"skipped {src / stray}:" in proc.stderr


def test_folder_file_no_reader_takes_is_reported_litter_is_not(tmp_path):
    src = _notes(tmp_path / "src")
    (src / "scan.tiff").write_bytes(b"II*\x00")
    (src / ".DS_Store").write_bytes(b"\x00\x01")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    report = ReadReport(skip_bad=True)
    assert sorted(d.doc_id for d in read_documents(src, report=report)) == ["note1", "note2"]
    assert [(Path(e.source).name, e.reason.split(" (")[0]) for e in report.skipped] == [("scan.tiff", "no reader for this kind of file")]


def test_office_owner_files_beside_open_files_are_litter(tmp_path, base_index):
    """Excel keeps "~$docs.csv" (who has it open, in a few bytes) while docs.csv is open, Word "~$note.txt"."""
    src = _notes(tmp_path / "src")
    (src / "docs.csv").write_text("id,text\nc1,PLAN: rest.\n")
    owner = b"\x04jdoe" + b" " * 49 + b"\x04\x00" + "jdoe".encode("utf-16-le") + b" \x00" * 49
    (src / "~$docs.csv").write_bytes(owner)
    (src / "~$note1.txt").write_bytes(owner)
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(base_index), "--replace")
    assert "nothing skipped" in proc.stderr
    assert sorted(load_index(base_index).document_ids()) == ["c1", "note1", "note2"]


# ------------------------------------------------------------------ 5. duplicate ids name the file and line
def test_duplicate_document_id_names_file_and_line(tmp_path):
    src = tmp_path / "dupid.jsonl"
    src.write_text('{"doc_id": "dup", "text": "first"}\n\n{"doc_id": "dup", "text": "second"}\n')
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), check=False)
    _one_line_error(proc, f"{src} [line 3]: duplicate document id 'dup'")
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), "--skip-bad")
    assert f"skipped {src} [line 3]: duplicate document id 'dup'" in proc.stderr


def test_duplicate_id_across_files_of_a_folder_names_the_second_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("PLAN: rest.")
    (src / "a.txt").write_text("PLAN: fluids.")
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(tmp_path / "idx"), check=False)
    _one_line_error(proc, f"{src / 'a.txt'}: duplicate document id 'a'")


# ------------------------------------------------------------------ 6. declared XML encodings
def test_ccda_declared_latin1_is_read(tmp_path):
    path = tmp_path / "latin1.xml"
    path.write_bytes(CCDA_MIN.format(enc="ISO-8859-1", doc_id="l1", body="Café au lait spots; naïve patient.").encode("latin-1"))
    [doc] = read_documents(path)
    assert "Café au lait spots; naïve patient." in doc.text
    undeclared = tmp_path / "undeclared.xml"  # no declaration: XML is UTF-8, and Latin-1 bytes are refused
    undeclared.write_bytes(CCDA_MIN.format(enc="UTF-8", doc_id="l2", body="Café").replace('encoding="UTF-8"', "").encode("latin-1"))
    with pytest.raises(BadInputError, match="not UTF-8 text"):
        list(read_documents(undeclared))


# ------------------------------------------------------------------ 7. failed writes leave nothing behind
def test_failed_index_leaves_no_stub_directories(tmp_path):
    out = tmp_path / "new" / "idx"
    proc = capr_cli("index", "--lexical-only", str(tmp_path / "missing"), "--out", str(out), check=False)
    _one_line_error(proc, "no such file or directory")
    assert not (tmp_path / "new").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"doc_id": "a", "text": "PLAN: rest."}\n{"doc_id": "b"}\n')
    proc = capr_cli("index", "--lexical-only", str(bad), "--out", str(out), check=False)
    _one_line_error(proc, f"{bad} [line 2]: missing string field 'text'")
    assert not (tmp_path / "new").exists()
    given = tmp_path / "given"  # an empty folder given as --out is kept, and left empty
    given.mkdir()
    proc = capr_cli("index", "--lexical-only", str(bad), "--out", str(given), check=False)
    assert proc.returncode != 0 and given.is_dir() and not any(given.iterdir())


def test_failed_index_over_an_existing_index_keeps_it(tmp_path, base_index):
    before = sorted(p.name for p in base_index.iterdir())
    gen = _generation(base_index)
    proc = capr_cli("index", "--lexical-only", str(tmp_path / "missing"), "--out", str(base_index), "--replace", check=False)
    _one_line_error(proc, "no such file or directory")
    assert sorted(p.name for p in base_index.iterdir()) == before and _generation(base_index) == gen
    assert [h.passage.doc_id for h in search(load_index(base_index), "zorbifen")] == ["kept"]


def test_failed_adapt_leaves_no_work_folder(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"doc_id": "b"}\n')
    proc = capr_cli("adapt", str(src), "--out", str(tmp_path / "idx"), check=False)
    _one_line_error(proc, f"{src} [line 1]: missing string field 'text'")
    assert not (tmp_path / "idx.adapt").exists() and not (tmp_path / "idx").exists()


# ------------------------------------------------------------------ gzip'd plain-text notes
def test_a_gzipped_note_is_indexed_as_text_as_other_gzipped_formats_are(tmp_path, runner):
    from capr.cli import app

    (tmp_path / "note.txt.gz").write_bytes(gzip.compress(NOTE.encode()))
    result = runner.invoke(app, ["index", "--lexical-only", str(tmp_path / "note.txt.gz"), "--out", str(tmp_path / "one")])
    assert result.exit_code == 0, result.output
    [hit] = search(load_index(tmp_path / "one"), "warfarin", k=1)
    assert hit.passage.doc_id == "note"  # the note note.txt.gz decompresses to, as note.txt is
    [doc] = read_documents(tmp_path / "note.txt.gz", Format.text)
    assert (doc.doc_id, doc.metadata["path"]) == ("note", "note.txt.gz")

    folder = tmp_path / "notes"
    (folder / "cardiology").mkdir(parents=True)
    (folder / "cardiology" / "visit.md.gz").write_bytes(gzip.compress(b"# Clinic visit\n\nPLAN: metoprolol.\n"))
    (folder / "discharge.txt").write_text("HOSPITAL COURSE:\nTreated for pneumonia.\n")
    result = runner.invoke(app, ["index", "--lexical-only", str(folder), "--out", str(tmp_path / "folder")])
    assert result.exit_code == 0, result.output
    index = load_index(tmp_path / "folder")
    [hit] = search(index, "metoprolol", k=1)
    assert (hit.passage.doc_id, hit.passage.title) == ("cardiology/visit", "Clinic visit")
    assert [h.passage.doc_id for h in search(index, "pneumonia", k=1)] == ["discharge"]

    # named in capitals, as Windows tools write them: read as gzip all the same
    shouting = tmp_path / "shouting"
    shouting.mkdir()
    (shouting / "NOTE.TXT.GZ").write_bytes(gzip.compress(NOTE.encode()))
    (shouting / "DOCS.JSONL.GZ").write_bytes(gzip.compress(b'{"id": "d1", "text": "Gout flare treated with colchicine."}\n'))
    result = runner.invoke(app, ["index", "--lexical-only", str(shouting), "--out", str(tmp_path / "shouting-idx")])
    assert result.exit_code == 0, result.output
    index = load_index(tmp_path / "shouting-idx")
    assert [h.passage.doc_id for h in search(index, "warfarin", k=1)] == ["NOTE"]
    assert [h.passage.doc_id for h in search(index, "colchicine", k=1)] == ["d1"]
