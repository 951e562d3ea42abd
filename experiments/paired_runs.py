#!/usr/bin/env python3
"""Paired comparison of `capr eval --run-out` runs on one judged benchmark: P@1 and MAP per question of each run
against a baseline run, with the two-sided paired randomisation test capr adapt's gate uses (10,000 sign flips).

    CAPR_CACHE=... .venv/bin/python -m experiments.paired_runs --benchmark mediqa2019 --baseline dense.trec \\
        --run default=default.trec --run reranked=reranked.trec
"""

from __future__ import annotations

import argparse
from pathlib import Path

from capr.eval.significance import paired_randomisation_p as paired_p
from capr.eval.runner import QUERY_FIELDS, EvalConfig, load_benchmark
from capr.records import qrels_as_dict
from experiments.common import DEFAULT_DATA, ranked_per_query, read_trec_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmark", required=True, help="a judged benchmark of capr eval (its qrels)")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--run", action="append", required=True, help="NAME=RUN (repeatable)")
    args = ap.parse_args()
    field = QUERY_FIELDS.get(args.benchmark, ("question",))[-1]  # the qrels are the same for every field
    data = load_benchmark(EvalConfig(benchmark=args.benchmark, data_dir=args.data_dir, query_field=field,
                                     retriever="bm25"))
    qrels = qrels_as_dict(data.qrels)
    base = ranked_per_query(read_trec_run(args.baseline), qrels)
    b1, bap = base["P@1"], base["MAP"]
    print(f"| run | P@1 | p | MAP | p | MAP better / worse |\n|---|---:|---:|---:|---:|---|\n"
          f"| baseline ({args.baseline.name}) | {b1.mean():.2f} | — | {bap.mean():.2f} | — | — |")
    for spec in args.run:
        name, _, path = spec.partition("=")
        scores = ranked_per_query(read_trec_run(path), qrels)
        p1, apq = scores["P@1"], scores["MAP"]
        print(f"| {name} | {p1.mean():.2f} | {paired_p(p1, b1):.3f} | {apq.mean():.2f} | {paired_p(apq, bap):.3f} | "
              f"{int((apq > bap).sum())} / {int((apq < bap).sum())} |")


if __name__ == "__main__":
    main()
