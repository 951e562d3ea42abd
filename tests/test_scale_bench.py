"""bench.scale keeps working: its note generator (deterministic, sections capr reads as written, passages as capr
cuts them, patients differing only in case) and a tiny end-to-end run of every lexical step, on a sample of the
real sources copied into a temporary folder."""

from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
from pathlib import Path

import pytest
from conftest import need_data

pytestmark = pytest.mark.data


def _sample_sources(target: Path) -> Path:
    """The first rows of each source bench.scale_notes reads, in the shared data's layout."""
    mts = need_data("mtsamples", "mtsamples.csv.gz")
    (target / "mtsamples").mkdir(parents=True)
    with gzip.open(mts, "rt", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))[:80]
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    with gzip.open(target / "mtsamples" / "mtsamples.csv.gz", "wt", encoding="utf-8", newline="") as fh:
        fh.write(out.getvalue())
    (target / "mts_dialog").mkdir()
    shutil.copy(need_data("mts_dialog", "MTS-Dialog-ValidationSet.csv"), target / "mts_dialog")
    for folder in ("e3c_english", "codiesp"):
        (target / folder).mkdir()
        with gzip.open(need_data(folder, "cases.jsonl.gz"), "rt", encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(60)]
        with gzip.open(target / folder / "cases.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(lines)
    return target


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    return _sample_sources(tmp_path_factory.mktemp("scale-sources"))


def test_notes_are_deterministic_headed_as_written_and_sized_in_capr_passages(tmp_path, sources):
    from bench.scale_notes import NOTE_TYPES, generate, patient_id
    from capr.corpus import read_documents
    from capr.corpus.segment import segment

    a = generate(tmp_path / "a", 2000, seed=3, data_dir=sources)
    b = generate(tmp_path / "b", 2000, seed=3, data_dir=sources)
    assert Path(a["path"]).read_bytes() == Path(b["path"]).read_bytes()
    assert Path(generate(tmp_path / "c", 2000, seed=4, data_dir=sources)["path"]).read_bytes() != Path(a["path"]).read_bytes()

    notes = [json.loads(line) for line in Path(a["path"]).read_text().splitlines()]
    assert a["notes"] == len(notes) and a["text_bytes"] == sum(len(n["text"].encode()) for n in notes)
    passages = 0
    for note, doc in zip(notes, read_documents(Path(a["path"]), "jsonl")):
        cut = segment(doc)
        passages += len(cut)
        assert list(dict.fromkeys(p.heading for p in cut)) == [h for h, *_ in NOTE_TYPES[note["note_type"]]], doc.doc_id
        assert doc.metadata["patient_id"] == note["patient_id"] and len(note["date"]) == 10
    assert abs(passages - 2000) <= 0.05 * 2000, passages  # the estimate counts passages as capr cuts them
    assert patient_id(1) == patient_id(0).lower() != patient_id(0)  # twins: the same id but for case
    assert len({patient_id(p) for p in range(500)}) == 500


def test_a_tiny_scale_run_measures_every_lexical_step(tmp_path, sources):
    from bench.scale import main

    out = tmp_path / "scale.json"
    assert main(["--passages", "600", "--data", str(tmp_path / "data"), "--data-dir", str(sources),
                 "--queries", "3", "--batch", "5", "--cli-runs", "1", "--serve-requests", "3",
                 "--step-timeout", "300", "--json-out", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    built = res["build"]
    assert built["rc"] == 0 and abs(built["counts"]["passages"] - 600) <= 60 and built["peak_rss_mb"] > 0
    notes = res["corpus"]["notes"]
    assert built["counts"]["documents"] == notes
    assert res["size_after_build"]["index_bytes"] > 0 and res["size_after_build"]["ratio_to_text"] > 0
    assert res["add"]["rc"] == 0 and res["delete"]["rc"] == 0 and res["compact"]["rc"] == 0
    assert res["compact"]["counts"]["documents"] == notes  # five added, five deleted
    for kind in ("free text", "entity+aspect", "free text, one patient", "entity+aspect, one patient"):
        assert res["cli"][kind]["failed"] == 0, res["cli"][kind]
        assert res["serve"][kind]["errors"] == 0 and res["serve"][kind]["queries_timed"] == 3, res["serve"][kind]
        assert res["bm25s"]["retrieve"][kind]["queries_timed"] == res["bm25s"]["scores"][kind]["queries_timed"] == 3
    assert abs(res["bm25s"]["passages"] - built["counts"]["passages"]) <= 0.05 * built["counts"]["passages"]
    table = "\n".join(json.loads(out.read_text())["table"])
    assert "| build (`capr index --lexical-only`" in table and "warm p50 / p95, entity+aspect, one patient" in table
    assert not any(p.name.startswith("work_") for p in (tmp_path / "data").iterdir())  # the indexes are removed
