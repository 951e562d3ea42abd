#!/usr/bin/env python3
"""Paired comparison of `capr eval --run-out` runs on one judged benchmark: P@1 and MAP per question of each run
against a baseline run, with the two-sided paired randomisation test capr adapt's gate uses (10,000 sign flips).

    CAPR_CACHE=... .venv/bin/python bench/paired_runs.py --benchmark mediqa2019 --baseline dense.trec \\
        --run default=default.trec --run reranked=reranked.trec
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from adapt_free_text import per_query  # noqa: E402
from capr.eval.significance import paired_randomisation_p as paired_p  # noqa: E402
from capr.eval.runner import QUERY_FIELDS, EvalConfig, load_benchmark  # noqa: E402
from capr.records import qrels_as_dict  # noqa: E402


def ranked(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for line in path.read_text().splitlines():
        qid, _, pid, rank, *_ = line.split()
        out.setdefault(qid, []).append((int(rank), pid))
    return {q: [p for _, p in sorted(v)] for q, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmark", required=True, help="a judged benchmark of capr eval (its qrels)")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--run", action="append", required=True, help="NAME=RUN (repeatable)")
    args = ap.parse_args()
    field = QUERY_FIELDS.get(args.benchmark, ("question",))[-1]  # the qrels are the same for every field
    data = load_benchmark(EvalConfig(benchmark=args.benchmark, data_dir=args.data_dir, query_field=field,
                                     retriever="bm25"))
    qrels = qrels_as_dict(data.qrels)
    base = per_query(ranked(args.baseline), qrels)
    b1, bap = base["P@1"], base["MAP"]
    print(f"| run | P@1 | p | MAP | p | MAP better / worse |\n|---|---:|---:|---:|---:|---|\n"
          f"| baseline ({args.baseline.name}) | {b1.mean():.2f} | — | {bap.mean():.2f} | — | — |")
    for spec in args.run:
        name, _, path = spec.partition("=")
        scores = per_query(ranked(Path(path)), qrels)
        p1, apq = scores["P@1"], scores["MAP"]
        print(f"| {name} | {p1.mean():.2f} | {paired_p(p1, b1):.3f} | {apq.mean():.2f} | {paired_p(apq, bap):.3f} | "
              f"{int((apq > bap).sum())} / {int((apq < bap).sum())} |")


if __name__ == "__main__":
    main()
