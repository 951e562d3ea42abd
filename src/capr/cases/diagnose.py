"""The diagnoses a described patient likely has, ranked: what `capr cases similar` lists above the similar cases.

Two rankings of ICD-10-CM codes, fused by weighted reciprocal rank (capr.cases.similar_eval.fuse_scored, k 60):

- **votes**: the codes of the most similar *labelled* cases, each of the first ``VOTE_K`` (20) voting 1/rank for
  each of its codes (capr.cases.similar_eval.vote);
- **names**: the codes whose ICD-10-CM names best match the description — BM25 of each name's analysed words
  against the description's, with the index's analyzer and idf (names are short: b 0.75 over the names' mean
  length, k1 1.2). Only names sharing a word with the description are ranked.

The codes ranked are those the index's labelled cases carry (the label space a similar-case vote can reach), so an
index without labelled cases gets no ranking. Weights (``DIAGNOSIS_WEIGHTS``): votes 1, names 1, chosen on a fifth
of CodiEsp *train* as queries over the other four fifths (experiments.cases_similar_dev --tune; docs/RESULTS.md,
"Fusion weights, chosen on CodiEsp TRAIN"). The grid's best also gave MiniLM-ranked names a weight of 0.25 (+0.1 MAP
on that split); it is left out so that ranking needs no encoder at query time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from capr.cases.icd10 import code_name
from capr.cases.similar_eval import VOTE_K, fuse_scored

if TYPE_CHECKING:
    from capr.index.index import Index

DIAGNOSIS_WEIGHTS = {"votes": 1.0, "names": 1.0}
_K1, _B = 1.2, 0.75


@dataclass(slots=True)
class LikelyDiagnosis:
    code: str
    name: str
    rank: int
    score: float  # fused reciprocal-rank score
    cases: int  # how many of the voting cases carry the code
    name_words: list[str] = field(default_factory=list)  # analysed words its name shares with the description

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "rank": self.rank, "score": round(self.score, 6),
                "cases": self.cases, "name_words": self.name_words}


class NameMatcher:
    """BM25 of ICD-10-CM names (one per code) against a description, with an index's analyzer and idf."""

    def __init__(self, index: "Index", codes: Sequence[str]) -> None:
        self.codes = list(codes)
        self.analyze = index.analyzer
        self.terms = [self.analyze(code_name(c) or c) for c in self.codes]
        self.idf = index.term_idf(sorted({t for ts in self.terms for t in ts})) if self.codes else {}
        lengths = np.array([len(ts) for ts in self.terms], dtype=np.float64)
        mean_length = float(lengths.mean()) if len(lengths) else 1.0
        self.norms = _K1 * (1 - _B + _B * lengths / mean_length)  # BM25's length normalisation, per name
        self.position = {c: j for j, c in enumerate(self.codes)}

    def scores(self, description: str) -> np.ndarray:
        return self.term_scores(set(self.analyze(description)))

    def term_scores(self, query_terms: set[str]) -> np.ndarray:
        s = np.zeros(len(self.codes))
        for j, ts in enumerate(self.terms):
            for t in set(ts) & query_terms:
                tf = ts.count(t)
                s[j] += float(self.idf.get(t, 0.0)) * tf * (_K1 + 1) / (tf + self.norms[j])
        return s

    def ranked(self, query_terms: set[str]) -> list[str]:
        """Codes whose names share a word with the (analysed) description, best first (ties: label-space order)."""
        s = self.term_scores(query_terms)
        return [self.codes[j] for j in np.lexsort((np.arange(len(s)), -s)) if s[j] > 0]

    def shared_words(self, code: str, query_terms: set[str]) -> list[str]:
        return sorted(set(self.terms[self.position[code]]) & query_terms, key=lambda t: -float(self.idf.get(t, 0.0)))


def fuse_diagnoses(votes: Sequence[str], names: Sequence[str],
                   weights: dict[str, float] | None = None) -> list[tuple[str, float]]:
    """(code, fused score), best first: the votes' ranking and the names' ranking by weighted reciprocal rank."""
    return fuse_scored({"votes": votes, "names": names}, DIAGNOSIS_WEIGHTS if weights is None else weights)


__all__ = ["DIAGNOSIS_WEIGHTS", "LikelyDiagnosis", "NameMatcher", "VOTE_K", "fuse_diagnoses"]
