"""Free-text checks of `capr adapt` (issue 17): does the adapted pipeline stay at or above zero-shot MiniLM on
consumer questions? Every model is run as `capr search` runs it — dense alone, and the default pipeline (BM25 +
the model's vectors, fused) — and compared with zero-shot MiniLM dense per question (paired randomisation test,
10,000 sign flips; p for P@1, MAP and nDCG@10).

Sets: MEDIQA 2019 Task 3 validation (`mediqa2019`) and training set 2 (`mediqa2019-train`): judged answers
re-ranked; `consumer-dev` / `consumer-dev-titled`: RQE consumer questions over whole MedQuAD answers without / with
titles (capr.eval.devsets), ranked at the document level.

    OMP_NUM_THREADS=1 .venv/bin/python bench/adapt_free_text.py --model adapted=RUN.adapt/model [--model ...]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from capr.adapt.checks import paired_p  # noqa: E402
from capr.eval.metrics import query_metrics  # noqa: E402
from capr.models.encoder import EncoderConfig, cache_root  # noqa: E402
from capr.query import Retriever  # noqa: E402
from capr.records import qrels_as_dict  # noqa: E402
from capr.search import GroupBy, Searcher, SearchOptions  # noqa: E402

SETS = ("mediqa2019", "mediqa2019-train", "consumer-dev", "consumer-dev-titled")
METRICS = ("P@1", "MAP", "nDCG@10")


def per_query(ranked: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, np.ndarray]:
    rows = {m: [] for m in METRICS}
    for qid in sorted(qrels):
        r = ranked.get(qid, [])
        rel = qrels[qid]
        m = query_metrics(r, rel)
        rows["P@1"].append(100.0 * (bool(r) and rel.get(r[0], 0) > 0))
        rows["MAP"].append(100.0 * m["MAP"])
        rows["nDCG@10"].append(100.0 * m["nDCG@10"])
    return {k: np.asarray(v) for k, v in rows.items()}


def load(name: str, data_dir: Path, model: str):
    from capr.eval.devsets import load_consumer_dev
    from capr.eval.runner import EvalConfig, load_benchmark
    from capr.eval.runner import encoder_slug as slug

    enc = EncoderConfig(model=model)
    if name.startswith("consumer-dev"):
        return load_consumer_dev(data_dir, cache_root() / "bench" / name / slug(enc), dense=enc,
                                 titled=name.endswith("titled"))
    from capr.eval.benchmarks import QueryField

    return load_benchmark(EvalConfig(benchmark=name, data_dir=data_dir, retriever=Retriever.dense, model=model,
                                     query_field=QueryField.question))


def rank(data, options: SearchOptions, document_level: bool) -> dict[str, list[str]]:
    searcher = Searcher(data.index)
    out = {}
    for q in data.queries:
        hits = searcher.search(q, options).hits
        out[q.qid] = [h.passage.doc_id if document_level else h.passage.pid for h in hits]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model", action="append", default=[], help="NAME=MODEL (repeatable); zero-shot MiniLM is always run")
    ap.add_argument("--sets", default=",".join(SETS))
    args = ap.parse_args()
    models = [("minilm", "minilm")] + [tuple(m.split("=", 1)) for m in args.model]
    rows = []
    for name in args.sets.split(","):
        baseline = None
        for label, model in models:
            t = time.time()
            data = load(name, args.data_dir, model)
            doc_level = bool(data.extra.get("document_level"))
            qrels = qrels_as_dict(data.qrels)
            base = SearchOptions(k=100 if doc_level else 50, highlights=False,
                                 group_by=GroupBy.doc if doc_level else GroupBy.passage)
            for system, opts in (("dense", replace(base, retriever=Retriever.dense)), ("default pipeline", base)):
                scores = per_query(rank(data, opts, doc_level), qrels)
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
