"""Builds that survive: a create given what it indexes (a build key) journals each segment it finishes; killed with
SIGKILL at a random point and run again, it continues after those segments and ends with the index an uninterrupted
build writes (same passages in the same rows, same search results), having lost at most the segment in flight."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capr.index import IndexWriter, load_index
from capr.index.directory import journal_path, read_journal
from capr.records import Query
from capr.search.searcher import search

SEGMENT_PASSAGES = 300
CHILD = """
import sys
from capr.corpus import read_documents
from capr.corpus.files import source_fingerprint
from capr.index import IndexWriter
src, root = sys.argv[1], sys.argv[2]
w = IndexWriter(root, build_key={"source": source_fingerprint(src)}, segment_passages=%d)
for admitted in w.admitted(read_documents(src)):
    w.add_passages(admitted)
w.commit()
""" % SEGMENT_PASSAGES
HEADINGS = ["HISTORY OF PRESENT ILLNESS", "MEDICATIONS", "PHYSICAL EXAMINATION", "ASSESSMENT", "PLAN"]
WORDS = ("gout colchicine metformin insulin dyspnea edema fever cough warfarin atrial fibrillation chest pain "
         "headache nausea rash asthma inhaler statin hypertension lisinopril").split()


def _corpus(path: Path, n: int = 2400) -> Path:
    rng = random.Random(55)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            text = "\n\n".join(f"{h}:\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))
                               for h in HEADINGS[: rng.randint(2, 5)])
            fh.write(json.dumps({"id": f"n{i}", "title": f"note {i % 7}", "text": text,
                                 "metadata": {"patient": f"p{i % 97}"}}) + "\n")
    return path


def _build(src: Path, root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(src), str(root)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _snapshot(root: Path) -> dict:
    index = load_index(root)
    try:
        queries = ["gout colchicine", "chest pain warfarin", "fever", Query("q", entity="insulin", aspect="medications")]
        return {
            "counts": index.counts,
            "passages": [(p.pid, p.text, p.start, p.end, p.aspect, p.title) for p in map(index.passage, range(len(index)))],
            "searches": [[(h.pid, h.score) for h in search(index, q, k=10, retriever=r)]
                         for q in queries for r in ("bm25", "tfidf")],
            "filtered": [h.pid for h in search(index, "edema", k=10, filters={"patient": "p3"})],
        }
    finally:
        index.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return _corpus(tmp_path_factory.mktemp("resume") / "notes.jsonl")


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("whole") / "idx"
    proc = _build(corpus, root)
    assert proc.wait(timeout=600) == 0, proc.stderr.read()
    assert not journal_path(root).exists()
    return _snapshot(root)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_build_killed_at_a_random_point_resumes_to_the_same_index(corpus, uninterrupted, tmp_path, seed):
    root = tmp_path / "idx"
    proc = _build(corpus, root)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (read_journal(root) or {}).get("segments"):
        time.sleep(0.01)
    time.sleep(random.Random(seed).uniform(0.0, 0.4))  # somewhere in the segments after the first
    if proc.poll() is not None:
        pytest.skip("the build finished before it could be killed")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    journal = read_journal(root)
    assert journal is not None and not (root / "CURRENT").exists()
    kept = {name: (root / "segments" / name).stat().st_ino for name, *_ in journal["segments"]}
    written = sum(n for _, n, _ in journal["segments"])
    on_disk = {p.name for p in (root / "segments").iterdir() if p.name.startswith("seg-")}
    # at most the segment in flight is lost: still a temporary folder, or renamed in but not yet journaled
    assert set(kept) <= on_disk and len(on_disk - set(kept)) <= 1
    proc = _build(corpus, root)
    assert proc.wait(timeout=600) == 0, proc.stderr.read()
    assert not journal_path(root).exists()
    # the journaled segments were taken as they were, not written again
    assert all((root / "segments" / n).stat().st_ino == ino for n, ino in kept.items())
    assert _snapshot(root) == uninterrupted
    assert written >= SEGMENT_PASSAGES


def test_another_source_or_a_finished_build_leaves_no_journal_behind(corpus, tmp_path):
    root = tmp_path / "idx"
    proc = _build(corpus, root)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (read_journal(root) or {}).get("segments"):
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.skip("the build finished before it could be killed")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert read_journal(root)["segments"]
    other = _corpus(tmp_path / "other.jsonl", n=50)
    with IndexWriter(root, build_key={"source": "something else"}) as w:  # another create: starts over
        for line in other.read_text().splitlines():
            d = json.loads(line)
            from capr.records import Document

            w.add(Document(d["id"], d["title"], d["text"], d["metadata"]))
    assert not journal_path(root).exists()
    assert sorted(p.name for p in (root / "segments").iterdir()) == load_index(root).manifest["segments"]
    assert load_index(root).counts["documents"] == 50
