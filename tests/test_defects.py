"""Issue 19: bad input and edge cases give one clear line (or a clear empty answer), never a traceback,
and never lose what is already indexed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capr import load_index
from capr.index import IndexWriter
from capr.index.index import EMPTY_INDEX_MESSAGE

from conftest import capr_cli


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _one_line_error(proc, *needles: str) -> None:
    """A failed command: non-zero exit, the reason on stderr, and no Python traceback."""
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Error:" not in proc.stderr.replace("error:", ""), proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)


# ------------------------------------------------------------------ 1. an index whose documents were all deleted
@pytest.fixture
def emptied_index(tmp_path) -> Path:
    src = _write_jsonl(tmp_path / "one.jsonl", [{"doc_id": "only", "text": "HISTORY:\nThe patient has a cough and fever."}])
    out = tmp_path / "idx"
    capr_cli("index", str(src), "--out", str(out))
    capr_cli("delete", str(out), "--doc-id", "only")
    return out


def test_search_of_emptied_index_python_api(emptied_index):
    index = load_index(emptied_index)
    assert index.is_empty and index.counts["documents"] == 0
    for retriever in ("bm25", "tfidf"):
        assert index.search("cough", retriever=retriever) == []
    assert index.search("cough", filters={"aspect": "history"}) == []  # nothing to filter: no error either


@pytest.mark.parametrize("extra", [[], ["-r", "tfidf"]])
def test_search_of_emptied_index_cli(emptied_index, extra):
    proc = capr_cli("search", str(emptied_index), "cough", *extra, check=False)
    assert proc.returncode == 0, proc.stderr  # "no results" exits 0, as "no matching passages" does
    assert "Traceback" not in proc.stderr
    assert EMPTY_INDEX_MESSAGE in proc.stdout


def test_search_of_emptied_index_cli_json(emptied_index):
    proc = capr_cli("search", str(emptied_index), "cough", "--json", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["results"] == [] and payload["message"] == EMPTY_INDEX_MESSAGE
    assert EMPTY_INDEX_MESSAGE in proc.stderr


def test_emptied_index_can_be_filled_again(emptied_index, tmp_path):
    with IndexWriter(emptied_index, mode="update") as w:
        from capr.records import Document

        w.add(Document("again", "", "PLAN: cough syrup at night."))
    assert [h.passage.doc_id for h in load_index(emptied_index).search("cough")] == ["again"]
