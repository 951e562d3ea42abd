"""What `POST /cases` costs per request now that it runs the similar-case pipeline instead of the lexical baseline:
the same multiple-choice questions ranked by each, side by side in one run, warm (one loaded index, as the service
holds it; the first call of each, which loads the query encoder, reported apart).

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_case_ranking --index CASE_INDEX [--queries 100]

Questions: the first N of headqa-dev (the set for choosing settings), description and options as asked.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from bench.common import percentile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--queries", type=int, default=100)
    a = ap.parse_args()

    from capr.cases import CasePipeline
    from capr.cases.baseline import rank_hypotheses
    from capr.cases.bench import benchmark_questions
    from capr.cases.config import case_config
    from capr.index.index import Index

    index = Index.load(a.index)
    qs = benchmark_questions(a.data_dir, "headqa-dev")[: a.queries]
    rankers = {
        "lexical baseline (before)": lambda q: rank_hypotheses(index, q.description, q.options, allow_repeats=True),
        "pipeline, BM25": (lambda p: lambda q: p.rank(q.description, q.options, allow_repeats=True))(
            CasePipeline(index, case_config(False))),
        "pipeline, dense (the default now)": (lambda p: lambda q: p.rank(q.description, q.options, allow_repeats=True))(
            CasePipeline(index, case_config(index.has_dense))),
    }
    first: dict[str, float] = {}
    times: dict[str, list[float]] = {name: [] for name in rankers}
    for i, q in enumerate(qs):
        for name, rank in rankers.items():  # interleaved, so load drifts hit every ranker alike
            t = time.perf_counter()
            rank(q)
            ms = (time.perf_counter() - t) * 1e3
            (times[name].append(ms) if i else first.__setitem__(name, ms))
    print(f"{len(qs)} headqa-dev questions over {a.index} ({len(index):,} passages); {platform.processor() or platform.machine()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n")
    print("| ranker | first call (ms) | warm p50 (ms) | warm p95 (ms) |")
    print("|---|---:|---:|---:|")
    for name in rankers:
        print(f"| {name} | {first[name]:.0f} | {percentile(times[name], 50):.1f} | {percentile(times[name], 95):.1f} |")


if __name__ == "__main__":
    main()
