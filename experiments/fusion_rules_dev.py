#!/usr/bin/env python3
"""Fusion rules for free-text questions, simulated on the free-text dev sets (issue 53, item 3): each question's BM25
and dense scores over the whole index (the question as written, and as read: capr.search.reading) are computed
once and kept; every rule is then a choice, per question, of how to fuse the two lists (reciprocal-rank fusion at a
weight, as the hybrid first stage fuses them, over the same depth). Documents rank at their best passage (MEDIQA:
the question's judged answers only), as `capr eval --pipeline default` ranks them. What the simulation leaves out:
the question focus, the entity tiers and the aspect prior (they move only the titled consumer sets); the chosen
rule is then measured in the pipeline itself (experiments/free_text_dev.py --parts).

    CAPR_CACHE=... OMP_NUM_THREADS=1 .venv/bin/python -m experiments.fusion_rules_dev [--sets a,b]
        [--encoders torch,static] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from capr.eval.benchmarks import BenchmarkSearcher, Protocol, rerank64_pools
from capr.eval.metrics import query_metrics
from capr.eval.runner import EvalConfig, load_benchmark
from capr.records import Query, qrels_as_dict
from capr.search.reading import read_query

from experiments.common import DEFAULT_DATA
from experiments.free_text_dev import METRICS, SETS

DEPTH = 1000  # the pipeline's list depth under `capr eval --pipeline default` (k = 1,000)


def top(scores: np.ndarray, rows: np.ndarray, k: int = DEPTH, positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    s = scores[rows]
    keep = s > 0 if positive else np.ones(len(s), dtype=bool)
    r, s = rows[keep], s[keep]
    order = np.lexsort((r, -s))[:k]
    return r[order], s[order]


def collect(name: str, backend: str, data_dir: Path) -> dict[str, Any]:
    """Per question: its top BM25 and dense lists (as written, as read), the rows it ranks among, its gold."""
    config = EvalConfig(benchmark=name, data_dir=data_dir, pipeline="default", query_field="question",
                        encoder_backend=backend)
    data = load_benchmark(config)
    bench = BenchmarkSearcher(data, config.query_field)
    store = bench.searcher.store
    pools = rerank64_pools(data, config.query_field) if config.protocol is Protocol.rerank64 else None
    every = np.arange(len(data.index))
    doc_of = data.extra.get("document_of_row") or [None] * len(data.index)
    if doc_of[0] is None:
        pid_of = {r: p for p, r in data.index.pid_rows().items()}
        doc_of = [pid_of[r] for r in range(len(data.index))]
    enc = store.encoder()
    out = {"qids": [], "lists": [], "qrels": qrels_as_dict(data.qrels), "doc_of": list(doc_of), "features": []}
    for q in data.queries:
        pq = bench.searcher.parse(Query(q.qid, text=q.text), validate=False)
        read = read_query(store, pq)
        rows = pools[q.qid] if pools is not None else every
        texts = [pq.dense_text(), read.dense_text()]
        vecs = enc.encode_queries(texts)
        lists = {}
        for tag, terms, vec in (("plain", pq.terms, vecs[0]), ("read", read.terms, vecs[1])):
            # a pool (MEDIQA) is ranked whole, as its candidates are scored; the index, as BM25 returns it
            lists[f"bm25 {tag}"] = top(store.lexical_scores(terms, None), rows, positive=pools is None)
            lists[f"dense {tag}"] = top(store.dense_scores(vec, every), rows)
        idf = store.term_idf(read.terms)
        distinct = list(dict.fromkeys(read.terms))
        out["qids"].append(q.qid)
        out["lists"].append(lists)
        out["features"].append({"read": bool(read.reading and read.reading.words), "terms": distinct,
                                "idf": [float(idf.get(t, 0.0)) for t in distinct], "passages": len(data.index)})
    return out


def rrf(lists: list[tuple[np.ndarray, np.ndarray]], weights: tuple[float, ...], k: int = 60) -> list[int]:
    fused: dict[int, float] = {}
    for (rows, _), w in zip(lists, weights):
        for rank, r in enumerate(rows.tolist(), 1):
            fused[r] = fused.get(r, 0.0) + w / (k + rank)
    return sorted(fused, key=lambda r: (-fused[r], r))


def documents(rows: list[int], doc_of: list[str]) -> list[str]:
    seen, out = set(), []
    for r in rows:
        d = doc_of[r]
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


Rule = Callable[[dict[str, Any], dict[str, Any]], tuple[str, str, tuple[float, float]]]


def evaluate(collected: dict[str, Any], rule: Rule) -> dict[str, np.ndarray]:
    rows: dict[str, list[float]] = {m: [] for m in METRICS}
    by_qid = dict(zip(collected["qids"], zip(collected["lists"], collected["features"])))
    for qid in sorted(collected["qrels"]):
        lists, feats = by_qid[qid]
        bm25, dense, weights = rule(lists, feats)
        if weights[0] == 0:
            ranked = lists[dense][0].tolist()
        elif weights[1] == 0:
            ranked = lists[bm25][0].tolist()
        else:
            ranked = rrf([lists[bm25], lists[dense]], weights)
        m = query_metrics(documents(ranked, collected["doc_of"])[:DEPTH], collected["qrels"][qid])
        for name in METRICS:
            rows[name].append(100.0 * m[name])
    return {k: np.asarray(v) for k, v in rows.items()}


def mean_idf(feats: dict[str, Any]) -> float:
    return sum(max(0.0, v) for v in feats["idf"]) / max(1, len(feats["idf"]))


def current_share(tag: str) -> Rule:
    """capr.search.query_weights: 1 : 1 when the question's mean IDF ≥ 0.5 × log(passages) and ≥ 4 nats."""
    def rule(lists, feats):
        m = mean_idf(feats)
        rare = m >= 4.0 and m / math.log(feats["passages"]) >= 0.5
        return f"bm25 {tag}", f"dense {tag}", (0.5, 0.5) if rare else (0.2, 0.8)
    return rule


def fixed(tag: str, weights: tuple[float, float], dense_tag: str | None = None) -> Rule:
    return lambda lists, feats: (f"bm25 {tag}", f"dense {dense_tag or tag}", weights)


RULES: dict[str, Rule] = {
    "BM25 alone": fixed("plain", (1.0, 0.0)),
    "BM25 alone (read)": fixed("read", (1.0, 0.0)),
    "dense alone": fixed("plain", (0.0, 1.0)),
    "dense alone (read)": fixed("read", (0.0, 1.0)),
    "glue 1:1": fixed("plain", (0.5, 0.5)),
    "1:4": fixed("plain", (0.2, 0.8)),
    "default before (share by question)": current_share("plain"),
    "read 1:1": fixed("read", (0.5, 0.5)),
    "read 1:2": fixed("read", (1 / 3, 2 / 3)),
    "read 1:4": fixed("read", (0.2, 0.8)),
    "read 1:9": fixed("read", (0.1, 0.9)),
    "read share by question": current_share("read"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--encoders", default="torch,static")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--cache", type=Path, help="keep each set's lists here (pickle) and read them back")
    args = ap.parse_args()
    import pickle

    sets, encoders, rules = args.sets.split(","), args.encoders.split(","), args.rules.split(",")
    results = {}
    for enc in encoders:
        for name in sets:
            path = args.cache / f"{name}-{enc}.pkl" if args.cache else None
            if path is not None and path.exists():
                collected = pickle.loads(path.read_bytes())
            else:
                collected = collect(name, enc, args.data_dir)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(pickle.dumps(collected))
            for rule in rules:
                results[(name, enc, rule)] = evaluate(collected, RULES[rule])
                print(json.dumps({"set": name, "encoder": enc, "rule": rule,
                                  **{m: round(float(results[(name, enc, rule)][m].mean()), 2) for m in METRICS}}),
                      flush=True)
    print("\n| encoder | rule | " + " | ".join(sets) + " | pooled |")
    print("|---|---|" + "---:|" * (len(sets) + 1))
    for enc in encoders:
        for rule in rules:
            cells = [" / ".join(f"{results[(s, enc, rule)][m].mean():.2f}" for m in METRICS) for s in sets]
            pooled = " / ".join(f"{np.concatenate([results[(s, enc, rule)][m] for s in sets]).mean():.2f}" for m in METRICS)
            print(f"| {enc} | {rule} | " + " | ".join(cells) + f" | {pooled} |")


if __name__ == "__main__":
    main()
