#!/usr/bin/env python3
"""How many passages of a benchmark's index a bi-encoder second stage reads as windows (more than WINDOW_WORDS
words; capr.models.encoder.passage_windows): where that share is small, windows can move the benchmark little.

    CAPR_CACHE=/work/runs/cache .venv/bin/python -m experiments.long_passages --benchmark mtsamples-capr --benchmark medquad-cdv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from capr.eval.runner import QUERY_FIELDS, EvalConfig, load_benchmark
from capr.models.encoder import WINDOW_WORDS, passage_windows
from experiments.common import DEFAULT_DATA


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", action="append", required=True)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()
    print(f"| benchmark | passages | longer than {WINDOW_WORDS} words | share |\n|---|---:|---:|---:|")
    for bench in args.benchmark:
        data = load_benchmark(EvalConfig(benchmark=bench, data_dir=args.data_dir, retriever="bm25",
                                         query_field=QUERY_FIELDS.get(bench, ("question",))[0]))
        passages = data.index.passages(np.flatnonzero(data.index.live))
        long = sum(len(passage_windows(p.text)) > 1 for p in passages)
        print(f"| {bench} | {len(passages):,} | {long:,} | {100 * long / len(passages):.1f} % |")


if __name__ == "__main__":
    main()
