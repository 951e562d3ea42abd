"""Warm latency of ⟨entity, aspect⟩ searches over real clinical notes, at this checkout and at an earlier commit, in
one run: what reading the entity's naming passages (capr.search.mentions: one sentence names it, not to deny it)
costs a query once the index is loaded, as the service holds it.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_entity_search --base 48e6d14 [--queries 300] [--rounds 3]

The index is every MTSamples note (`capr index --lexical-only`, built once by this checkout; both checkouts read
the same index format), the queries the ⟨entity, aspect⟩ pairs of mtsamples-dev. Each checkout runs in its own
process (its `src` first on the path), the two alternating round by round so that load from other processes falls
on both alike; a round times every query once, after one untimed pass.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import REPO

DEFAULT_DATA = REPO.parent / "shared" / "data"


def worker(index: str, queries: str, retriever: str) -> None:
    import time

    from capr.index import Index
    from capr.records import Query
    from capr.search import SearchOptions, Searcher

    searcher = Searcher(Index.load(index))
    qs = [Query(q["qid"], entity=q["entity"], aspect=q["aspect"]) for q in json.loads(Path(queries).read_text())]
    options = SearchOptions(k=10, retriever=retriever)
    for q in qs:
        searcher.search(q, options)
    times, top = [], []
    for q in qs:
        t = time.perf_counter()
        hits = searcher.search(q, options).hits
        times.append(time.perf_counter() - t)
        top.append(hits[0].pid if hits else None)
    print(json.dumps({"times": times, "top": top}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="48e6d14", help="the earlier commit")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--retriever", default="bm25", choices=["bm25", "tfidf"])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "capr-bench-entity")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    index = args.work / "mtsamples-lex"
    if not (index / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "capr", "index", str(args.data_dir / "mtsamples" / "mtsamples.csv.gz"),
                        "--out", str(index), "--lexical-only"], check=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    queries = args.work / "queries.json"
    sys.path.insert(0, str(REPO / "src"))
    from capr.eval.runner import EvalConfig, load_benchmark

    data = load_benchmark(EvalConfig(benchmark="mtsamples-dev", data_dir=args.data_dir, query_field="tuple",
                                     retriever="bm25"))
    queries.write_text(json.dumps([{"qid": q.qid, "entity": q.entity, "aspect": q.aspect}
                                   for q in data.queries[: args.queries]]))
    base_src = args.work / f"base-{args.base}"
    if not base_src.exists():
        base_src.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.base], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base_src)], input=archive, check=True)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"], capture_output=True,
                           text=True).stdout.strip()
    sides = {f"before ({args.base})": base_src / "src", f"after ({head}{'+changes' if dirty else ''})": REPO / "src"}
    times: dict[str, list[float]] = {name: [] for name in sides}
    tops: dict[str, list] = {}
    for _ in range(args.rounds):
        for name, src in sides.items():
            out = subprocess.run([sys.executable, "-m", "bench.bench_entity_search", "--worker", str(index), str(queries),
                                  args.retriever], capture_output=True, text=True, check=True, cwd=REPO,
                                 env={**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{REPO}"})
            result = json.loads(out.stdout.strip().splitlines()[-1])
            times[name] += result["times"]
            tops[name] = result["top"]
    n = len(next(iter(tops.values())))
    changed = sum(a != b for a, b in zip(*tops.values()))
    print(f"⟨entity, aspect⟩ searches, {args.retriever}, k 10: {n} mtsamples-dev queries × {args.rounds} rounds over "
          f"every MTSamples note ({index})")
    print("| checkout | p50 (ms) | p95 (ms) | mean (ms) |\n|---|---:|---:|---:|")
    for name, ts in times.items():
        ts = sorted(ts)
        print(f"| {name} | {1000 * ts[len(ts) // 2]:.2f} | {1000 * ts[int(len(ts) * 0.95)]:.2f} | "
              f"{1000 * statistics.mean(ts):.2f} |")
    print(f"first hit differs on {changed} of {n} queries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
