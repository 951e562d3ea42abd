"""BM25's share in the hybrid fusion of a free-text question, from how rare its words are in this index (issue 36).
A question whose words are rare here ("ddt", "turmeric curcumin") is one BM25 answers well: its share rises to
dense's (1 : 1 instead of the default 1 : 4). Off unless asked (``SearchOptions(fusion_by_question=True)``,
`capr search --fusion-by-question`): on medication questions the rarest words are brand names ("eliquis",
"topamax") that BM25 matches literally while the answer names the generic drug, and the share cost them with
MiniLM (docs/RESULTS.md, issue 53). A word's rarity is its IDF in the index (about log(passages / passages
with the word)); a question's is the mean over its distinct terms (a term the index lacks counts 0: BM25 cannot use it).

Two readings of "rare" must agree before BM25's share rises:
- **relative**: the mean IDF over the largest IDF the index can give (the log of its passage count) is at least
  ``RARE_WORDS``. On a small index this ratio is large for nearly every word — a word in one of 300 passages reads
  as rare as a name in one of a million — and it gave a paraphrase ("blood thinner for an irregular heartbeat", the
  demo corpus) to BM25's literal match;
- **absolute**: the mean IDF is at least ``RARE_WORDS_IDF`` nats: the question's words are, on average, in at most
  one passage in e⁴ ≈ 55. An index of a few hundred passages rarely has the statistics to say that.
On the free-text dev sets (234–3,510 passages; 0.5 × log 2,750 passages = 3.96 nats) the two select the same
questions but one (of 49 on consumer-dev-sections; no score moved), so the absolute threshold adds no choice of its
own there; it decides only where the dev sets' indexes cannot: on small ones. On a large index the ratio is the
binding reading (NFCorpus dev with distractors, 60k passages: +2.5 nDCG@10 over a fixed 1 : 4; docs/RESULTS.md).
(Lowering BM25's share for questions of common words helped the consumer dev set but cost MEDIQA training set 2,
so it is not done.)

⟨entity, aspect⟩ queries, an index that records its own fusion (`capr adapt`) and a fusion the caller chose keep
theirs; a store without term statistics (Milvus: every term weighs 1) keeps the default. The thresholds were chosen
on the free-text dev sets only (experiments/free_text_dev.py, docs/RESULTS.md, free-text dev sets).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from capr.search.fusion import FusionConfig

RARE_WORDS = 0.5  # mean IDF / log(passages) at or above this (and RARE_WORDS_IDF): BM25 : dense = 1 : 1
RARE_WORDS_IDF = 4.0  # nats: the mean question word in at most one passage in e⁴ ≈ 55
RARE_SHARES = (0.5, 0.5)


def mean_idf(store: Any, terms: list[str]) -> float | None:
    """Mean IDF of the distinct ``terms`` in the store's index; None when it cannot tell (no terms, no statistics)."""
    distinct = list(dict.fromkeys(terms))
    if not distinct or int(store.live_count()) < 2:
        return None
    idf = store.term_idf(distinct)
    if not idf:
        return None
    return sum(max(0.0, idf.get(t, 0.0)) for t in distinct) / len(distinct)


def informativeness(store: Any, terms: list[str]) -> float | None:
    """:func:`mean_idf` over log(passages): a clarity-like ratio in 0..1; None when the index cannot tell."""
    mean = mean_idf(store, terms)
    return None if mean is None else mean / math.log(int(store.live_count()))


def question_fusion(store: Any, pq: Any, fusion: FusionConfig) -> FusionConfig:
    """The fusion for the free-text question ``pq``: ``fusion``, or BM25 as dense when its words are rare here."""
    if pq.structured or len(fusion.weights) != 2:
        return fusion
    mean = mean_idf(store, pq.terms)
    if mean is None or mean < RARE_WORDS_IDF or mean / math.log(int(store.live_count())) < RARE_WORDS:
        return fusion
    return replace(fusion, weights=RARE_SHARES)


__all__ = ["RARE_SHARES", "RARE_WORDS", "RARE_WORDS_IDF", "informativeness", "mean_idf", "question_fusion"]
