"""Latency of a second stage on this CPU, one query at a time, through the Searcher (what `capr search` runs):
the bi-encoder alone, then the same first stage with a cross-encoder re-ranking its top 20 and top 100 (PyTorch
and ONNX Runtime int8) and/or any re-ranker spec (`--reranker bi:minilm,bi:BI_DIR`, an ensemble: once with the
passage vectors in the embedding cache, once encoding every passage), side by side in one run.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_second_stage --bi BI_DIR [--cross CROSS_DIR] [--reranker SPEC]

The index is medquad_cdv_test's 3,762 passages with the bi-encoder's vectors (capr eval's benchmark index, kept in
CAPR_CACHE); queries are its first ⟨entity, aspect⟩ tuples. Passage vectors come from the index as in `capr search`;
a residual cross-encoder's bi-encoder prior reads them from the embedding cache the index build filled.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import DEFAULT_DATA

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def other_cpu_seconds() -> float:
    """CPU seconds used by every process but this one since boot (to say what else ran)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bi", required=True, help="the first-stage bi-encoder")
    ap.add_argument("--cross", help="a cross-encoder second stage (capr train cross [--first-stage BI])")
    ap.add_argument("--reranker", action="append", default=[], help="any re-ranker spec (repeatable)")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--depths", type=int, nargs="+", default=[20, 100])
    ap.add_argument("--backends", nargs="+", default=["torch", "onnx-int8"])
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA))
    a = ap.parse_args()

    import torch

    from capr.eval.benchmarks import QueryField, as_query
    from capr.eval.runner import EvalConfig, load_benchmark
    from capr.records import Retriever
    from capr.search.second_stage import CrossReranker, load_reranker, warm_passage_vectors
    from capr.search import SearchOptions, Searcher

    config = EvalConfig(benchmark="medquad-cdv", data_dir=Path(a.data_dir), retriever=Retriever.dense, model=a.bi)
    data = load_benchmark(config)
    # benchmark tuples are literal "entity aspect" queries whose aspects the index's headings need not know
    queries = [Searcher(data.index).parse(as_query(q, QueryField.tuple), expand=False, validate=False)
               for q in data.queries[: a.queries]]

    def run(searcher: Searcher, depth: int) -> np.ndarray:
        options = SearchOptions(k=10, retriever=Retriever.dense, rerank_depth=depth)
        for q in queries[:3]:  # warm-up: model loading, first ONNX session run, caches
            searcher.search(q, options)
        # every row encodes its queries afresh: the encoders keep recent query vectors in memory, so a row run after
        # another over the same queries would otherwise skip the query encoding the first row paid for
        rr = searcher.reranker
        for m in [data.index.encoder(), *(getattr(x, "encoder", None) for x in getattr(rr, "members", [rr]))]:
            if m is not None:
                m.forget_queries()
        times = []
        for q in queries:
            t = time.perf_counter()
            searcher.search(q, options)
            times.append(time.perf_counter() - t)
        return np.asarray(times) * 1000

    rows = []
    other0, wall0 = other_cpu_seconds(), time.time()
    rows.append(("bi-encoder alone (dense first stage)", "—", run(Searcher(data.index), 10)))
    for backend in a.backends if a.cross else []:
        reranker = CrossReranker(a.cross, backend=backend)
        for depth in a.depths:
            rows.append((f"+ {reranker.name.split(':')[0]} ({backend})", str(depth), run(Searcher(data.index, reranker), depth)))
    for spec in a.reranker:
        reranker = load_reranker(spec)
        bis = [m for m in getattr(reranker, "members", [reranker]) if hasattr(m, "encoder")]
        # "cached" is what an index that capr adapt built has: every passage's vectors (each window of a long one,
        # for each member) encoded into the embedding cache beforehand (timed apart, not in the rows)
        t = time.time()
        warm_passage_vectors(reranker, data.index)
        print(f"{spec}: cache filled for {len(data.index):,} passages in {time.time() - t:.0f} s", file=sys.stderr)
        for depth in a.depths:
            rows.append((f"+ {spec} (passage vectors cached)", str(depth), run(Searcher(data.index, reranker), depth)))
            caches = [m.encoder.cache for m in bis]
            for m in bis:  # every passage encoded at query time: a re-ranker's first queries on a new index
                m.encoder.cache = None
            rows.append((f"+ {spec} (passages encoded per query)", str(depth), run(Searcher(data.index, reranker), depth)))
            for m, c in zip(bis, caches):
                m.encoder.cache = c
    busy = (other_cpu_seconds() - other0) / max(time.time() - wall0, 1e-9)

    print(f"\nOne query at a time through the Searcher · {len(queries)} medquad-cdv tuple queries · index of "
          f"{len(data.index):,} passages · {os.cpu_count()} CPU threads ({platform.processor() or platform.machine()}), "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} · torch {torch.__version__} · other processes "
          f"used {busy:.2f} cores meanwhile\n")
    print("| pipeline | re-ranked | p50 ms | p95 ms | mean ms |")
    print("|---|---:|---:|---:|---:|")
    for name, depth, ms in rows:
        print(f"| {name} | {depth} | {np.percentile(ms, 50):.0f} | {np.percentile(ms, 95):.0f} | {ms.mean():.0f} |")


if __name__ == "__main__":
    main()
