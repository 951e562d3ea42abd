"""Free-text checks of `capr adapt` (issue 17): does the adapted pipeline stay at or above zero-shot MiniLM on
consumer questions? Every model is run as `capr search` runs it — dense alone, and the default pipeline (BM25 +
the model's vectors, fused) — and compared with zero-shot MiniLM dense per question (paired randomisation test,
10,000 sign flips; p for P@1, MAP and nDCG@10).

The default pipeline of an adapted index includes the second stage it records (as `capr search` on it does).

Sets: MEDIQA 2019 Task 3 validation (`mediqa2019`) and training set 2 (`mediqa2019-train`): judged answers
re-ranked; `consumer-dev` / `consumer-dev-titled`: RQE consumer questions over whole MedQuAD answers without / with
titles (capr.eval.devsets), ranked at the document level.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.adapt_free_text --model adapted=RUN.adapt/model [--model ...]
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from capr.eval.significance import paired_randomisation_p as paired_p
from capr.records import Retriever
from capr.records import qrels_as_dict
from capr.search import Searcher
from experiments.common import DEFAULT_DATA, METRICS, consumer_setup, ranked_per_query

SETS = ("mediqa2019", "mediqa2019-train", "consumer-dev", "consumer-dev-titled")


def consumer_rankings(name: str, data_dir: Path, model: str) -> tuple[dict, dict[str, dict[str, list[str]]]]:
    """consumer-dev(-titled): the set's qrels and, per system, each question's documents as `capr search` ranks
    them (grouped by document)."""
    # `capr search` on an adapted index fuses with the weights the index records, and re-ranks with the second
    # stage it records
    from capr.search.second_stage import load_reranker

    data, base, spec = consumer_setup(name, data_dir, model)
    out = {}
    for system, opts, reranker in (("dense", replace(base, retriever=Retriever.dense), None),
                                   ("default pipeline", base, load_reranker(spec) if spec else None)):
        searcher = Searcher(data.index, reranker=reranker)
        out[system] = {q.qid: [h.passage.doc_id for h in searcher.search(q, opts).hits] for q in data.queries}
    return qrels_as_dict(data.qrels), out


def mediqa_rankings(name: str, data_dir: Path, model: str) -> tuple[dict, dict[str, dict[str, list[str]]]]:
    """MEDIQA judged answers re-ranked as `capr eval` does: dense alone (the protocol) and `--pipeline default`."""
    from capr.eval.benchmarks import QueryField
    from capr.eval.runner import EvalConfig, load_benchmark, run_eval

    out, qrels = {}, None
    for system, extra in (("dense", {"retriever": Retriever.dense}), ("default pipeline", {"pipeline": "default"})):
        config = EvalConfig(benchmark=name, data_dir=data_dir, model=model, query_field=QueryField.question, **extra)
        data = load_benchmark(config)
        qrels = qrels_as_dict(data.qrels)
        _, run = run_eval(config, data)
        out[system] = {qid: [sp.pid for sp in sorted(hits, key=lambda sp: -sp.score)] for qid, hits in run}
    return qrels, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", action="append", default=[], help="NAME=MODEL (repeatable); zero-shot MiniLM is always run")
    ap.add_argument("--sets", default=",".join(SETS))
    args = ap.parse_args()
    models = [("minilm", "minilm")] + [tuple(m.split("=", 1)) for m in args.model]
    rows = []
    for name in args.sets.split(","):
        baseline = None
        for label, model in models:
            t = time.time()
            rankings = (consumer_rankings if name.startswith("consumer-dev") else mediqa_rankings)(name, args.data_dir, model)
            qrels, systems = rankings
            for system, ranked in systems.items():
                scores = ranked_per_query(ranked, qrels)
                row = {"set": name, "model": label, "system": system, "queries": len(qrels),
                       **{m: round(float(v.mean()), 2) for m, v in scores.items()}}
                if baseline is None:
                    baseline = scores
                else:
                    row["p_vs_minilm_dense"] = {m: round(paired_p(scores[m], baseline[m]), 4) for m in METRICS}
                    row["better/worse (MAP)"] = [int((scores["MAP"] > baseline["MAP"] + 1e-9).sum()),
                                                 int((scores["MAP"] < baseline["MAP"] - 1e-9).sum())]
                row["seconds"] = round(time.time() - t, 1)
                print(json.dumps(row, ensure_ascii=False), flush=True)
                rows.append(row)
    print("\n| set | model | system | queries | P@1 | MAP | nDCG@10 | p (P@1 / MAP / nDCG@10) vs MiniLM dense |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        p = r.get("p_vs_minilm_dense")
        ps = " / ".join(f"{p[m]:.3f}" for m in METRICS) if p else "—"
        print(f"| {r['set']} | {r['model']} | {r['system']} | {r['queries']} | {r['P@1']:.2f} | {r['MAP']:.2f} | "
              f"{r['nDCG@10']:.2f} | {ps} |")


if __name__ == "__main__":
    main()
