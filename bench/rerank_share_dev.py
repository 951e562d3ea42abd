#!/usr/bin/env python3
"""Dev table behind DEFAULT_RERANK_SHARE (capr.retrieve.rerank): the default pipeline with a re-ranker on its top
20, the re-ranker's ranking fused with the first stage's at several shares (1 = the re-ranker's order alone, within
the entity's tiers and with the aspect prior), next to the pipeline without a re-ranker. Dev sets only.

    CAPR_CACHE=... OMP_NUM_THREADS=1 .venv/bin/python bench/rerank_share_dev.py --reranker bi:MODEL [--reranker ...] \
        [--model FIRST_STAGE_MODEL]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from capr.eval.benchmarks import Protocol, QueryField, default_scorer, run_benchmark  # noqa: E402
from capr.eval.runner import EvalConfig, load_benchmark  # noqa: E402
from capr.retrieve.rerank import load_reranker  # noqa: E402
from capr.search import SearchOptions  # noqa: E402

SETS = [("medquad-dev", QueryField.tuple), ("medquad-dev", QueryField.question), ("mediqa2019-train", QueryField.question)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--reranker", action="append", required=True, help="KIND:PATH (repeatable)")
    ap.add_argument("--shares", default="1.0,0.8,0.5,0.3")
    ap.add_argument("--model", default="minilm", help="the first stage's encoder (a model, or an index built by "
                    "capr adapt), as capr eval --model")
    args = ap.parse_args()
    shares = [float(x) for x in args.shares.split(",")]
    rerankers = [(spec, load_reranker(spec)) for spec in args.reranker]
    for name, field in SETS:
        data = load_benchmark(EvalConfig(benchmark=name, data_dir=args.data_dir, query_field=field, pipeline="default",
                                         model=args.model))
        runs = [("no re-ranker", None, SearchOptions())]
        runs += [(f"{spec} share={s}", rr, SearchOptions(rerank_share=s)) for spec, rr in rerankers for s in shares]
        for label, rr, opts in runs:
            t = time.time()
            m, _ = run_benchmark(data, default_scorer(data, field, options=opts, reranker=rr, rerank_depth=20),
                                 Protocol.rerank64, field)
            row = {"set": name, "field": field.value, "config": label, "R@1": m["R@1"], "R@5": m["R@5"], "MAP": m["MAP"],
                   "seconds": round(time.time() - t, 1)}
            if "P@1" in m:
                row["P@1"] = m["P@1"]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
