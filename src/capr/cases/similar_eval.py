"""Measuring "patients like this one" on coded cases (CodiEsp dev as queries, coded train cases as the cases that
count):

- **category precision@10**: the share of the 10 best coded cases that share an ICD-10 category (first three
  characters) with a diagnosis of the query case;
- **MAP of the diagnoses**: the query's diagnosis codes ranked by similar-case voting — each of the ``vote_k``
  (20) best coded cases gives each of its codes 1/rank — and scored by average precision over all the query's
  codes (a code no case carries counts as missed). Category MAP does the same with categories.

A baseline that ranks codes directly (ICD-10-CM names against the case text) gives the code ranking itself; the
two combine by weighted reciprocal rank (:func:`fuse_rankings`): the similar cases' votes and the direct name
rankings, each a ranked list of codes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from capr.cases.icd10 import category
from capr.rank_metrics import average_precision

VOTE_K = 20
PRECISION_K = 10


def average_precision_of(ranked: Sequence[str], gold: set[str]) -> float:
    """AP of a ranked list against every relevant item (those never ranked count as missed)."""
    return average_precision([item in gold for item in ranked], len(gold))


def category_precision(query_codes: Sequence[str], case_codes: Sequence[Sequence[str]], k: int = PRECISION_K) -> float:
    """Share of the first ``k`` cases (best first) sharing an ICD-10 category with the query."""
    want = {category(c) for c in query_codes}
    top = list(case_codes)[:k]
    return sum(bool(want & {category(c) for c in codes}) for codes in top) / k


def vote(case_codes: Sequence[Sequence[str]], k: int = VOTE_K, level: str = "code") -> list[str]:
    """Codes (or categories) ranked by the 1/rank votes of the first ``k`` cases; ties: first seen first."""
    votes: dict[str, float] = {}
    for rank, codes in enumerate(list(case_codes)[:k], 1):
        for c in dict.fromkeys(category(c) if level == "category" else c for c in codes):
            votes[c] = votes.get(c, 0.0) + 1.0 / rank
    return sorted(votes, key=lambda c: -votes[c])


@dataclass(slots=True)
class QueryScores:
    qid: str
    precision: float | None  # None for a run that ranks codes, not cases
    ap: float
    category_ap: float
    ranked_codes: list[str]


def score_case_ranking(qid: str, gold: Sequence[str], ranked_cases_codes: Sequence[Sequence[str]]) -> QueryScores:
    codes = vote(ranked_cases_codes)
    cats = vote(ranked_cases_codes, level="category")
    return QueryScores(qid, category_precision(gold, ranked_cases_codes), average_precision_of(codes, set(gold)),
                       average_precision_of(cats, {category(c) for c in gold}), codes)


def score_code_ranking(qid: str, gold: Sequence[str], ranked_codes: Sequence[str],
                       ranked_cases_codes: Sequence[Sequence[str]] | None = None) -> QueryScores:
    """A run that ranks codes itself; with ``ranked_cases_codes`` (the cases it found, best first) its category
    precision@10 is measured too."""
    cats = list(dict.fromkeys(category(c) for c in ranked_codes))
    precision = None if ranked_cases_codes is None else category_precision(gold, ranked_cases_codes)
    return QueryScores(qid, precision, average_precision_of(ranked_codes, set(gold)),
                       average_precision_of(cats, {category(c) for c in gold}), list(ranked_codes))


def fuse_scored(rankings: dict[str, Sequence[str]], weights: dict[str, float], k: int = 60) -> list[tuple[str, float]]:
    """(item, fused score) of several rankings, best first by weighted reciprocal rank (an item a ranking lacks gets
    nothing from it; a ranking without a weight, or weighted 0, is left out); ties keep the order first seen."""
    fused: dict[str, float] = {}
    for name, ranked in rankings.items():
        w = weights.get(name, 0.0)
        if w:
            for r, item in enumerate(ranked, 1):
                fused[item] = fused.get(item, 0.0) + w / (k + r)
    return sorted(fused.items(), key=lambda kv: -kv[1])


def fuse_rankings(rankings: dict[str, Sequence[str]], weights: dict[str, float], k: int = 60) -> list[str]:
    """The items of :func:`fuse_scored`, best first."""
    return [item for item, _ in fuse_scored(rankings, weights, k)]


def rrf(rankings: dict[str, np.ndarray], weights: dict[str, float], k: int = 60) -> np.ndarray:
    """Weighted reciprocal-rank fusion of score vectors over the same items: the fused score per item."""
    n = len(next(iter(rankings.values())))
    fused = np.zeros(n, dtype=np.float64)
    for name, scores in rankings.items():
        order = np.lexsort((np.arange(n), -np.asarray(scores)))
        ranks = np.empty(n, dtype=np.int64)
        ranks[order] = np.arange(1, n + 1)
        fused += weights[name] / (k + ranks)
    return fused


__all__ = ["PRECISION_K", "QueryScores", "VOTE_K", "average_precision_of", "category_precision", "fuse_rankings", "fuse_scored", "rrf",
           "score_case_ranking", "score_code_ranking", "vote"]
