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
from capr.corpus import Format, ReadReport, detect_format, read_documents
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


def _write(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj))
    return path


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
    proc = capr_cli("index", "--lexical-only", str(tmp_path / "missing"), "--out", str(base_index), check=False)
    _one_line_error(proc, "no such file or directory")
    assert sorted(p.name for p in base_index.iterdir()) == before and _generation(base_index) == gen
    assert [h.passage.doc_id for h in search(load_index(base_index), "zorbifen")] == ["kept"]


def test_failed_adapt_leaves_no_work_folder(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"doc_id": "b"}\n')
    proc = capr_cli("adapt", str(src), "--out", str(tmp_path / "idx"), check=False)
    _one_line_error(proc, f"{src} [line 1]: missing string field 'text'")
    assert not (tmp_path / "idx.adapt").exists() and not (tmp_path / "idx").exists()
