"""Rank metrics, one definition each, for every layer that scores a ranking: ``capr eval`` (capr.eval.metrics,
trec_eval's definitions), the trainers' dev checks (capr.train.loop) and the case benchmarks (capr.cases). A ranking
is given as its relevance flags, best first; how a ranking is read from scores is the caller's rule: ``capr eval``
orders equal scores by document id, as trec_eval does (capr.eval.metrics.ranking); a dev check or a case benchmark
ranks them against the scorer (:func:`relevance_by_score`), so a scorer that ties everything cannot look good."""

from __future__ import annotations

from typing import Sequence

import numpy as np

Flags = Sequence[bool] | np.ndarray  # a ranking's relevance flags, best first


def relevance_by_score(scores: Sequence[float] | np.ndarray, relevant: Sequence[bool] | np.ndarray) -> np.ndarray:
    """The relevance flags of candidates ranked by score, highest first; among equal scores the non-relevant come
    first (ties are counted against the scorer)."""
    flags = np.asarray(relevant, dtype=bool)
    return flags[np.lexsort((flags, -np.asarray(scores, dtype=np.float64)))]


def first_relevant_rank(hits: Flags) -> int | None:
    """The rank (from 1) of the first relevant item; None when none is ranked."""
    found = np.flatnonzero(np.asarray(hits, dtype=bool))
    return int(found[0]) + 1 if len(found) else None


def reciprocal_rank(hits: Flags, depth: int | None = None) -> float:
    """1 / the rank of the first relevant item (MRR's term); 0 when none is ranked (within the top ``depth``)."""
    first = first_relevant_rank(hits)
    return 1.0 / first if first and (depth is None or first <= depth) else 0.0


def success_at(hits: Flags, k: int) -> float:
    """1 when a relevant item is among the top ``k``, else 0 (P@1 at k = 1)."""
    first = first_relevant_rank(hits)
    return 1.0 if first is not None and first <= k else 0.0


def recall_at(hits: Flags, k: int, n_relevant: int) -> float:
    """The share of the ``n_relevant`` relevant items ranked among the top ``k``."""
    return int(np.count_nonzero(np.asarray(hits, dtype=bool)[:k])) / n_relevant


def average_precision(hits: Flags, n_relevant: int | None = None) -> float:
    """The precision at each relevant item's rank, summed and divided by ``n_relevant`` (every relevant item, ranked
    or not: one never ranked counts as missed; None: those ranked); 0 without relevant items."""
    flags = np.asarray(hits, dtype=bool)
    n = int(flags.sum()) if n_relevant is None else n_relevant
    if not n:
        return 0.0
    ranks = np.flatnonzero(flags) + 1
    return float(np.sum(np.arange(1, len(ranks) + 1) / ranks) / n)


def average_precision_by_score(scores: Sequence[float] | np.ndarray, relevant: Sequence[bool] | np.ndarray) -> float:
    """:func:`average_precision` of candidates ranked by score, ties against the scorer (:func:`relevance_by_score`)."""
    return average_precision(relevance_by_score(scores, relevant))


__all__ = ["average_precision", "average_precision_by_score", "first_relevant_rank", "recall_at", "reciprocal_rank",
           "relevance_by_score", "success_at"]
