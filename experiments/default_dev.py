#!/usr/bin/env python3
"""The dev table behind capr search's defaults (issue 16): retriever, fusion, ⟨entity, aspect⟩ template, aspect
prior and document grouping, each measured through the one Searcher on dev sets only (never a test split).

    CAPR_CACHE=/work/runs/cache-final OMP_NUM_THREADS=1 .venv/bin/python -m experiments.default_dev --data-dir ../shared/data

Dev sets (capr.eval.devsets, capr.eval.runner.BENCHMARKS):
- medquad-dev (rerank64; tuple and question queries): medquad-cdv's protocol on 400 non-test MedQuAD documents
- mtsamples-dev (full: every dev passage; tuple): 600 *training* notes of MTSamples, self-labelled pairs
- mediqa2019-train (judged answers; consumer questions): MEDIQA 2019 Task 3 training set 2
- medquad-docs-dev (whole documents, grouped by document; questions): the dev answers as untitled documents,
  next to bm25s over whole documents
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from capr.eval.benchmarks import Protocol, QueryField, default_scorer, run_benchmark
from capr.eval.runner import EvalConfig, load_benchmark
from capr.models.encoder import EncoderConfig
from capr.records import Retriever
from capr.search.fusion import FusionConfig, FusionMethod
from capr.search import EntityScope, GroupBy, SearchOptions, Searcher
from experiments.common import DEFAULT_DATA

FUSIONS = {
    "rrf 1:1": FusionConfig(FusionMethod.rrf, weights=(0.5, 0.5)),
    "rrf 1:2": FusionConfig(FusionMethod.rrf, weights=(1 / 3, 2 / 3)),
    "rrf 1:3": FusionConfig(FusionMethod.rrf, weights=(0.25, 0.75)),
    "rrf 1:4": FusionConfig(FusionMethod.rrf, weights=(0.2, 0.8)),
    "rrf 1:6": FusionConfig(FusionMethod.rrf, weights=(1 / 7, 6 / 7)),
    "rrf 1:9": FusionConfig(FusionMethod.rrf, weights=(0.1, 0.9)),
    "minmax 1:1": FusionConfig(FusionMethod.weighted, weights=(0.5, 0.5)),
    "minmax 1:2": FusionConfig(FusionMethod.weighted, weights=(1 / 3, 2 / 3)),
    "minmax 1:3": FusionConfig(FusionMethod.weighted, weights=(0.25, 0.75)),
}


def configs(structured: bool) -> list[tuple[str, SearchOptions]]:
    base = SearchOptions()
    rows = [("bm25", replace(base, retriever=Retriever.bm25)), ("dense", replace(base, retriever=Retriever.dense))]
    rows += [(f"hybrid {name}", replace(base, retriever=Retriever.hybrid, fusion=f)) for name, f in FUSIONS.items()]
    for b in (0.0, 0.5, 1.0, 2.0):  # the aspect prior and the entity-mention bonus, on the defaults
        for m in (0.0, 0.25, 0.5):
            rows.append((f"default boost={b} mention={m}", replace(base, aspect_boost=b, mention_boost=m)))
    if structured:
        for t in ("of", "question"):
            rows.append((f"default template={t}", replace(base, template=t)))
        for t in ("of", "question"):
            rows.append((f"dense template={t}", replace(base, retriever=Retriever.dense, template=t)))
        for b in (0.0, 0.25, 1.0):
            rows.append((f"hybrid rrf 1:2 boost={b}", replace(base, retriever=Retriever.hybrid, fusion=FUSIONS["rrf 1:2"], aspect_boost=b)))
        rows.append(("hybrid rrf 1:2 no entity-first", replace(base, retriever=Retriever.hybrid, fusion=FUSIONS["rrf 1:2"], entity_first=False)))
        for name in ("rrf 1:1", "rrf 1:2", "rrf 1:3"):
            rows.append((f"hybrid {name} entity in document", replace(base, retriever=Retriever.hybrid, fusion=FUSIONS[name],
                                                                       entity_scope=EntityScope.document)))
        for b in (0.5, 1.0, 2.0):
            rows.append((f"hybrid rrf 1:3 entity in document boost={b}", replace(
                base, retriever=Retriever.hybrid, fusion=FUSIONS["rrf 1:3"], entity_scope=EntityScope.document, aspect_boost=b)))
        for m in (0.25, 0.5, 1.0):
            for b in (0.5, 1.0, 2.0):
                rows.append((f"hybrid rrf 1:3 entity in document mention={m} boost={b}", replace(
                    base, retriever=Retriever.hybrid, fusion=FUSIONS["rrf 1:3"], entity_scope=EntityScope.document,
                    aspect_boost=b, mention_boost=m)))
        rows.append(("hybrid rrf 1:3 boost=1.0", replace(base, retriever=Retriever.hybrid, fusion=FUSIONS["rrf 1:3"], aspect_boost=1.0)))
        rows.append(("dense entity in document", replace(base, retriever=Retriever.dense, entity_scope=EntityScope.document)))
        rows.append(("bm25 entity in document", replace(base, retriever=Retriever.bm25, entity_scope=EntityScope.document)))
    return rows


def pool_rows(bench: str, protocol: Protocol, field: QueryField, data_dir: Path, structured: bool, only: set[str] | None) -> list[dict]:
    cfg = EvalConfig(benchmark=bench, data_dir=data_dir, protocol=protocol, query_field=field, pipeline="default")
    t = time.time()
    data = load_benchmark(cfg)
    print(f"# {bench}: {len(data.queries)} queries, {len(data.index)} passages (loaded in {time.time() - t:.0f}s)", file=sys.stderr)
    out = []
    for name, opts in configs(structured):
        if only and name not in only:
            continue
        t = time.time()
        metrics, _ = run_benchmark(data, default_scorer(data, field, options=opts), protocol, field)
        row = {"set": bench, "protocol": protocol.value, "field": field.value, "config": name,
               **{m: metrics[m] for m in ("R@1", "MAP", "nDCG@10") if m in metrics}, "seconds": round(time.time() - t, 1)}
        if "P@1" in metrics:
            row["P@1"] = metrics["P@1"]
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def docs_rows(data_dir: Path, only: set[str] | None) -> list[dict]:
    from capr.eval.devsets import bm25s_whole_documents, document_run, load_medquad_docs_dev
    from capr.eval.metrics import evaluate
    from capr.models.encoder import cache_root
    from capr.records import qrels_as_dict

    enc = EncoderConfig()
    data = load_medquad_docs_dev(data_dir, cache_root() / "bench" / "medquad-docs-dev" / "default", dense=enc)
    qrels = qrels_as_dict(data.qrels)
    print(f"# medquad-docs-dev: {len(data.queries)} queries, {len(data.extra['documents'])} documents, {len(data.index)} passages",
          file=sys.stderr)
    out = []

    def emit(name: str, ranked: dict[str, list[str]], secs: float) -> None:
        m = evaluate(document_run(ranked), qrels)
        p1 = 100 * sum(bool(r) and qrels[q].get(r[0], 0) > 0 for q, r in ranked.items()) / len(ranked)
        row = {"set": "medquad-docs-dev", "protocol": "whole documents", "field": "question", "config": name,
               "P@1": round(p1, 2), "MAP": m["MAP"], "nDCG@10": m["nDCG@10"], "seconds": round(secs, 1)}
        print(json.dumps(row), flush=True)
        out.append(row)

    t = time.time()
    emit("bm25s whole documents", bm25s_whole_documents(data.extra["documents"], data.queries), time.time() - t)
    searcher = Searcher(data.index)
    for name, opts in configs(False):
        if only and name not in only:
            continue
        t = time.time()
        opts = replace(opts, k=10, group_by=GroupBy.doc, highlights=False)
        ranked = {q.qid: [h.passage.doc_id for h in searcher.search(q, opts).hits] for q in data.queries}
        emit(f"{name}, grouped by doc", ranked, time.time() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--sets", default="medquad-dev,mtsamples-dev,mediqa2019-train,medquad-docs-dev")
    ap.add_argument("--only", default="", help="comma-separated config names")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()} or None
    sets = args.sets.split(",")
    if "medquad-dev" in sets:
        for field in (QueryField.tuple, QueryField.question):
            pool_rows("medquad-dev", Protocol.rerank64, field, args.data_dir, field is QueryField.tuple, only)
    if "mtsamples-dev" in sets:
        pool_rows("mtsamples-dev", Protocol.full, QueryField.tuple, args.data_dir, True, only)
    if "mediqa2019-train" in sets:
        pool_rows("mediqa2019-train", Protocol.rerank64, QueryField.question, args.data_dir, False, only)
    if "medquad-docs-dev" in sets:
        docs_rows(args.data_dir, only)


if __name__ == "__main__":
    main()
