"""Similar-case retrieval: a patient description and candidate hypotheses → ranked hypotheses with support.

`CasePipeline` is the SIGIR'22 method (lexical mention filter → TSDAE dense top-k → cross-encoder);
`rank_hypotheses` (baseline.py) is a model-free lexical baseline (the mean BM25 of a hypothesis' mentions)."""

from capr.cases.baseline import HypothesisScore, rank_hypotheses
from capr.cases.config import CaseConfig, CaseResult, CaseScorer, HypothesisResult, Support
from capr.cases.pipeline import CasePipeline, rank_cases

__all__ = ["CaseConfig", "CasePipeline", "CaseResult", "CaseScorer", "HypothesisResult", "HypothesisScore", "Support",
           "rank_cases", "rank_hypotheses"]
