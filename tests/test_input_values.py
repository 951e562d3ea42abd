"""Corpus input and filter values a user can hand capr: JSON nested too deeply, symbolic links in a
corpus folder, a plain-text note's title line, bad filter values, an aspect filter that reads as ``-a``
does, a generic id/title/text CSV and a FHIR file read as text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from capr import load_index
from capr.corpus import Format, ReadReport, detect_format, read_documents
from capr.errors import BadInputError
from capr.index import build_index

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
