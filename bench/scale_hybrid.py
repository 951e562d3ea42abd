"""bench.scale's hybrid step: a capr index with static vectors (model2vec distilled from MiniLM) on the generated
notes, its approximate nearest-neighbour search against exact search, and query latency.

    python -m bench.scale_hybrid NOTES.jsonl QUERIES.jsonl --index DIR --result OUT.json [--lexical-index DIR]

Build: `capr index NOTES --out DIR --encoder-backend static` in a child (wall, its peak RSS), after a tiny untimed
index has distilled the static model into CAPR_CACHE. Recall@10: for each free-text query, capr's dense top 10
(`Index.dense_top`: the per-segment faiss HNSW graphs capr builds above its size threshold, exact below) against the
exact top 10 (the cosine of the query with every live row, `Index.dense_scores`). Memory: the index on disk beside
the lexical-only one (the difference is the vectors and graphs) and this process's RSS after loading and after the
queries (vectors and graphs are memory-mapped: RSS grows with what the queries touch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import latency_stats, log, rss
from bench.scale_run import capr_cmd, dir_bytes, run_measured, worker_main


def distill_static() -> dict[str, Any]:
    """Index two notes with the static encoder, so that the model is distilled before anything is timed."""
    tmp = Path(tempfile.mkdtemp(prefix="scale-static-"))
    try:
        (tmp / "n.jsonl").write_text(json.dumps({"doc_id": "a", "text": "PLAN:\nAspirin daily."}) + "\n")
        return run_measured(capr_cmd("index", tmp / "n.jsonl", "--out", tmp / "idx", "--encoder-backend", "static"),
                            os.environ, 1800)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def recall_and_latency(index_dir: Path, queries: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    from capr import load_index
    from capr.search import search
    from capr.store import as_store

    res: dict[str, Any] = {"rss_before_load_mb": round(rss() / 2**20)}
    idx = load_index(index_dir)
    store = as_store(idx)
    enc = idx.encoder()
    texts = [q["text"] for q in queries if q["kind"] == "free text"]
    search(store, texts[0], k=10, retriever="dense")  # loads the encoder, maps vectors and graphs
    res["rss_loaded_mb"] = round(rss() / 2**20)
    live = np.flatnonzero(idx.live)
    recalls, tie_recalls, ann_lat, exact_lat = [], [], [], []
    for t in texts:
        qvec = np.asarray(enc.encode_queries([t])[0], dtype=np.float32)
        t0 = time.perf_counter()
        ann_rows, _ = idx.dense_top(qvec, 10)
        ann_lat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        scores = idx.dense_scores(qvec, live)
        exact = live[np.argsort(-scores, kind="stable")[:10]]
        exact_lat.append(time.perf_counter() - t0)
        recalls.append(len(set(ann_rows.tolist()) & set(exact.tolist())) / max(1, len(exact)))
        # generated notes repeat sentences, so passages tie: one whose cosine reaches the 10th best is as right
        kth = float(np.sort(scores)[-min(10, len(scores))]) if len(scores) else 0.0
        got = idx.dense_scores(qvec, np.asarray(ann_rows, dtype=np.int64)) if len(ann_rows) else np.zeros(0)
        tie_recalls.append(float(np.count_nonzero(got >= kth - 1e-6)) / max(1, len(exact)))
    res["recall_at_10"] = round(float(np.mean(recalls)), 4)
    res["recall_at_10_ties"] = round(float(np.mean(tie_recalls)), 4)
    res["recall_at_10_min"] = round(float(np.min(recalls)), 2)
    res["ann_search"] = latency_stats(ann_lat)
    res["exact_search"] = latency_stats(exact_lat)
    for retriever in ("dense", "hybrid", "bm25"):
        lat = []
        for t in texts:
            t0 = time.perf_counter()
            search(store, t, k=10, retriever=retriever)
            lat.append(time.perf_counter() - t0)
        res[retriever] = latency_stats(lat)
        log(f"[hybrid] {retriever}: p50 {res[retriever]['p50_ms']:.1f} ms")
    res["rss_after_queries_mb"] = round(rss() / 2**20)
    res["passages"] = int(len(live))
    res["dim"] = int(np.asarray(idx.row_vectors(live[:1])).shape[1])
    return res


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--queries", dest="n_queries", type=int, default=100)
    ap.add_argument("--lexical-index", type=Path, default=None, help="the lexical-only index of the same notes")
    ap.add_argument("--text-bytes", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=7200)


def run(args: argparse.Namespace, queries: list[dict[str, Any]]) -> dict[str, Any]:
    res: dict[str, Any] = {"distill": distill_static()}
    shutil.rmtree(args.index, ignore_errors=True)
    log(f"[hybrid] capr index {args.notes} --encoder-backend static")
    res["build"] = run_measured(capr_cmd("index", args.notes, "--out", args.index, "--encoder-backend", "static"),
                                os.environ, args.timeout)
    if res["build"]["rc"] == 0:
        res["index_bytes"] = dir_bytes(args.index)
        if args.lexical_index and args.lexical_index.is_dir():
            res["lexical_index_bytes"] = dir_bytes(args.lexical_index)
        if args.text_bytes:
            res["ratio_to_text"] = round(res["index_bytes"] / args.text_bytes, 3)
        res.update(recall_and_latency(args.index, queries[: 4 * args.n_queries]))
        res["build"]["passages_per_s"] = round(res["passages"] / res["build"]["wall_s"])
    return res


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, argv, _arguments, run)


if __name__ == "__main__":
    raise SystemExit(main())
