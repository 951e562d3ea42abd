"""BM25's share in the hybrid fusion of a free-text question, from how informative its words are in this index
(issue 36). A question whose words are rare here ("ddt", "turmeric curcumin") is one BM25 answers well: its share
rises to dense's (1 : 1 instead of the default 1 : 4). Informativeness is the mean IDF of the question's distinct
terms over the largest IDF the index can give (the log of its passage count): a clarity-like ratio in 0..1.
(Lowering BM25's share for questions of common words helped the consumer dev set but cost MEDIQA training set 2,
so it is not done.)

Off by default (SearchOptions.fusion_by_question): the ratio is larger on a small index, where it gave a paraphrase
to BM25's literal match (tests/test_default_pipeline.py's demo corpus).

⟨entity, aspect⟩ queries, an index that records its own fusion (`capr adapt`) and a fusion the caller chose keep
theirs. The threshold was chosen on the free-text dev sets only (experiments/free_text_dev.py,
docs/RESULTS.md, free-text dev sets).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from capr.retrieve.fusion import FusionConfig

RARE_WORDS = 0.5  # informativeness at or above this: BM25 : dense = 1 : 1
RARE_SHARES = (0.5, 0.5)


def informativeness(store: Any, terms: list[str]) -> float | None:
    """Mean IDF of the distinct ``terms`` over log(passages); None when the index cannot tell (no statistics)."""
    distinct = list(dict.fromkeys(terms))
    passages = int(store.live_count())
    if not distinct or passages < 2:
        return None
    idf = store.term_idf(distinct)
    if not idf:
        return None
    return sum(max(0.0, idf.get(t, 0.0)) for t in distinct) / len(distinct) / math.log(passages)


def question_fusion(store: Any, pq: Any, fusion: FusionConfig) -> FusionConfig:
    """The fusion for the free-text question ``pq``: ``fusion`` with BM25's share from :func:`informativeness`."""
    if pq.structured or len(fusion.weights) != 2:
        return fusion
    score = informativeness(store, pq.terms)
    if score is None or score < RARE_WORDS:
        return fusion
    return replace(fusion, weights=RARE_SHARES)


__all__ = ["RARE_SHARES", "RARE_WORDS", "informativeness", "question_fusion"]
