"""Similar-case retrieval: a patient description and candidate hypotheses → ranked hypotheses with support."""

from capr.cases.baseline import HypothesisScore, rank_hypotheses

__all__ = ["HypothesisScore", "rank_hypotheses"]
