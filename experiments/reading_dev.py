#!/usr/bin/env python3
"""What the question reading (capr.search.reading, issue 53) is worth on the free-text dev sets, by what it reads:
the default pipeline with the reading off, with everything read, and with one kind read at a time (drug names,
shorthand, HPO findings, misspellings), and with the readings kept out of the dense encoder's text. nDCG@10 and P@1
per set and encoder, the pooled questions, and how many questions each variant reads something in.

    CAPR_CACHE=... OMP_NUM_THREADS=1 .venv/bin/python -m experiments.reading_dev [--sets a,b] [--encoders torch,static]
        [--variants all,off,drug,...] [--dump D.json]

A question whose reading is the same under two variants (the same BM25 terms and encoder text) is searched once:
the variants differ only where they read differently.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from capr.eval.benchmarks import BenchmarkSearcher, as_query, default_scorer, run_benchmark
from capr.eval.metrics import per_query_metrics
from capr.eval.runner import EvalConfig, load_benchmark
from capr.records import qrels_as_dict
from capr.search.reading import SPELLING, QuestionReader, read_query

from experiments.common import DEFAULT_DATA
from experiments.free_text_dev import METRICS, SETS

ALL = QuestionReader.kinds
VARIANTS: dict[str, dict[str, Any]] = {
    "off": {"kinds": (), "dense": False},
    "all": {"kinds": ALL, "dense": True},
    "all (encoder reads it as written)": {"kinds": ALL, "dense": False},
    **{f"{kind} only": {"kinds": (kind,), "dense": True} for kind in ALL},
    "all but findings": {"kinds": tuple(k for k in ALL if k != "finding"), "dense": True},
    "all but spelling": {"kinds": tuple(k for k in ALL if k != SPELLING), "dense": True},
}


@contextmanager
def reading_as(kinds: tuple[str, ...], dense: bool) -> Iterator[None]:
    before = QuestionReader.kinds, QuestionReader.dense
    QuestionReader.kinds, QuestionReader.dense = kinds, dense
    try:
        yield
    finally:
        QuestionReader.kinds, QuestionReader.dense = before


def measure(name: str, backend: str, variants: list[str], data_dir: Path) -> dict[str, Any]:
    config = EvalConfig(benchmark=name, data_dir=data_dir, pipeline="default", query_field="question",
                        encoder_backend=backend)
    data = load_benchmark(config)
    qrels = qrels_as_dict(data.qrels)
    bench = BenchmarkSearcher(data, config.query_field)
    searcher = bench.searcher
    inner = default_scorer(data, config.query_field, options=config.search_options())
    done: dict[tuple, np.ndarray] = {}
    out: dict[str, Any] = {"scores": {}, "read": {}}
    for variant in variants:
        setting = VARIANTS[variant]
        read = 0

        def score(q: Any, rows: np.ndarray) -> np.ndarray:
            nonlocal read
            with reading_as(setting["kinds"], setting["dense"]):
                pq = searcher.parse(as_query(q, config.query_field), validate=False)
                reading = read_query(searcher.store, pq).reading
                read += bool(reading is not None and reading.words)
                key = (q.qid, None) if reading is None else (q.qid, tuple(reading.terms), reading.dense_text,
                                                             reading.notice)
                if key not in done:
                    done[key] = inner(q, rows)
                return done[key]

        _, run = run_benchmark(data, score, config.protocol, config.query_field)
        out["scores"][variant] = {m: np.asarray(v) for m, v in per_query_metrics(run.as_scores(), qrels, METRICS).items()}
        out["read"][variant] = read
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--encoders", default="torch,static")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {'; '.join(VARIANTS)}")
    ap.add_argument("--dump", type=Path, help="per-question scores of every variant (JSON)")
    args = ap.parse_args()
    sets, encoders, variants = args.sets.split(","), args.encoders.split(","), args.variants.split(",")
    results, dump = {}, {}
    for enc in encoders:
        for name in sets:
            t = time.time()
            results[(name, enc)] = r = measure(name, enc, variants, args.data_dir)
            for v in variants:
                print(json.dumps({"set": name, "encoder": enc, "variant": v, "read": r["read"][v],
                                  **{m: round(float(r["scores"][v][m].mean()), 2) for m in METRICS},
                                  "seconds": round(time.time() - t, 1)}), flush=True)
            if args.dump:
                dump[f"{name} [{enc}]"] = {v: {m: s.tolist() for m, s in sc.items()} for v, sc in r["scores"].items()}
                args.dump.write_text(json.dumps(dump))
    print("\n| encoder | variant | " + " | ".join(sets) + " | pooled |")
    print("|---|---|" + "---:|" * (len(sets) + 1))
    for enc in encoders:
        for v in variants:
            cells = [" / ".join(f"{results[(s, enc)]['scores'][v][m].mean():.2f}" for m in METRICS) for s in sets]
            pooled = " / ".join(f"{np.concatenate([results[(s, enc)]['scores'][v][m] for s in sets]).mean():.2f}"
                                for m in METRICS)
            print(f"| {enc} | {v} | " + " | ".join(cells) + f" | {pooled} |")


if __name__ == "__main__":
    main()
