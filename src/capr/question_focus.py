"""Where the aspect a question's wording asks about may count (issue 36). "How is gout treated?" reads as the
treatment aspect; favouring every document's treatment section would put the treatment of *other* diseases above
gout's own answer. The wording-derived aspect prior therefore applies only inside the entity's tier: to passages
of documents whose title the question names (every analysed word of the title is among the question's), an entity
the index itself knows. A question that names no title of the index gets no wording-derived prior. An aspect given
explicitly (⟨entity, aspect⟩ queries, ``--aspect``) is not affected.

Chosen on the free-text dev sets only (experiments/free_text_dev.py, docs/RESULTS.md, free-text dev sets).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

import numpy as np

_TITLE_TERMS: "weakref.WeakKeyDictionary[Any, dict[str, frozenset[str]]]" = weakref.WeakKeyDictionary()
_TITLE_CACHE_SIZE = 100_000  # analysed titles kept per analyser (an index's distinct titles, usually far fewer)


def _title_terms(analyzer: Callable[[str], list[str]], title: str) -> frozenset[str]:
    try:
        cache = _TITLE_TERMS.setdefault(analyzer, {})
    except TypeError:  # an analyser that cannot be weakly referenced: analysed each time
        return frozenset(analyzer(title))
    terms = cache.get(title)
    if terms is None:
        if len(cache) >= _TITLE_CACHE_SIZE:
            cache.clear()
        terms = cache[title] = frozenset(analyzer(title))
    return terms


def titles_named(analyzer: Callable[[str], list[str]], question_terms: Sequence[str], titles: Sequence[str]) -> np.ndarray:
    """For each title: whether the question names it (the title has words and the question has every one)."""
    asked = set(question_terms)
    out = np.zeros(len(titles), dtype=bool)
    for i, title in enumerate(titles):
        if title:
            terms = _title_terms(analyzer, title)
            out[i] = bool(terms) and terms <= asked
    return out


def wording_prior_rows(store: Any, pq: Any, keys: np.ndarray, titles: Sequence[str] | None = None) -> np.ndarray:
    """Which of the candidates ``keys`` the aspect prior may favour for the parsed query ``pq``: all of them when
    the query gave its aspect; when the aspect was read from the question's wording, those whose document title
    the question names. ``titles``: the candidates' titles when the caller has the passages already."""
    if pq.query.aspect or not len(keys):
        return np.ones(len(keys), dtype=bool)
    if titles is None:
        titles = [p.title for p in store.passages(np.asarray(keys, dtype=np.int64))]
    return titles_named(store.analyzer, pq.terms, titles)


__all__ = ["titles_named", "wording_prior_rows"]
