#!/usr/bin/env python3
"""The default pipeline against its parts on the free-text dev sets (issue 36): NFCorpus dev (BEIR layout; its text
is the original release's, lower-cased and stop-word-free), MEDIQA 2019 validation and training set 2 (judged
answers re-ranked), the consumer dev sets without and with titles (RQE consumer questions over whole MedQuAD answers,
judged by document). Every system runs through `capr eval`'s code (capr.eval.runner, one index per set, titles as
`capr index` reads them): the default pipeline (SearchOptions(), what `capr search` does), BM25 alone and MiniLM
dense alone (each scoring every candidate), and variants of the default (SearchOptions fields). nDCG@10 and P@1 per
question; the default (or each variant) against each single retriever with the paired randomisation test of
capr.eval.significance (two-sided, 10,000 sign flips).

    CAPR_CACHE=/work/cache-ft OMP_NUM_THREADS=1 .venv/bin/python -m experiments.free_text_dev [--sets a,b] [--variants x,y]
        [--model NAME=MODEL ...] [--reranker NAME=SPEC ...]

``--model NAME=MODEL`` (repeatable): each set indexed again with MODEL as the index's encoder (a trained bi-encoder
folder), and "NAME dense alone" and "NAME default" (the default pipeline on that index) added; like every other
system they are compared with BM25 alone and zero-shot MiniLM dense alone. ``--reranker NAME=SPEC``: the default
pipeline with that second stage (e.g. ``bi:minilm,bi:MODEL``, the ensemble `capr adapt` gates), on each index.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from capr.eval.benchmarks import BenchmarkSearcher, default_scorer, run_benchmark
from capr.eval.metrics import per_query_metrics
from capr.eval.runner import EvalConfig, load_benchmark
from capr.eval.significance import paired_randomisation_p as paired_p
from capr.records import Retriever
from capr.records import qrels_as_dict
from capr.search.fusion import FusionConfig, FusionMethod
from capr.search.second_stage import load_reranker

from experiments.common import DEFAULT_DATA

SETS = ("nfcorpus-dev", "mediqa2019", "mediqa2019-train", "consumer-dev", "consumer-dev-titled")
METRICS = ("nDCG@10", "P@1")
# default-pipeline variants: SearchOptions fields changed
VARIANTS = {
    "default": {},
    "prior off": {"aspect_boost": 0.0},
    "fusion by question": {"fusion_by_question": True},
    "fusion fixed": {"fusion_by_question": False},  # the store's fusion for every question (the default before c9f710a)
    "before": {"wording_prior": "everywhere", "question_focus": False},  # the default before issue 36
    "focus off": {"question_focus": False},
    "rrf 1:1": {"fusion": FusionConfig(FusionMethod.rrf, weights=(0.5, 0.5))},
    "rrf 1:9": {"fusion": FusionConfig(FusionMethod.rrf, weights=(0.1, 0.9))},
    "rrf 0:1": {"fusion": FusionConfig(FusionMethod.rrf, weights=(0.0, 1.0))},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--variants", default="default", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--protocol", default=None, help="full or rerank64 (default: the benchmark's own)")
    ap.add_argument("--query-field", default="question", help="question, or tuple (⟨entity, aspect⟩ benchmarks)")
    ap.add_argument("--model", action="append", default=[], help="NAME=MODEL: also index each set with MODEL (repeatable)")
    ap.add_argument("--reranker", action="append", default=[], help="NAME=SPEC: the default pipeline with this second "
                    "stage (`capr search --reranker SPEC`), on MiniLM's index and on each --model's (repeatable)")
    ap.add_argument("--dump", type=Path, help="write every system's per-question scores here (JSON), with each "
                    "question's analysed terms and their IDF in the set's index")
    args = ap.parse_args()
    rows, dump = [], {}
    for name in args.sets.split(","):
        config = EvalConfig(benchmark=name, data_dir=args.data_dir, pipeline="default", query_field=args.query_field,
                            protocol=args.protocol)
        t = time.time()
        data = load_benchmark(config)
        qrels = qrels_as_dict(data.qrels)
        bench = BenchmarkSearcher(data, config.query_field)
        systems = {"BM25 alone": bench.scorer(Retriever.bm25, config.template, FusionConfig()),
                   "dense alone": bench.scorer(Retriever.dense, config.template, FusionConfig())}
        for v in args.variants.split(","):
            options = replace(config.search_options(), **VARIANTS[v])
            systems[v] = default_scorer(data, config.query_field, options=options)
        indexed = {}  # system → the set indexed with its model (default: MiniLM's)
        for label, model in (m.split("=", 1) for m in args.model):
            trained_config = replace(config, model=model)
            trained = load_benchmark(trained_config)
            systems[f"{label} dense alone"] = BenchmarkSearcher(trained, config.query_field).scorer(
                Retriever.dense, config.template, FusionConfig())
            systems[f"{label} default"] = default_scorer(trained, config.query_field, options=trained_config.search_options())
            indexed[f"{label} dense alone"] = indexed[f"{label} default"] = trained
            for second, spec in (r.split("=", 1) for r in args.reranker):
                systems[f"{label} default + {second}"] = default_scorer(
                    trained, config.query_field, options=trained_config.search_options(), reranker=load_reranker(spec))
                indexed[f"{label} default + {second}"] = trained
        for second, spec in (r.split("=", 1) for r in args.reranker):
            for v in args.variants.split(","):
                options = replace(config.search_options(), **VARIANTS[v])
                systems[f"{v} + {second}"] = default_scorer(data, config.query_field, options=options,
                                                            reranker=load_reranker(spec))
        scores = {}
        for system, scorer in systems.items():
            _, run = run_benchmark(indexed.get(system, data), scorer, config.protocol, config.query_field)
            scores[system] = {m: np.asarray(v) for m, v in per_query_metrics(run.as_scores(), qrels, METRICS).items()}
        if args.dump:
            qids = sorted(qrels)
            parsed = {q.qid: bench.parsed[q.qid] for q in data.queries}
            dump[name] = {"qids": qids, "idf": {qid: data.index.term_idf(parsed[qid].terms) for qid in qids},
                          "terms": {qid: parsed[qid].terms for qid in qids}, "passages": len(data.index),
                          "scores": {sy: {m: v.tolist() for m, v in sc.items()} for sy, sc in scores.items()}}
            args.dump.write_text(json.dumps(dump))
        for system, s in scores.items():
            row = {"set": name, "system": system, "queries": len(qrels), **{m: round(float(s[m].mean()), 2) for m in METRICS}}
            if system not in ("BM25 alone", "dense alone"):
                for base in ("BM25 alone", "dense alone"):
                    row[f"p vs {base}"] = {m: round(paired_p(s[m], scores[base][m]), 4) for m in METRICS}
            row["seconds"] = round(time.time() - t, 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| set | system | queries | nDCG@10 | P@1 | p vs BM25 (nDCG@10 / P@1) | p vs dense (nDCG@10 / P@1) |")
    print("|---|---|---:|---:|---:|---|---|")
    for r in rows:
        ps = [" / ".join(f"{r[k][m]:.3f}" for m in METRICS) if k in r else "—" for k in ("p vs BM25 alone", "p vs dense alone")]
        print(f"| {r['set']} | {r['system']} | {r['queries']} | {r['nDCG@10']:.2f} | {r['P@1']:.2f} | {ps[0]} | {ps[1]} |")


if __name__ == "__main__":
    main()
