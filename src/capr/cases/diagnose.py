"""The codes whose ICD-10-CM names best match a description: BM25 of each name's analysed words against the
description's, with the index's analyzer and idf (names are short: b 0.75 over the names' mean length, k1 1.2). Only
names sharing a word with the description are ranked, and only the codes the index's labelled cases carry (the label
space a similar-case vote can reach). One of the rankings of the differential (capr.cases.differential), weighted
``WEIGHTS["names"]`` there; on CodiEsp, votes and names fused 1 : 1 were chosen on a fifth of CodiEsp *train* as
queries over the other four fifths (experiments.cases_similar_dev --tune; docs/RESULTS.md, "Fusion weights, chosen on
CodiEsp TRAIN").

The codes list (:func:`likely_codes`) is that fusion alone: the similar cases' codes ranked as a coder would assign
them, symptoms among the rest (CodiEsp's coders code symptoms: R50.9 fever). It stands beside the differential, which
ranks conditions and puts symptoms last (capr.cases.differential): a clinician's list and a coder's list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from capr.cases.icd10 import code_name
from capr.cases.similar_eval import VOTE_K, fuse_scored, vote

if TYPE_CHECKING:
    from capr.index.index import Index

_K1, _B = 1.2, 0.75
# the codes list: the similar cases' votes and the codes whose names match, fused 1 : 1 (chosen on CodiEsp train:
# docs/RESULTS.md, "Fusion weights, chosen on CodiEsp TRAIN")
CODE_WEIGHTS = {"votes": 1.0, "names": 1.0}


@dataclass(slots=True)
class LikelyCode:
    """One code of the codes list: what a coder would assign the described case, as the most similar coded cases
    were coded. Symptoms (R00–R99) rank among the diagnoses here, as coders code them."""

    code: str
    name: str
    rank: int
    score: float  # fused reciprocal-rank score of the votes and the names
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


def likely_codes(voters: Sequence[Sequence[str]], names: NameMatcher, query_terms: set[str], n: int) -> list[LikelyCode]:
    """The ``n`` likeliest codes: the votes of ``voters`` (the codes of the most similar labelled cases, best first)
    fused with the codes whose names share words with the description (``query_terms``, analysed)."""
    if n < 1 or not names.codes:
        return []
    fused = fuse_scored({"votes": vote(voters), "names": names.ranked(query_terms)}, CODE_WEIGHTS)
    return [LikelyCode(code, code_name(code) or code, r, score, sum(code in v for v in voters[:VOTE_K]),
                       names.shared_words(code, query_terms)) for r, (code, score) in enumerate(fused[:n], 1)]


__all__ = ["CODE_WEIGHTS", "LikelyCode", "NameMatcher", "VOTE_K", "likely_codes"]
