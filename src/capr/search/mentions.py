"""Whether a passage names an entity, read from its sentences: a note whose review of systems says "No
lymphadenopathy" only denies it, and one whose "heart rate" and "renal failure" share no sentence never names heart
failure, though every word of the name is in it."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from capr.text.analyzer import Analyzer
from capr.records import Passage
from capr.search.evidence import sentence_mentions


def names_entity(passage: Passage, forms: Sequence[Sequence[str]], analyzer: Analyzer) -> bool:
    """Whether ``passage`` names the entity: its document's title holds every term of one of the entity's ``forms``
    (analysed terms, as :func:`capr.search.tiers.entity_forms` gives them), or one of its sentences does without
    negating it (:func:`capr.search.evidence.sentence_mentions`)."""
    wanted = [set(form) for form in forms if form]
    if not wanted:
        return False
    if passage.title:
        title_terms = set(analyzer(passage.title))
        if any(form <= title_terms for form in wanted):
            return True
    return any(m is True for m in sentence_mentions(passage, forms, analyzer))


def naming_flags(passages: Sequence[Passage], forms: Sequence[Sequence[str]], analyzer: Analyzer) -> np.ndarray:
    """For each passage, whether it names the entity (:func:`names_entity`)."""
    return np.fromiter((names_entity(p, forms, analyzer) for p in passages), dtype=bool, count=len(passages))


__all__ = ["names_entity", "naming_flags"]
