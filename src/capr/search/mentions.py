"""Whether a passage names an entity, read from its sentences: a note whose review of systems says "No
lymphadenopathy" only denies it, and one whose "heart rate" and "renal failure" share no sentence never names heart
failure, though every word of the name is in it."""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

import numpy as np

from capr.text.analyzer import Analyzer
from capr.text.negation import Negation, negations
from capr.records import Passage
from capr.search.evidence import passage_sentences
from capr.search.highlight import analysed


def names_entity(passage: Passage, forms: Sequence[Sequence[str]], analyzer: Analyzer) -> bool:
    """Whether ``passage`` names the entity: its document's title holds every term of one of the entity's ``forms``
    (analysed terms, as :func:`capr.search.tiers.entity_forms` gives them), or one of its sentences does without negating it
    (capr.text.negation)."""
    wanted = [set(form) for form in forms if form]
    if not wanted:
        return False
    if passage.title:
        title_terms = set(analyzer(passage.title))
        if any(form <= title_terms for form in wanted):
            return True
    words, terms = analysed(passage.text, analyzer)
    starts = [a for _, a, _ in words]
    for a, b, sentence in passage_sentences(passage):
        lo, hi = a - passage.start, b - passage.start
        i, j = bisect_left(starts, lo), bisect_left(starts, hi)
        first: dict[str, tuple[int, int]] = {}
        for (_, s, e), term in zip(words[i:j], terms[i:j]):
            if term is not None and term not in first:
                first[term] = (s, e)
        found = None
        for form in wanted:
            if not form <= first.keys():
                continue
            start = min(first[t][0] for t in form) - lo
            end = max(first[t][1] for t in form) - lo
            found = negations(sentence) if found is None else found
            if not any(_denies(n, sentence, start, end, form, analyzer) for n in found):
                return True
    return False


def naming_flags(passages: Sequence[Passage], forms: Sequence[Sequence[str]], analyzer: Analyzer) -> np.ndarray:
    """For each passage, whether it names the entity (:func:`names_entity`)."""
    return np.fromiter((names_entity(p, forms, analyzer) for p in passages), dtype=bool, count=len(passages))


def _denies(negation: Negation, sentence: str, start: int, end: int, form: set[str], analyzer: Analyzer) -> bool:
    """Whether ``negation`` denies the name found at ``[start, end)`` (from its first word's first place to its last
    word's, which may lie far apart in a sentence): its scope reaches the name, and its trigger is none of the
    name's own words ("lack of appetite" named as the entity is not denied by its "lack of")."""
    (a, b), trigger = negation.scope, sentence[slice(*negation.trigger)]
    return a < end and start < b and not (set(analyzer(trigger)) & form)


__all__ = ["names_entity"]
