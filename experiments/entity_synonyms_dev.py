#!/usr/bin/env python3
"""The dev table behind `SearchOptions.entity_synonyms` (capr.labels.synonyms): ⟨entity, aspect⟩ queries through
capr search's default pipeline with the entity's tier matched on its own name only, or on its name and its
synonyms (HPO scopes: EXACT; EXACT + RELATED; every scope), on dev sets only. Per-query R@1 and MAP against "off",
with the paired randomisation test capr adapt's gate uses.

    CAPR_CACHE=/work/runs/cache OMP_NUM_THREADS=1 .venv/bin/python -m experiments.entity_synonyms_dev --data-dir ../shared/data

Dev sets: mtsamples-dev (full: every passage of 600 MTSamples *training* notes; self-labelled pairs), medquad-dev
tuples (rerank64 pools and the full protocol; 400 non-test MedQuAD documents).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import capr.labels.synonyms as synonyms
from capr.eval.significance import paired_randomisation_p as paired_p
from capr.eval.benchmarks import Protocol, QueryField, default_scorer, run_benchmark
from capr.eval.runner import EvalConfig, load_benchmark
from capr.records import qrels_as_dict
from capr.search import SearchOptions
from experiments.common import DEFAULT_DATA, run_per_query

SCOPES = {"EXACT": ("EXACT",), "EXACT+RELATED": ("EXACT", "RELATED"),
          "all scopes": ("BROAD", "EXACT", "NARROW", "RELATED")}
SETS = [("mtsamples-dev", Protocol.full), ("medquad-dev", Protocol.rerank64), ("medquad-dev", Protocol.full)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()
    rows = []
    for bench, protocol in SETS:
        cfg = EvalConfig(benchmark=bench, data_dir=args.data_dir, protocol=protocol, query_field=QueryField.tuple,
                         pipeline="default")
        data = load_benchmark(cfg)
        qrels = qrels_as_dict(data.qrels)
        configs = [("off", replace(SearchOptions(), entity_synonyms=False), None)]
        configs += [(name, SearchOptions(), scopes) for name, scopes in SCOPES.items()]
        base = None
        for name, options, scopes in configs:
            if scopes is not None:  # the table the Searcher reads, built with these HPO scopes
                table = synonyms.EntitySynonyms.load(scopes=scopes)
                synonyms.entity_synonyms = lambda table=table: table
            t = time.time()
            metrics, run = run_benchmark(data, default_scorer(data, QueryField.tuple, options=options), protocol,
                                         QueryField.tuple)
            pq = run_per_query(run, qrels, ("R@1", "MAP"))
            base = base or pq
            row = {"set": bench, "protocol": protocol.value, "synonyms": name, "queries": len(data.queries),
                   **{m: metrics[m] for m in ("R@1", "R@5", "MAP", "nDCG@10")},
                   "p R@1": round(paired_p(pq["R@1"], base["R@1"]), 3), "p MAP": round(paired_p(pq["MAP"], base["MAP"]), 3),
                   "better/worse (MAP)": f"{int((pq['MAP'] > base['MAP']).sum())}/{int((pq['MAP'] < base['MAP']).sum())}",
                   "seconds": round(time.time() - t, 1)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    print()
    print("| set | protocol | synonyms | R@1 | R@5 | MAP | nDCG@10 | p (R@1 / MAP) vs off | MAP better / worse |")
    print("|---|---|---|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['set']} | {r['protocol']} | {r['synonyms']} | {r['R@1']:.2f} | {r['R@5']:.2f} | {r['MAP']:.2f} | "
              f"{r['nDCG@10']:.2f} | {r['p R@1']:.3f} / {r['p MAP']:.3f} | {r['better/worse (MAP)']} |")


if __name__ == "__main__":
    main()
