"""Query-term highlighting and snippets, with offsets into the passage text."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from capr.text.analyzer import Analyzer

Span = tuple[int, int]
_recent = threading.local()  # this thread's recent analyses: highlights, snippet and evidence read the same hits
_RECENT = 64  # more than one result page of hits


def analysed(text: str, analyzer: Analyzer) -> tuple[list[tuple[str, int, int]], list[str | None]]:
    """The words of ``text`` with their spans, and each word's analysed form (None: a stopword).

    Kept for the last few texts of this thread (by identity), so that highlighting, the snippet and the
    sentence evidence of one hit analyse its words once."""
    cache = getattr(_recent, "value", None)
    if cache is None:
        cache = _recent.value = {}
    hit = cache.get(id(text))
    if hit is not None and hit[0] is text and hit[1] is analyzer:
        return hit[2], hit[3]
    words = analyzer.words(text)
    terms = analyzer.analyze_words([w for w, _, _ in words])
    if len(cache) >= _RECENT:
        del cache[next(iter(cache))]  # the oldest (dicts keep insertion order)
    cache[id(text)] = (text, analyzer, words, terms)  # holding text keeps its id from being reused
    return words, terms


@dataclass(slots=True)
class Snippet:
    text: str
    start: int  # offset of the snippet in the passage text
    highlights: list[Span]  # offsets within the snippet
    ellipsis_before: bool
    ellipsis_after: bool


def term_spans(text: str, query_terms: set[str], analyzer: Analyzer) -> list[Span]:
    """Spans of words in ``text`` whose analysed form is a query term."""
    words, terms = analysed(text, analyzer)
    return [(a, b) for (_, a, b), t in zip(words, terms) if t is not None and t in query_terms]


def snippet(text: str, query_terms: set[str], analyzer: Analyzer, width: int = 40) -> Snippet:
    """The ``width``-word window with most query-term hits."""
    words, terms = analysed(text, analyzer)
    hits = [1 if t is not None and t in query_terms else 0 for t in terms]
    if len(words) <= width:
        lo, hi = 0, len(words)
    else:
        best, best_i, cur = -1, 0, sum(hits[:width])
        for i in range(len(words) - width + 1):
            if i:
                cur += hits[i + width - 1] - hits[i - 1]
            if cur > best:
                best, best_i = cur, i
        lo, hi = best_i, best_i + width
    if not words:
        return Snippet(text, 0, [], False, False)
    start = words[lo][1] if lo > 0 else 0
    end = words[hi - 1][2] if hi < len(words) else len(text)
    spans = [(a - start, b - start) for (w, a, b), h in zip(words[lo:hi], hits[lo:hi]) if h]
    return Snippet(text[start:end], start, spans, lo > 0, hi < len(words))
