"""bench.scale's alternative: bm25s on the same notes, cut into passages as capr cuts them (sections, then at most
200 words between sentences), in one child process: build rate and memory, index size, one-query-at-a-time latency.

    python -m bench.scale_bm25s NOTES.jsonl QUERIES.jsonl --result OUT.json [--tmp DIR]

bm25s as in bench_bm25.py: `tokenize(stopwords="en", stemmer=PyStemmer english)` + `BM25(k1=1.2, b=0.75,
method="lucene").index`, in memory; queries one at a time (`n_threads=0`). ⟨entity, aspect⟩ becomes the text
"entity aspect"; a patient filter becomes bm25s' `weight_mask` over the passages of that patient.
"""

from __future__ import annotations

import gc
import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import PeakRSS, dir_mb, latency_stats, log, rss
from bench.scale_notes import _WORD_RE, MAX_PASSAGE_WORDS
from bench.scale_run import worker_main

BYTES_PER_PASSAGE = 2600  # bm25s' peak at 1.24M passages (issue 55: 2.9 GB) plus the texts, per passage
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def note_passages(text: str) -> list[str]:
    """A generated note's passages: its sections (blank-line separated), each packed sentence by sentence into
    passages of at most MAX_PASSAGE_WORDS words, as capr's segmenter does."""
    out: list[str] = []
    for section in text.split("\n\n"):
        heading, _, body = section.partition("\n")
        current, fill = [heading], len(_WORD_RE.findall(heading))
        for sentence in _SENTENCE_END.split(body):
            w = len(_WORD_RE.findall(sentence))
            if fill and fill + w > MAX_PASSAGE_WORDS and len(current) > 1:
                out.append(" ".join(current))
                current, fill = [], 0
            current.append(sentence)
            fill += w
        out.append(" ".join(current))
    return out


def read_passages(path: Path) -> tuple[list[str], list[int], dict[str, int]]:
    """Passages, each passage's patient number, and the patient numbers by id."""
    passages: list[str] = []
    patient_of: list[int] = []
    patients: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            note = json.loads(line)
            p = patients.setdefault(note["patient_id"], len(patients))
            ps = note_passages(note["text"])
            passages.extend(ps)
            patient_of.extend([p] * len(ps))
    return passages, patient_of, patients


def query_text(q: dict[str, Any]) -> str:
    return q["text"] if "text" in q else f"{q['entity']} {q['aspect']}"


def run(notes: Path, queries: list[dict[str, Any]], tmp_root: Path | None) -> dict[str, Any]:
    import bm25s
    import numpy as np
    import psutil
    import Stemmer

    with open(notes, "rb") as fh:
        n_lines = sum(1 for _ in fh)
    need = n_lines * 6.2 * BYTES_PER_PASSAGE
    avail = psutil.virtual_memory().available
    if need > 0.8 * avail:
        return {"skipped": f"needs about {need / 2**30:.1f} GB (2.6 KB per passage), {avail / 2**30:.1f} GB available"}
    res: dict[str, Any] = {}
    t0 = time.perf_counter()
    passages, patient_of, patients = read_passages(notes)
    res.update(read_s=round(time.perf_counter() - t0, 2), passages=len(passages), rss_after_read_mb=round(rss() / 2**20))
    stemmer = Stemmer.Stemmer("english")
    log(f"[bm25s] {len(passages):,} passages read in {res['read_s']} s; tokenizing + indexing ...")
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        tokens = bm25s.tokenize(passages, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        retriever.index(tokens, show_progress=False)
        build = time.perf_counter() - t0
    res.update(build_s=round(build, 2), passages_per_s=round(len(passages) / build), peak_rss_mb=round(mem.delta_mb),
               peak_rss_abs_mb=round(mem.peak / 2**20))
    del tokens
    gc.collect()
    tmp = Path(tempfile.mkdtemp(prefix="bm25s-", dir=tmp_root))
    try:
        t0 = time.perf_counter()
        retriever.save(str(tmp / "index"))
        res.update(save_s=round(time.perf_counter() - t0, 2), index_mb=round(dir_mb(tmp / "index"), 1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    patient_arr = np.asarray(patient_of, dtype=np.int32)
    del passages
    gc.collect()

    def mask_of(q: dict[str, Any]) -> Any:
        if not q.get("filters"):
            return None
        return (patient_arr == patients.get(q["filters"]["patient_id"], -1)).astype(np.float32)

    def retrieve(q: dict[str, Any]) -> None:
        toks = bm25s.tokenize([query_text(q)], stopwords="en", stemmer=stemmer, show_progress=False)
        retriever.retrieve(toks, k=10, n_threads=0, show_progress=False, weight_mask=mask_of(q))

    def scores_top(q: dict[str, Any]) -> None:
        # retrieve()'s own top-k, np.argpartition(scores, -k), is slow over a long run of equal (zero) scores
        toks = bm25s.tokenize([query_text(q)], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)
        scores = retriever.get_scores(toks[0], weight_mask=mask_of(q))
        top = np.argpartition(-scores, 9)[:10]
        top[np.argsort(-scores[top], kind="stable")]

    for name, fn in (("retrieve", retrieve), ("scores", scores_top)):
        res[name] = {}
        for kind in dict.fromkeys(q["kind"] for q in queries):
            qs = [q for q in queries if q["kind"] == kind]
            fn(qs[0])
            lat = []
            for q in qs:
                t0 = time.perf_counter()
                fn(q)
                lat.append(time.perf_counter() - t0)
            res[name][kind] = latency_stats(lat)
    res["rss_after_queries_mb"] = round(rss() / 2**20)
    return res


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, argv, lambda ap: ap.add_argument("--tmp", type=Path, default=None),
                       lambda args, queries: run(args.notes, queries, args.tmp))


if __name__ == "__main__":
    raise SystemExit(main())
