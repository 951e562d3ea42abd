"""De-identification placeholders in real clinical notes.

MIMIC-III replaces names, dates, places and numbers by bracketed surrogates (``[**Known lastname 123**]``,
``[**2151-7-16**]``, ``[**Hospital1 18**]``); MIMIC-IV-Note by three or more underscores (``___``). They
are opaque tokens: a sentence must not end inside one, and none may become a labelled entity.
"""

from __future__ import annotations

import re

from capr.text.spans import Span

# Non-greedy and bounded: a stray "[**" without its "**]" must not swallow the rest of the note.
PLACEHOLDER_RE = re.compile(r"\[\*\*[^\n]{0,120}?\*\*\]|_{3,}")


def placeholder_spans(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    """Offsets (into ``text``) of every placeholder within text[start:end]."""
    return [(m.start(), m.end()) for m in PLACEHOLDER_RE.finditer(text, start, len(text) if end is None else end)]


def has_placeholders(text: str) -> bool:
    return "[**" in text or "___" in text


def inside_placeholder(spans: list[Span], start: int, end: int) -> bool:
    """Whether [start, end) overlaps any placeholder span."""
    return any(a < end and start < b for a, b in spans)


def merge_split_placeholders(spans: list[Span], placeholders: list[Span]) -> list[Span]:
    """Sentence spans where no boundary falls inside a placeholder: a sentence that ends inside one is
    joined with the next ("[**First Name8 (NamePattern2) 123**]" must stay in one sentence)."""
    if not placeholders or len(spans) < 2:
        return spans
    out: list[Span] = [spans[0]]
    for a, b in spans[1:]:
        pa, pb = out[-1]
        if any(x < pb < y or x < a < y for x, y in placeholders):
            out[-1] = (pa, b)
        else:
            out.append((a, b))
    return out


def mask_placeholders(text: str) -> str:
    """``text`` with every placeholder blanked to spaces (same length, so offsets stay valid): what a
    dictionary NER reads, so "[**Hospital1 18**]" or "[**Known lastname 123**]" can never become an entity."""
    if not has_placeholders(text):
        return text
    return PLACEHOLDER_RE.sub(lambda m: " " * (m.end() - m.start()), text)
