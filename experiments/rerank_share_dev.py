#!/usr/bin/env python3
"""Dev table behind DEFAULT_RERANK_SHARE and ENSEMBLE_RERANK_SHARE (capr.search.second_stage): the default pipeline with
a re-ranker on its top 20, the re-ranker's ranking fused with the first stage's at several shares (1 = the
re-ranker's order alone, within the entity's tiers and with the aspect prior), next to the pipeline without a
re-ranker. Dev sets only: medquad-dev (tuples, questions; rerank64), MEDIQA 2019 training set 2 (judged answers
re-ranked), and the consumer questions over whole MedQuAD answers without and with titles (consumer-dev,
consumer-dev-titled; `capr search --group-by doc`, top 10, as a user asks). Each row: P@1 (any relevant first) / MAP /
nDCG@10, and the paired randomisation p (10,000 sign flips) of each against the first share listed; the last lines
give each share's mean over the sets (every set counts once).

    CAPR_CACHE=... OMP_NUM_THREADS=1 .venv/bin/python -m experiments.rerank_share_dev --reranker bi:MODEL [--reranker ...] \
        [--model FIRST_STAGE_MODEL] [--shares 1.0,0.7,0.6,0.5] [--sets medquad-dev:tuple,consumer-dev,...]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from capr.eval.significance import paired_randomisation_p as paired_p
from capr.eval.benchmarks import Protocol, QueryField, default_scorer, run_benchmark
from capr.eval.runner import EvalConfig, load_benchmark
from capr.records import qrels_as_dict
from capr.search.second_stage import load_reranker
from capr.search import SearchOptions, Searcher
from experiments.common import DEFAULT_DATA, METRICS, consumer_setup, ranked_per_query

SETS = ("medquad-dev:tuple", "medquad-dev:question", "mediqa2019-train:question", "consumer-dev", "consumer-dev-titled")
CONSUMER_K = 10  # `capr search`'s default number of results


def benchmark_runner(name: str, field: QueryField, data_dir: Path, model: str):
    """(qrels, run(reranker, share) -> ranked pids per query) for a rerank64 benchmark, as `capr eval --pipeline
    default` scores it."""
    data = load_benchmark(EvalConfig(benchmark=name, data_dir=data_dir, query_field=field, pipeline="default", model=model))

    def run(reranker, share):
        opts = SearchOptions() if share is None else SearchOptions(rerank_share=share)
        _, r = run_benchmark(data, default_scorer(data, field, options=opts, reranker=reranker, rerank_depth=20),
                             Protocol.rerank64, field)
        return {qid: [sp.pid for sp in sorted(hits, key=lambda sp: -sp.score)] for qid, hits in r.results.items()}

    return qrels_as_dict(data.qrels), run


def consumer_runner(name: str, data_dir: Path, model: str):
    """(qrels, run) for consumer-dev(-titled): documents as `capr search --group-by doc` ranks them."""
    data, base, _ = consumer_setup(name, data_dir, model, k=CONSUMER_K)

    def run(reranker, share):
        searcher = Searcher(data.index, reranker=reranker)
        opts = replace(base, rerank_share=share)
        return {q.qid: [h.passage.doc_id for h in searcher.search(q, opts).hits] for q in data.queries}

    return qrels_as_dict(data.qrels), run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--reranker", action="append", required=True, help="KIND:PATH (repeatable)")
    ap.add_argument("--shares", default="1.0,0.8,0.5,0.3")
    ap.add_argument("--model", default="minilm", help="the first stage's encoder (a model, or an index built by "
                    "capr adapt), as capr eval --model")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated; NAME:FIELD for rerank64 benchmarks")
    args = ap.parse_args()
    shares = [float(x) for x in args.shares.split(",")]
    rerankers = [(spec, load_reranker(spec)) for spec in args.reranker]
    means: dict[str, list[dict[str, float]]] = {}
    for set_name in args.sets.split(","):
        if set_name.startswith("consumer-dev"):
            qrels, run = consumer_runner(set_name, args.data_dir, args.model)
        else:
            name, field = set_name.split(":")
            qrels, run = benchmark_runner(name, QueryField(field), args.data_dir, args.model)
        reference = None
        runs = [("no re-ranker", None, None)] + [(f"{spec} share={s}", rr, s) for spec, rr in rerankers for s in shares]
        for label, rr, share in runs:
            t = time.time()
            scores = ranked_per_query(run(rr, share), qrels)
            row = {"set": set_name, "config": label, **{m: round(float(v.mean()), 2) for m, v in scores.items()}}
            if rr is not None:
                if reference is None:
                    reference = scores
                row["p_vs_first_share"] = {m: round(paired_p(scores[m], reference[m]), 3) for m in METRICS}
            means.setdefault(label, []).append({m: float(v.mean()) for m, v in scores.items()})
            row["seconds"] = round(time.time() - t, 1)
            print(json.dumps(row), flush=True)
    for label, rows in means.items():
        print(json.dumps({"set": f"mean of {len(rows)} sets", "config": label,
                          **{m: round(float(np.mean([r[m] for r in rows])), 2) for m in METRICS}}), flush=True)


if __name__ == "__main__":
    main()
