#!/usr/bin/env python3
"""Dev table behind BiReranker's windows (capr.models.encoder.passage_windows): a bi-encoder second stage scoring a
long passage by its first 256 word pieces (what the encoder reads: "off"), or by its best window of 150 words
(MaxP) — windows of what the model reads of the passage, title included ("plain": only the first window has the
title), or windows of the passage text each read with the title or document context ("context") — in the default
pipeline, on its top 20. Dev sets only; paired randomisation test of MAP against the same second stage without
windows.

    CAPR_CACHE=/work/runs/cache OMP_NUM_THREADS=1 .venv/bin/python -m experiments.rerank_windows_dev \\
        --case minilm=bi:minilm --case "B=bi:minilm,bi:B_DIR@B_DIR"

A case is NAME=SPEC[@FIRST_STAGE_MODEL] (the first stage's encoder, as capr eval --model; default minilm).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from capr.eval.significance import paired_randomisation_p as paired_p
from capr.eval.benchmarks import Protocol, QueryField, default_scorer, run_benchmark
from capr.eval.runner import EvalConfig, load_benchmark
from capr.records import qrels_as_dict
from capr.search.second_stage import Windows, load_reranker
from experiments.common import DEFAULT_DATA, run_per_query

SETS = [("mediqa2019-train", QueryField.question), ("medquad-dev", QueryField.tuple), ("medquad-dev", QueryField.question)]


MODES = tuple(w.value for w in Windows)


def set_windows(reranker, mode: str) -> None:
    for member in getattr(reranker, "members", [reranker]):
        member.windows = Windows(mode)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--case", action="append", required=True, help="NAME=SPEC[@FIRST_STAGE_MODEL]")
    ap.add_argument("--sets", default=",".join(f"{b}:{f.value}" for b, f in SETS), help="BENCHMARK:FIELD,...")
    ap.add_argument("--modes", default=",".join(MODES), help="window modes, the first is the baseline")
    args = ap.parse_args()
    sets = [(b, QueryField(f)) for b, _, f in (x.partition(":") for x in args.sets.split(","))]
    modes = args.modes.split(",")
    rows = []
    for case in args.case:
        name, _, rest = case.partition("=")
        spec, _, model = rest.partition("@")
        reranker = load_reranker(spec)
        for bench, field in sets:
            cfg = EvalConfig(benchmark=bench, data_dir=args.data_dir, protocol=Protocol.rerank64, query_field=field,
                             pipeline="default", model=model or "minilm")
            data = load_benchmark(cfg)
            qrels = qrels_as_dict(data.qrels)
            base = None
            for windows in modes:
                set_windows(reranker, windows)
                t = time.time()
                metrics, run = run_benchmark(data, default_scorer(data, field, reranker=reranker, rerank_depth=20),
                                             Protocol.rerank64, field)
                ap_q = run_per_query(run, qrels, ("MAP",))["MAP"]
                base = ap_q if base is None else base
                row = {"case": name, "set": bench, "field": field.value, "windows": windows,
                       "P@1" if "P@1" in metrics else "R@1": metrics.get("P@1", metrics["R@1"]), "MAP": metrics["MAP"],
                       "nDCG@10": metrics["nDCG@10"], "p MAP": round(paired_p(ap_q, base), 3),
                       "MAP better/worse": f"{int((ap_q > base).sum())}/{int((ap_q < base).sum())}",
                       "seconds": round(time.time() - t, 1)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print()
    print("| case | set | field | windows | P@1 or R@1 | MAP | nDCG@10 | p MAP vs no windows | MAP better / worse |")
    print("|---|---|---|---|---:|---:|---:|---|---|")
    for r in rows:
        top = r.get("P@1", r.get("R@1"))
        print(f"| {r['case']} | {r['set']} | {r['field']} | {r['windows']} | "
              f"{top:.2f} | {r['MAP']:.2f} | {r['nDCG@10']:.2f} | {r['p MAP']:.3f} | {r['MAP better/worse']} |")


if __name__ == "__main__":
    main()
