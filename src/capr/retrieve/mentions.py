"""Whether a passage names an entity, or only denies it: a note whose review of systems says "No lymphadenopathy"
is not a passage about lymphadenopathy."""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

from capr.index.analyzer import Analyzer
from capr.negation import negated_spans
from capr.records import Passage
from capr.retrieve.evidence import passage_sentences
from capr.retrieve.highlight import analysed


def names_only_negated(passage: Passage, forms: Sequence[Sequence[str]], analyzer: Analyzer) -> bool:
    """True when every sentence of ``passage`` that holds every term of one of the entity's ``forms`` (analysed
    terms, as ``Searcher.entity_forms`` gives them) negates it. False when one does not, when the document's title
    names the entity, or when no single sentence holds a whole form (a name split across sentences cannot be read
    as denied)."""
    wanted = [set(form) for form in forms if form]
    if not wanted:
        return False
    if passage.title:
        title_terms = set(analyzer(passage.title))
        if any(form <= title_terms for form in wanted):
            return False
    words, terms = analysed(passage.text, analyzer)
    starts = [a for _, a, _ in words]
    denied = False
    for a, b, sentence in passage_sentences(passage):
        lo, hi = a - passage.start, b - passage.start
        i, j = bisect_left(starts, lo), bisect_left(starts, hi)
        first: dict[str, tuple[int, int]] = {}
        for (_, s, e), term in zip(words[i:j], terms[i:j]):
            if term is not None and term not in first:
                first[term] = (s, e)
        scopes = None
        for form in wanted:
            if not form <= first.keys():
                continue
            start = min(first[t][0] for t in form) - lo
            end = max(first[t][1] for t in form) - lo
            scopes = negated_spans(sentence) if scopes is None else scopes
            if not any(s < end and start < e for s, e in scopes):
                return False
            denied = True
    return denied


__all__ = ["names_only_negated"]
