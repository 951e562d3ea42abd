#!/usr/bin/env python3
"""The default pipeline's fusion on the consumer-question dev sets (capr.eval.devsets: RQE consumer questions over
whole MedQuAD answers, ranked by document, without and with titles): dense alone, the default and other BM25 : dense
shares, each through the one Searcher as `capr search --group-by doc` runs it. Dev sets only.

    CAPR_CACHE=... OMP_NUM_THREADS=1 .venv/bin/python -m experiments.consumer_fusion_dev
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from capr.eval.devsets import load_consumer_dev
from capr.eval.runner import encoder_slug
from capr.models.encoder import cache_root
from capr.records import Retriever
from capr.records import qrels_as_dict
from capr.search.fusion import FusionConfig, FusionMethod
from capr.search import GroupBy, SearchOptions, Searcher
from experiments.common import DEFAULT_DATA, encoder_of, ranked_per_query

SHARES = {"rrf 1:2": (1 / 3, 2 / 3), "rrf 1:4 (default)": (0.2, 0.8), "rrf 1:6": (1 / 7, 6 / 7), "rrf 1:9": (0.1, 0.9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", default="minilm")
    args = ap.parse_args()
    print("| set | config | P@1 | MAP | nDCG@10 |\n|---|---|---:|---:|---:|")
    for name in ("consumer-dev", "consumer-dev-titled"):
        enc = encoder_of(args.model)
        data = load_consumer_dev(args.data_dir, cache_root() / "bench" / name / encoder_slug(enc), dense=enc,
                                 titled=name.endswith("titled"))
        qrels = qrels_as_dict(data.qrels)
        searcher = Searcher(data.index)
        base = SearchOptions(k=100, highlights=False, group_by=GroupBy.doc)
        configs = [("dense", replace(base, retriever=Retriever.dense))]
        configs += [(label, replace(base, fusion=FusionConfig(FusionMethod.rrf, weights=w))) for label, w in SHARES.items()]
        for label, opts in configs:
            ranked = {q.qid: [h.passage.doc_id for h in searcher.search(q, opts).hits] for q in data.queries}
            m = {k: float(v.mean()) for k, v in ranked_per_query(ranked, qrels).items()}
            print(f"| {name} | {label} | {m['P@1']:.2f} | {m['MAP']:.2f} | {m['nDCG@10']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
