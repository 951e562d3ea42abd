"""Document context for passage encoders (the CAPR paper's Longformer idea without Longformer weights): a passage
is read with its document title, and optionally its heading, in front of its text."""
from __future__ import annotations

from enum import Enum

from capr.errors import CaprError


class PassageContext(str, Enum):
    off = "off"
    title = "title"  # "title: text" — safe on benchmarks whose headings are the answers' aspects
    title_heading = "title+heading"  # "title › heading: text"; a heading that is a question is left out


def parse_context(value: "str | bool | PassageContext | None") -> PassageContext:
    """Model cards written before the modes existed stored a bool (True meant title and heading)."""
    if value is None or value is False:
        return PassageContext.off
    if value is True:
        return PassageContext.title_heading
    try:
        return PassageContext(value)
    except ValueError:
        raise CaprError(f"unknown passage context {value!r}; choose one of {[c.value for c in PassageContext]}") from None


def contextual_text(text: str, title: str, heading: str, mode: PassageContext) -> str:
    if mode is PassageContext.off:
        return text
    # a question heading ("What are the symptoms of X?") restates the query; the model must read the answer instead
    section = heading.strip() if mode is PassageContext.title_heading and not heading.rstrip().endswith("?") else ""
    head = " › ".join(x for x in ((title or "").strip(), section) if x)
    return f"{head}: {text}" if head else text

def read_passage(passage, mode: PassageContext, index_text: str | None = None) -> str:
    """What a model trained with context ``mode`` reads for a passage: with its document context, or without one the
    index text when given (the passage, with its title when the index includes titles), else the passage text."""
    if mode is PassageContext.off:
        return passage.text if index_text is None else index_text
    return contextual_text(passage.text, passage.title, passage.heading, mode)


__all__ = ["PassageContext", "contextual_text", "parse_context", "read_passage"]
