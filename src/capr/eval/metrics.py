"""Ranking metrics as trec_eval computes them (each defined once, in capr.rank_metrics), used by ``capr eval``,
``capr adapt``'s gate and the bench scripts alike, and cross-checked against pytrec_eval in the tests.

- Ranking: score descending, ties by document id descending (trec_eval's order).
- nDCG@10 uses linear gain (the relevance grade), as trec_eval does; the ideal ranking is the qrels' grades.
- R@k is the share of a query's relevant documents in the top k; P@1 whether the first is relevant; MRR is the
  reciprocal rank of the first relevant document (MRR@10: within the top 10); MAP is trec_eval's average precision
  over the whole ranking, divided by every relevant document of the query.
- Queries with no retrieved relevant document count as 0 everywhere.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from capr.rank_metrics import average_precision, recall_at, reciprocal_rank, success_at

# what `capr eval` reports
METRICS = ("R@1", "R@5", "R@10", "R@100", "P@1", "MAP", "MRR@10", "nDCG@10")
# every metric query_metrics computes
ALL_METRICS = METRICS + ("MRR",)


def ranking(scores: Mapping[str, float]) -> list[str]:
    """Document ids in trec_eval's order: score descending, then document id descending for ties."""
    return [d for d, _ in sorted(scores.items(), key=lambda x: (-x[1], _Descending(x[0])))]


class _Descending(str):
    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)


def query_metrics(ranked: Sequence[str], relevant: Mapping[str, int | float]) -> dict[str, float]:
    """Every metric of :data:`ALL_METRICS` (fractions) for one query's ranked document ids."""
    rel = {d for d, r in relevant.items() if r > 0}
    n_rel = len(rel)
    if n_rel == 0:
        return {m: 0.0 for m in ALL_METRICS}
    hits = [d in rel for d in ranked]
    out = {f"R@{k}": recall_at(hits, k, n_rel) for k in (1, 5, 10, 100)}
    out["P@1"] = success_at(hits, 1)
    out["MAP"] = average_precision(hits, n_rel)
    out["MRR"] = reciprocal_rank(hits)
    out["MRR@10"] = reciprocal_rank(hits, depth=10)
    dcg = sum(relevant.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranked[:10], 1) if relevant.get(d, 0) > 0)
    ideal = sorted((r for r in relevant.values() if r > 0), reverse=True)[:10]
    idcg = sum(r / math.log2(i + 1) for i, r in enumerate(ideal, 1))
    out["nDCG@10"] = dcg / idcg if idcg else 0.0
    return out


def per_query(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, float]]:
    """qid → :func:`query_metrics` of the run's ranking, for every query in ``qrels`` (a query the run lacks: 0)."""
    return {qid: query_metrics(ranking(run.get(qid, {})), rel) for qid, rel in qrels.items()}


def per_query_metrics(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
                      names: Sequence[str] = METRICS) -> dict[str, list[float]]:
    """metric → its value (percent) for each query of ``qrels``, in sorted qid order (paired tests read these)."""
    scores = per_query(run, qrels)
    return {m: [100.0 * scores[qid][m] for qid in sorted(qrels)] for m in names}


def evaluate(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
             names: Sequence[str] = METRICS) -> dict[str, float]:
    """Mean metrics (percent, :data:`METRICS` or ``names``) over all queries in ``qrels``; ``run`` maps qid →
    {pid: score}."""
    if not qrels:
        raise ValueError("no queries to evaluate")
    scores = per_query(run, qrels)
    return {m: round(100.0 * sum(s[m] for s in scores.values()) / len(qrels), 2) for m in names}


def candidate_metrics(scores: Sequence[np.ndarray], relevance: Sequence[Sequence[float]],
                      metrics: Sequence[str] = ("P@1", "MRR", "MAP", "nDCG@10")) -> dict[str, np.ndarray]:
    """Per-query metrics (×100) of rankings over given candidates: ``scores[q][i]`` scores candidate ``i`` of query
    ``q``, ``relevance[q][i]`` is its grade. The same definitions as :func:`evaluate` (candidate ``i`` is the
    document id ``i``, zero-padded, so ties fall in trec_eval's order)."""
    out: dict[str, list[float]] = {m: [] for m in metrics}
    for s, rel in zip(scores, relevance):
        ids = [f"{i:09d}" for i in range(len(s))]
        m = query_metrics(ranking(dict(zip(ids, np.asarray(s, dtype=np.float64).tolist()))),
                          {d: g for d, g in zip(ids, rel) if g > 0})
        for name in metrics:
            out[name].append(m[name])
    return {name: 100 * np.asarray(v, dtype=np.float64) for name, v in out.items()}
