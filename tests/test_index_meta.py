"""The index's on-disk meta (capr.index.meta) pinned against golden JSON: a generation's manifest.json and a segment's
segment.json, as a tiny index writes them (volatile fields masked). A change to either file's layout shows up here
first, and has to be a deliberate change of the golden files (and of FORMAT_VERSION when old indexes can no longer be
read the same)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capr.errors import IndexError_
from capr.index import IndexWriter, load_index
from capr.index.meta import FORMAT_VERSION, IndexMeta, SegmentMeta
from capr.records import Document

GOLDEN = Path(__file__).parent / "fixtures" / "index_meta"
VOLATILE = {"created": "<created>", "capr_version": "<capr_version>", "write_seconds": "<write_seconds>"}
DOCS = [
    Document("note-1", "Clinic note", "HISTORY:\nChest pain on exertion.\n\nPLAN:\nStart aspirin.",
             metadata={"patient_id": "p1", "year": 2021}),
    Document("note-2", "Discharge summary", "MEDICATIONS:\nMetoprolol 25 mg twice daily.",
             metadata={"patient_id": "p2", "tags": ["a", "b"]}),
]


def _masked(d: dict) -> dict:
    return {k: VOLATILE.get(k, v) if k in VOLATILE else v for k, v in d.items()}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("meta") / "idx"
    with IndexWriter(root) as w:
        for d in DOCS:
            w.add(d)
    return root


def _golden(name: str) -> dict:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def test_manifest_is_the_golden_one(tiny):
    index = load_index(tiny)
    written = json.loads((index.gen / "manifest.json").read_text(encoding="utf-8"))
    assert list(written) == list(_golden("manifest.json"))  # the keys, in their order
    assert _masked(written) == _golden("manifest.json")
    assert written["format_version"] == FORMAT_VERSION


def test_segment_meta_is_the_golden_one(tiny):
    index = load_index(tiny)
    written = json.loads((index.segments[0].path / "segment.json").read_text(encoding="utf-8"))
    assert written == _golden("segment.json")


def test_a_segment_without_its_summed_lengths_reads_them_from_its_rows(tiny, tmp_path):
    """Segments written before segment.json recorded ``total_len`` still open, with the same BM25 statistics."""
    import shutil

    copy = tmp_path / "idx"
    shutil.copytree(tiny, copy)
    meta = copy / "segments" / load_index(tiny).segments[0].path.name / "segment.json"
    raw = json.loads(meta.read_text(encoding="utf-8"))
    del raw["total_len"]
    meta.write_text(json.dumps(raw), encoding="utf-8")
    old, new = load_index(copy), load_index(tiny)
    assert old.segments[0].meta.total_len is None
    assert old.segments[0].total_len == new.segments[0].total_len == 19.0
    assert old.bm25().avgdl == new.bm25().avgdl


def test_meta_reads_back_typed(tiny):
    index = load_index(tiny)
    meta = index.meta
    assert meta.segmenter.include_title and meta.analyzer.language == "english" and meta.bm25.k1 == 1.2
    assert meta.counts == {"documents": 2, "passages": 3} and "patient_id" in meta.fields
    assert IndexMeta.from_dict(meta.to_dict()) == meta
    seg = SegmentMeta.read(index.segments[0].path)
    assert SegmentMeta.from_dict(seg.to_dict()) == seg and seg.passages == 3


def test_golden_manifest_reads_as_a_manifest():
    """A manifest as this format writes it (the golden file, volatile fields filled in) parses into the same fields."""
    raw = {**_golden("manifest.json"), "created": "2026-01-01T00:00:00+0000", "capr_version": "0.1.0",
           "write_seconds": 0.5}
    meta = IndexMeta.from_dict(raw)
    assert meta.to_dict() == raw


def test_another_format_is_refused_in_one_line(tiny, tmp_path):
    index = load_index(tiny)
    path = index.gen / "manifest.json"
    saved = path.read_text(encoding="utf-8")
    try:
        path.write_text(json.dumps({**json.loads(saved), "format_version": 2}), encoding="utf-8")  # the last format
        with pytest.raises(IndexError_, match=r"index format 2 is not supported .*rebuild it with `capr index`"):
            IndexMeta.read(index.gen, tiny)
    finally:
        path.write_text(saved, encoding="utf-8")
