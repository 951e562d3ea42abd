"""Ranking metrics, as percentages averaged over queries (trec_eval definitions).

nDCG uses linear gain (the relevance grade), as trec_eval does.
P@1 counts a relevant passage at rank 1 (trec_eval's P_1); R@100 is trec_eval's recall_100.
Recall@k is the fraction of a query's relevant passages in the top k; queries
with no retrieved relevant passage count as 0 everywhere.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

METRICS = ("R@1", "R@5", "R@10", "MAP", "MRR@10", "nDCG@10")
ALL_METRICS = METRICS + ("P@1", "R@100")


def _ranked(scores: Mapping[str, float]) -> list[str]:
    # trec_eval order: score descending, then doc id descending for ties
    return [d for d, _ in sorted(scores.items(), key=lambda x: (-x[1], _neg(x[0])))]


class _neg(str):
    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)


def query_metrics(ranking: list[str], relevant: Mapping[str, int]) -> dict[str, float]:
    rel = {d for d, r in relevant.items() if r > 0}
    n_rel = len(rel)
    if n_rel == 0:
        return {m: 0.0 for m in ALL_METRICS}
    hits = [d in rel for d in ranking]
    out = {f"R@{k}": sum(hits[:k]) / n_rel for k in (1, 5, 10, 100)}
    out["P@1"] = float(bool(hits) and hits[0])
    found, ap = 0, 0.0
    for i, h in enumerate(hits, 1):
        if h:
            found += 1
            ap += found / i
    out["MAP"] = ap / n_rel
    first = next((i for i, h in enumerate(hits[:10], 1) if h), None)
    out["MRR@10"] = 1.0 / first if first else 0.0
    dcg = sum(relevant.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranking[:10], 1) if relevant.get(d, 0) > 0)
    ideal = sorted((r for r in relevant.values() if r > 0), reverse=True)[:10]
    idcg = sum(r / math.log2(i + 1) for i, r in enumerate(ideal, 1))
    out["nDCG@10"] = dcg / idcg if idcg else 0.0
    return out


def per_query_metrics(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
                      names: Sequence[str] = METRICS) -> dict[str, list[float]]:
    """metric → its value (percent) for each query of ``qrels``, in sorted qid order (paired tests read these)."""
    out: dict[str, list[float]] = {m: [] for m in names}
    for qid in sorted(qrels):
        m = query_metrics(_ranked(run.get(qid, {})), qrels[qid])
        for k in names:
            out[k].append(100.0 * m[k])
    return out


def evaluate(run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]],
             names: Sequence[str] = METRICS) -> dict[str, float]:
    """Mean metrics (percent) over all queries in ``qrels``; ``run`` maps qid → {pid: score}."""
    if not qrels:
        raise ValueError("no queries to evaluate")
    totals = {m: 0.0 for m in names}
    for qid, rel in qrels.items():
        m = query_metrics(_ranked(run.get(qid, {})), rel)
        for k in names:
            totals[k] += m[k]
    return {k: round(100.0 * v / len(qrels), 2) for k, v in totals.items()}
