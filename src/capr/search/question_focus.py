"""What a free-text question is about, read from the index's own titles (issue 36).

**The question's focus.** A question that names the title of a document the search may return ("how is gout
treated?" over an index with a document titled "Gout") is searched as about that entity: the same entity tiers an
⟨entity, aspect⟩ query gets (passages of documents naming the entity first), so another disease's answer cannot
come first. The focus is looked for among the titles of the question's best BM25 passages (``FOCUS_DEPTH``), under
the search's own filter, so it is never the title of a document the caller may not read. Only an unambiguous focus
counts: the named titles, after dropping those whose words lie inside another named title, must read alike.

**The wording-derived aspect prior.** "How is gout treated?" reads as the
treatment aspect; favouring every document's treatment section would put the treatment of *other* diseases above
gout's own answer. The wording-derived aspect prior therefore applies only inside the entity's tier: to passages
of documents whose title the question names (every analysed word of the title is among the question's), an entity
the index itself knows. A question that names no title of the index gets no wording-derived prior. An aspect given
explicitly (⟨entity, aspect⟩ queries, ``--aspect``) is not affected.

Chosen on the free-text dev sets only (experiments/free_text_dev.py, docs/RESULTS.md, free-text dev sets).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from capr.search.first_stage import lexical_retriever
from capr.store.protocol import Capability

if TYPE_CHECKING:
    from capr.search.query import ParsedQuery

FOCUS_DEPTH = 100  # BM25 passages whose titles may be the question's focus

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
        titles = store.titles(np.asarray(keys, dtype=np.int64))
    return titles_named(store.analyzer, pq.terms, titles)


def focus_among(analyzer: Callable[[str], list[str]], question_terms: Sequence[str], titles: Sequence[str]) -> str | None:
    """The one title of ``titles`` that the question names, if the question names exactly one (titles whose words
    all lie inside another named title's do not count; titles that read alike count once); else None."""
    named = [t for t, ok in zip(titles, titles_named(analyzer, question_terms, titles)) if ok]
    if not named:
        return None
    terms = {t: _title_terms(analyzer, t) for t in named}
    outer = [t for t in named if not any(terms[t] < terms[o] for o in named)]
    return outer[0] if len({terms[t] for t in outer}) == 1 else None


def question_focus(store: Any, pq: "ParsedQuery", flt: Any) -> str | None:
    """The entity a free-text question is about, as the index knows it: the title of a document among the
    question's best BM25 passages under the filter ``flt`` that the question names (see :func:`focus_among`).
    None for a structured query, a store without titles or BM25, or a question naming no title or several."""
    if pq.structured or not pq.terms or Capability.bm25 not in store.capabilities:
        return None
    keys, _ = lexical_retriever(store).top(pq, FOCUS_DEPTH, flt)
    if not len(keys):
        return None
    titles = list(dict.fromkeys(t for t in store.titles(keys) if t))
    return focus_among(store.analyzer, pq.terms, titles)


__all__ = ["FOCUS_DEPTH", "focus_among", "question_focus", "titles_named", "wording_prior_rows"]
