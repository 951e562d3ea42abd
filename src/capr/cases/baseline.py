"""A lexical baseline for ranking diagnostic hypotheses against a patient description.

For each hypothesis: the passages that mention it (the whole phrase, case-insensitive, at word
boundaries) are ranked by BM25 of ``description + hypothesis``; the hypothesis scores the mean of its
top-3 BM25 scores, a missing passage counting 0 — one lucky passage should not make a hypothesis look
as well supported as three. Honest and cheap, and meant to be replaced by a learned scorer: only
``score_support`` and ``rank_hypotheses`` are the interface.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from capr.cases.mentions import check_distinct_hypotheses
from capr.errors import QueryError
from capr.store.embedded import EmbeddedStore
from capr.records import ScoredPassage

if TYPE_CHECKING:
    from capr.index.index import Index

SUPPORT_K = 3
# Phrase checks per hypothesis: candidates hold every hypothesis term, so nearly all pass;
# the bound keeps a hypothesis made of very common words from reading thousands of passages.
MAX_CHECKED = 500


@dataclass(slots=True)
class HypothesisScore:
    hypothesis: str
    score: float
    rank: int = 0
    passages: list[ScoredPassage] = field(default_factory=list)  # supporting passages, best first
    candidates: int = 0  # live passages holding every term of the hypothesis (before the phrase check)


def mention_pattern(hypothesis: str) -> re.Pattern[str]:
    """The hypothesis as a phrase: case-insensitive, any whitespace between words, whole words."""
    words = hypothesis.split()
    return re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in words) + r"(?!\w)", re.IGNORECASE)


def _rows_with_all_terms(index: "Index", tokens: Sequence[str]) -> np.ndarray:
    m = index.matrix
    if m is None or not tokens:
        return np.zeros(0, dtype=np.int64)
    rows: np.ndarray | None = None
    for t in dict.fromkeys(tokens):
        tid = m.vocab.get(t)
        if tid is None:
            return np.zeros(0, dtype=np.int64)
        post = np.asarray(m.indices[m.indptr[tid] : m.indptr[tid + 1]], dtype=np.int64)
        rows = post if rows is None else np.intersect1d(rows, post, assume_unique=True)
        if not len(rows):
            break
    return rows if rows is not None else np.zeros(0, dtype=np.int64)


def score_support(scores: Sequence[float], k: int = SUPPORT_K) -> float:
    """Mean of the top-k scores, missing ones counting 0."""
    top = sorted(scores, reverse=True)[:k]
    return float(sum(top) / k) if k else 0.0


def rank_hypotheses(
    index: "Index",
    description: str,
    hypotheses: Sequence[str],
    k: int = SUPPORT_K,
    filters: dict[str, Any] | None = None,
    allow_repeats: bool = False,
) -> list[HypothesisScore]:
    """Hypotheses ranked by lexical support in the index, each with its top-``k`` supporting passages. A hypothesis
    given twice (but for case or spacing) is a QueryError unless ``allow_repeats`` (a benchmark question's options,
    as CasePipeline.rank)."""
    from capr.records import Retriever

    if not description or not description.strip():
        raise QueryError("empty patient description")
    if not hypotheses:
        raise QueryError("give at least one hypothesis")
    if k <= 0:
        raise QueryError(f"k must be positive, got {k}")
    if not allow_repeats:
        check_distinct_hypotheses(hypotheses)
    mask = EmbeddedStore.of(index).compile_filter(filters)
    if index.matrix is None:  # every document deleted: nothing supports anything
        return [HypothesisScore(hypothesis=h, score=0.0, rank=i + 1) for i, h in enumerate(hypotheses)]
    scorer = index.scorer(Retriever.bm25)
    allowed = index.live if mask is None else mask
    base = scorer.scores(index.analyzer(description))  # shared by every hypothesis: BM25 is a sum over terms
    results = []
    for i, hyp in enumerate(hypotheses):
        if not hyp or not hyp.strip():
            raise QueryError(f"hypothesis {i + 1} is empty")
        tokens = index.analyzer(hyp)
        rows = _rows_with_all_terms(index, tokens)
        rows = rows[allowed[rows]] if len(rows) else rows
        result = HypothesisScore(hypothesis=hyp, score=0.0, candidates=int(len(rows)))
        if len(rows):
            scores = base[rows] + scorer.scores(tokens)[rows]
            order = np.lexsort((rows, -scores))
            pattern = mention_pattern(hyp)
            for j in order[:MAX_CHECKED]:
                p = index.passage(int(rows[j]))
                if pattern.search(p.text):
                    result.passages.append(ScoredPassage(pid=p.pid, score=float(scores[j]), rank=len(result.passages) + 1, passage=p))
                    if len(result.passages) == k:
                        break
            result.score = score_support([sp.score for sp in result.passages], k)
        results.append(result)
    ranked = sorted(range(len(results)), key=lambda i: (-results[i].score, i))
    out = [results[i] for i in ranked]
    for r, res in enumerate(out, 1):
        res.rank = r
    return out


__all__ = ["HypothesisScore", "MAX_CHECKED", "SUPPORT_K", "mention_pattern", "rank_hypotheses", "score_support"]
