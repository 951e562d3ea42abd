"""Sentence spans of a text (nupunkt), as character offsets: the one sentence splitter behind segmentation,
evidence sentences and a passage's lazily computed sentences (``capr.records.Passage.sentences``). A leaf: it reads
no records, so the typed records can call it."""

from __future__ import annotations

import re
from functools import lru_cache

from capr.text.deid import has_placeholders, merge_split_placeholders, placeholder_spans

Span = tuple[int, int]


@lru_cache(maxsize=1)
def _nupunkt():
    import nupunkt

    return nupunkt


_SENT_END = re.compile(r"[.?!]")


_LINE_RE = re.compile(r"[^\n]+")
# nupunkt holds a token list of the text it splits: a line longer than this (a whole dump on one line) is split a
# window at a time, so memory follows the window, not the line. Shorter lines, i.e. every real document, are
# split in one call as always.
SENTENCE_WINDOW = 100_000


def _line_sentences(chunk: str) -> list[Span]:
    """nupunkt's sentence spans of one line (offsets within it)."""
    # a line whose only sentence-ending characters (".", "?", "!": nupunkt's sent_end_chars) are at its end is
    # one sentence: nupunkt breaks only after one of them when another word follows. Most of the time of
    # indexing was spent asking it about such lines.
    raw = _nupunkt().sent_spans(chunk) if _SENT_END.search(chunk.rstrip().rstrip(".?!")) else [(0, len(chunk))]
    if len(raw) > 1 and has_placeholders(chunk):
        # a de-identification surrogate is one opaque token: never end a sentence inside it
        raw = merge_split_placeholders(raw, placeholder_spans(chunk))
    return raw


def _long_line_sentences(text: str, a0: int, b0: int) -> list[Span]:
    """Sentence spans (offsets within text[a0:b0]) of a line longer than SENTENCE_WINDOW: nupunkt on one window at
    a time. The last sentence of a window may be cut by its edge, so the next window starts at it, with the
    sentence before it as context (nupunkt decides a break from the words on both sides of it)."""
    out: list[Span] = []
    pos = ctx = a0  # sentences are emitted from pos on; the window starts at ctx
    while pos < b0:
        stop = min(b0, pos + SENTENCE_WINDOW)
        if stop < b0:  # end the window at a blank, never inside a word
            blank = text.rfind(" ", pos + SENTENCE_WINDOW // 2, stop)
            stop = blank if blank > pos else stop
        raw = [(ctx + a, ctx + b) for a, b in _line_sentences(text[ctx:stop])]
        raw = [(max(a, pos), b) for a, b in raw if b > pos]  # what the context sentence covers was emitted before
        following = stop
        if stop < b0 and len(raw) > 1:
            following = raw[-1][0]  # the last sentence may be cut: read it again in the next window
            ctx = raw[-2][0]
            raw = raw[:-1]
        else:
            ctx = stop
        # (a window with no sentence end is taken as one sentence: the line moves on either way)
        out.extend((a - a0, b - a0) for a, b in raw)
        pos = following
    return out


def split_sentences(text: str, start: int = 0, end: int | None = None) -> list[Span]:
    """Sentence spans within text[start:end] (nupunkt: robust to "Dr.", "e.g.", "pts."),
    trimmed of surrounding whitespace; line breaks inside a section also end sentences
    so list items and headings do not swallow the next line."""
    end = len(text) if end is None else end
    spans: list[Span] = []
    for line in _LINE_RE.finditer(text, start, end):
        a0, b0 = line.start(), line.end()
        if b0 - a0 > SENTENCE_WINDOW:
            raw = _long_line_sentences(text, a0, b0)
        else:
            chunk = text[a0:b0]
            if not chunk.strip():
                continue
            raw = _line_sentences(chunk)
        for a, b in raw:
            a, b = a0 + a, a0 + b
            while a < b and text[a].isspace():
                a += 1
            while b > a and text[b - 1].isspace():
                b -= 1
            if b > a:
                spans.append((a, b))
    return spans


def passage_sentences(text: str, start: int) -> list[Span]:
    """The sentences (document offsets) of a passage that is a whole section, from its text and its start: what
    :func:`section_passages` computes for it, since split_sentences only looks at the characters of its range."""
    return [(start + a, start + b) for a, b in split_sentences(text)]
