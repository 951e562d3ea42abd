#!/usr/bin/env python3
"""How high R@1 can go on a benchmark whose queries have several relevant passages: capr's R@1 is recall at rank 1
(relevant passages in the top 1 / relevant passages), so a query with n relevant passages scores at most 1/n. Prints
the ceiling, and for each `capr eval --run-out` run its R@1, its P@1 (is the top passage relevant) and the share of
the ceiling it reaches.

    CAPR_CACHE=/work/runs/cache OMP_NUM_THREADS=1 .venv/bin/python -m experiments.recall_ceiling --benchmark mtsamples-capr \\
        --protocol full --run default=default.run --run synonyms=synonyms.run
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from capr.eval.benchmarks import Protocol
from capr.eval.runner import EvalConfig, load_benchmark
from capr.records import qrels_as_dict
from experiments.common import DEFAULT_DATA


def top_of(path: Path) -> dict[str, str]:
    best: dict[str, tuple[int, str]] = {}
    for line in path.read_text().splitlines():
        qid, _, pid, rank, *_ = line.split()
        if qid not in best or int(rank) < best[qid][0]:
            best[qid] = (int(rank), pid)
    return {q: p for q, (_, p) in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="mtsamples-capr")
    ap.add_argument("--protocol", default="full")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--run", action="append", default=[], help="NAME=RUN_FILE (capr eval --run-out)")
    args = ap.parse_args()
    data = load_benchmark(EvalConfig(benchmark=args.benchmark, data_dir=args.data_dir, protocol=Protocol(args.protocol),
                                     pipeline="default"))
    rel = {q: {p for p, g in r.items() if g > 0} for q, r in qrels_as_dict(data.qrels).items()}
    n = len(data.queries)
    counts = collections.Counter(min(len(rel[q.qid]), 5) for q in data.queries)
    ceiling = 100 * sum(1 / len(rel[q.qid]) for q in data.queries) / n
    print(f"{args.benchmark}: {n} queries; relevant passages per query: "
          + ", ".join(f"{k if k < 5 else '5+'}: {counts[k]}" for k in sorted(counts)))
    print(f"R@1 ceiling (every top passage relevant): {ceiling:.2f}")
    print()
    print("| run | R@1 | P@1 | share of the R@1 ceiling |")
    print("|---|---:|---:|---:|")
    for spec in args.run:
        name, _, path = spec.partition("=")
        top = top_of(Path(path))
        hits = [q.qid for q in data.queries if top.get(q.qid) in rel[q.qid]]
        r1 = 100 * sum(1 / len(rel[q]) for q in hits) / n
        print(f"| {name} | {r1:.2f} | {100 * len(hits) / n:.2f} | {100 * r1 / ceiling:.1f}% |")


if __name__ == "__main__":
    main()
