"""The codes whose ICD-10-CM names best match a description: BM25 of each name's analysed words against the
description's, with the index's analyzer and idf (names are short: b 0.75 over the names' mean length, k1 1.2). Only
names sharing a word with the description are ranked, and only the codes the index's labelled cases carry (the label
space a similar-case vote can reach). One of the rankings of the differential (capr.cases.differential), weighted
``WEIGHTS["names"]`` there; on CodiEsp, votes and names fused 1 : 1 were chosen on a fifth of CodiEsp *train* as
queries over the other four fifths (experiments.cases_similar_dev --tune; docs/RESULTS.md, "Fusion weights, chosen on
CodiEsp TRAIN")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from capr.cases.icd10 import code_name
from capr.cases.similar_eval import VOTE_K

if TYPE_CHECKING:
    from capr.index.index import Index

_K1, _B = 1.2, 0.75


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


__all__ = ["NameMatcher", "VOTE_K"]
