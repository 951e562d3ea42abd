"""Dev comparison behind the question patterns of capr.text.aspects.infer_aspect (issue 17, third and fourth
parts): the default pipeline on medquad-dev questions (the index without and with titles) and on medquad-docs-dev
(whole untitled documents, grouped by document) with the pattern list before the third part, without the generic
"what is X → information" pattern, and with it under several document shares the corpus must give the aspect
(capr.text.aspects.GENERIC_ASPECT_MIN_DOCUMENT_SHARE; 0 = no rule).

    CAPR_CACHE=... OMP_NUM_THREADS=1 .venv/bin/python -m experiments.question_aspect_variants --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import capr.text.aspects as aspects
import capr.search as search_mod
from capr.eval.benchmarks import Protocol, QueryField, default_scorer, run_benchmark
from capr.eval.devsets import document_run, load_medquad_docs_dev
from capr.eval.metrics import evaluate
from capr.eval.runner import EvalConfig, load_benchmark
from capr.models.encoder import EncoderConfig, cache_root
from capr.records import qrels_as_dict
from capr.search import GroupBy, SearchOptions, Searcher
from experiments.common import DEFAULT_DATA

BEFORE = 11  # the first 11 patterns are the list before issue 17's third part
GENERIC = 16  # the 16th, "what is X" → information, was added with the document-share rule (issue 17, fourth part)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()
    kept = list(aspects._QUESTION_ASPECTS)
    assert kept[GENERIC - 1][1] == "information"
    sets = [(titled, load_benchmark(EvalConfig(benchmark="medquad-dev", data_dir=args.data_dir, query_field="question",
                                               pipeline="default", titles=titled))) for titled in (False, True)]
    docs = load_medquad_docs_dev(args.data_dir, cache_root() / "bench" / "medquad-docs-dev" / "default",
                                 dense=EncoderConfig())
    qrels = qrels_as_dict(docs.qrels)
    share = search_mod.GENERIC_ASPECT_MIN_DOCUMENT_SHARE
    without_generic = kept[: GENERIC - 1] + kept[GENERIC:]
    variants = [("before", kept[:BEFORE], share), ("without what-is-X", without_generic, share),
                ("what-is-X, no document-share rule", kept, 0.0), ("what-is-X, share >= 0.1", kept, 0.1),
                ("what-is-X, share >= 0.25 (kept)", kept, 0.25), ("what-is-X, share >= 0.5", kept, 0.5)]
    try:
        for name, patterns, min_share in variants:
            aspects._QUESTION_ASPECTS[:] = patterns
            search_mod.GENERIC_ASPECT_MIN_DOCUMENT_SHARE = min_share
            row = {"variant": name}
            for titled, mq in sets:
                m, _ = run_benchmark(mq, default_scorer(mq, QueryField.question), Protocol.rerank64, QueryField.question)
                label = "medquad-dev titled" if titled else "medquad-dev"
                row[f"{label} R@1"], row[f"{label} MAP"] = m["R@1"], m["MAP"]
            searcher = Searcher(docs.index)
            opts = SearchOptions(k=10, group_by=GroupBy.doc, highlights=False)
            ranked = {q.qid: [h.passage.doc_id for h in searcher.search(q, opts).hits] for q in docs.queries}
            dm = evaluate(document_run(ranked), qrels)
            p1 = 100 * sum(bool(r) and qrels[q].get(r[0], 0) > 0 for q, r in ranked.items()) / len(ranked)
            row.update({"medquad-docs-dev P@1": round(p1, 2), "medquad-docs-dev MAP": dm["MAP"]})
            print(json.dumps(row), flush=True)
    finally:
        aspects._QUESTION_ASPECTS[:] = kept
        search_mod.GENERIC_ASPECT_MIN_DOCUMENT_SHARE = share


if __name__ == "__main__":
    main()
