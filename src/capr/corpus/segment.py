"""Segmentation: headings → sections → sentences → passages of at most N tokens.

All spans are character offsets into ``Document.text``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from capr.text.aspects import is_known_heading, normalize_aspect
from capr.text.sentences import SENTENCE_WINDOW, split_sentences
from capr.records import Document, Passage, Section, Span

_SMALL_WORDS = {"and", "of", "the", "or", "for", "to", "in", "on", "with", "at", "by", "a", "an", "/", "&"}
_MAX_HEADING_WORDS = 7
_MAX_MARKDOWN_HEADING_CHARS = 200

_MARKDOWN_RE = re.compile(r"^[ \t]*(#{1,6})[ \t]+(?P<h>[^\n]+?)[ \t#]*$", re.M)
# Latin letters with diacritics count as letters of a heading ("EXPLORACIÓN FÍSICA:", "Anamnèse:", "ÜBERWEISUNG")
_UP = "A-ZÀ-ÖØ-Þ"
_AL = "A-Za-zÀ-ÖØ-öø-ÿ"
_NUMBERED_RE = re.compile(rf"^[ \t]*\d{{1,2}}(?:\.\d{{1,2}})*[.)]?[ \t]+(?P<h>[{_AL}][^\n.:]{{1,60}}?)[ \t]*:?[ \t]*$", re.M)
_COLON_RE = re.compile(rf"^[ \t]*(?P<h>[{_AL}][{_AL}0-9 /&\-(),']{{0,60}}?)[ \t]*:(?=[ \t]|$)", re.M)
_CAPS_LINE_RE = re.compile(rf"^[ \t]*(?P<h>[{_UP}][{_UP}0-9 /&\-]{{2,60}}?)[ \t]*$", re.M)
# A heading inside running text: "... stable. PLAN: continue". All caps only, to avoid "Note: ...".
# (the punctuation is matched, not looked behind at: the scan then skips to each ".", "!" or "?")
_INLINE_RE = re.compile(rf"[.!?][ \t]+(?P<h>[{_UP}][{_UP}/&\-]+(?:[ \t][{_UP}/&\-]+){{0,5}}):[ \t]")
_LINE_RE = re.compile(r"[^\n]+")


_NON_SPACE = re.compile(r"\S")


def _blank(text: str, start: int, end: int) -> bool:
    """``not text[start:end].strip()`` without copying the range (a section can be a whole huge document)."""
    return _NON_SPACE.search(text, start, end) is None


@lru_cache(maxsize=1 << 16)  # headings repeat from note to note ("HISTORY OF PRESENT ILLNESS")
def _looks_like_heading(h: str) -> bool:
    words = h.split()
    if not words or len(words) > _MAX_HEADING_WORDS:
        return False
    if is_known_heading(h):
        return True
    letters = [c for c in h if c.isalpha()]
    if len(letters) >= 2 and all(c.isupper() for c in letters):
        return True
    # Title Case: every word capitalised except small connecting words
    return all(w[0].isupper() or w.lower() in _SMALL_WORDS or not w[0].isalpha() for w in words)


@dataclass(slots=True)
class _Hit:
    start: int  # where the section begins (the heading itself)
    heading: str


def _line_heading(text: str, a: int, b: int) -> tuple[int, str] | None:
    """The heading the line text[a:b] is, by the first of the line patterns (Markdown, numbered, "Heading:", ALL CAPS)
    that takes it. Each pattern is only tried on a line that can hold its match (its first character, a colon, its
    length): most lines of a note are prose that none of them takes."""
    k = a
    while k < b and text[k] in " \t":
        k += 1
    if k == b:
        return None
    c = text[k]
    if c == "#" and (m := _MARKDOWN_RE.match(text, a, b)):
        # a "# ..." line that runs on is text, not a heading: every passage of a section stores its heading
        if m.end("h") - m.start("h") <= _MAX_MARKDOWN_HEADING_CHARS and (h := m.group("h").strip()):
            return a, h
    if c.isdecimal() and (m := _NUMBERED_RE.match(text, a, b)):
        h = m.group("h")
        if _looks_like_heading(h) and len(h.split()) <= 5 and h.strip():
            return a, h.strip()
    if text.find(":", k, b) >= 0 and (m := _COLON_RE.match(text, a, b)):
        h = m.group("h")
        if _looks_like_heading(h) and h.strip():
            return a, h.strip()
    if (b - k <= 61 or len(text[k:b].rstrip(" \t")) <= 61) and (m := _CAPS_LINE_RE.match(text, a, b)):
        h = m.group("h")
        if sum(ch.isalpha() for ch in h) >= 3 and _looks_like_heading(h) and h.strip():
            return a, h.strip()
    return None


def detect_headings(text: str) -> list[_Hit]:
    hits: dict[int, _Hit] = {}
    for line in _LINE_RE.finditer(text):
        found = _line_heading(text, *line.span())
        if found is not None:
            hits[found[0]] = _Hit(*found)
    for m in _INLINE_RE.finditer(text):
        heading, start = m.group("h").strip(), m.start("h")
        if heading and start not in hits:
            hits[start] = _Hit(start, heading)
    return [hits[k] for k in sorted(hits)]


_aspect_of = lru_cache(maxsize=1 << 16)(normalize_aspect)  # headings repeat from note to note


def detect_sections(text: str) -> list[Section]:
    """Sections from headings; text before the first heading becomes an untitled section.
    Sections that hold nothing but their heading are dropped."""
    hits = detect_headings(text)
    bounds = [h.start for h in hits] + [len(text)]
    sections: list[Section] = []
    if hits and not _blank(text, 0, hits[0].start):
        sections.append(Section(heading="", aspect="", start=0, end=hits[0].start))
    for hit, end in zip(hits, bounds[1:]):
        line_end = text.find("\n", hit.start, end)
        heading_end = end if line_end < 0 else line_end
        colon = text.find(":", hit.start, heading_end)
        if _blank(text, heading_end, end) and (colon < 0 or _blank(text, colon + 1, heading_end)):
            continue  # nothing after the heading, on its line or below
        sections.append(Section(heading=hit.heading, aspect=_aspect_of(hit.heading), start=hit.start, end=end))
    return [_trim(s, text) for s in sections]


def _trim(section: Section, text: str) -> Section:
    start, end = section.start, section.end
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    section.start, section.end = start, end
    return section


_PARA_RE = re.compile(r"\n[ \t]*\n")


def paragraph_sections(text: str) -> list[Section]:
    """Fallback for documents without headings: one section per paragraph."""
    out, pos = [], 0
    for m in list(_PARA_RE.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        if not _blank(text, pos, end):
            out.append(_trim(Section(heading="", aspect="", start=pos, end=end), text))
        pos = m.end() if m else len(text)
    return out


_WORD_RE = re.compile(r"\S+")
_INNER_BREAK_RE = re.compile(r"[.?!](?=\S)")  # a sentence end inside a run of non-blank characters
_OTHER_BLANK_RE = re.compile(r"[^\S \n]")  # a blank (\s) other than a space or a line break


def count_tokens(text: str) -> int:
    return len(_WORD_RE.findall(text))


@dataclass(slots=True)
class SegmenterConfig:
    max_tokens: int = 200  # 0 = never split a section
    overlap: int = 0  # tokens of trailing sentences repeated at the start of the next passage
    include_title: bool = True  # lexical index sees "title + passage"


def _split_long(text: str, span: Span, max_tokens: int) -> list[Span]:
    """Hard split of one over-long sentence at word boundaries."""
    words = [(span[0] + m.start(), span[0] + m.end()) for m in _WORD_RE.finditer(text[span[0]:span[1]])]
    return [(words[i][0], words[min(i + max_tokens, len(words)) - 1][1]) for i in range(0, len(words), max_tokens)]


def _is_heading_line(text: str, span: Span, heading: str) -> bool:
    line = text[span[0]:span[1]].strip().lstrip("#0123456789.) ").rstrip(": ")
    return line.lower() == heading.lower()


def _one_passage(text: str, section: Section, max_tokens: int, plain_blanks: bool) -> bool:
    """Whether the section certainly makes one passage of at most ``max_tokens`` words, without splitting it into
    sentences: its words, plus one for each place a sentence break could cut a word in two (a ".", "?" or "!" inside a
    word: line breaks and breaks before a blank cut none), fit. A line longer than the sentence window is split at
    window edges too: never taken here. ``plain_blanks``: the document's only blank characters are spaces and line
    breaks."""
    a, b = section.start, section.end
    if b - a > SENTENCE_WINDOW:
        return False
    if plain_blanks:  # first a bound counted without a regex: one word more than blanks, every sentence end inside one
        blanks = text.count(" ", a, b) + text.count("\n", a, b)
        ends = text.count(".", a, b) + text.count("?", a, b) + text.count("!", a, b)
        if 1 + blanks + ends <= max_tokens:
            return True
    return len(_WORD_RE.findall(text, a, b)) + len(_INNER_BREAK_RE.findall(text, a, b)) <= max_tokens


def section_passages(doc: Document, section: Section, index: int, config: SegmenterConfig,
                     lazy_sentences: bool = False, plain_blanks: bool = False) -> list[Passage]:
    text = doc.text
    if lazy_sentences and (config.max_tokens <= 0 or _one_passage(text, section, config.max_tokens, plain_blanks)):
        # one passage per section, the whole section (never split, or too short to be): its sentences are
        # split_sentences of its own text (a function of that text alone), so they need not be computed now;
        # ``sentences=None`` says "compute them when read" (Passage.from_dict, passage_sentences). A section holds
        # sentences iff it holds a non-space character.
        if _blank(text, section.start, section.end):
            return []
        return [Passage(pid=section.section_id or f"{doc.doc_id}#s{index}", doc_id=doc.doc_id,
                        text=text[section.start:section.end], aspect=section.aspect or None, start=section.start,
                        end=section.end, sentences=None, title=doc.title, heading=section.heading,
                        metadata=doc.metadata)]
    sents = split_sentences(text, section.start, section.end)
    if not sents:
        return []
    base = section.section_id or f"{doc.doc_id}#s{index}"
    if config.max_tokens <= 0:
        groups = [sents]
    else:
        units: list[Span] = []
        for s in sents:
            units.extend(_split_long(text, s, config.max_tokens) if count_tokens(text[s[0]:s[1]]) > config.max_tokens else [s])
        groups, cur, cur_tok = [], [], 0
        heading_unit = units[0] if section.heading and _is_heading_line(text, units[0], section.heading) else None
        for s in units:
            # the heading line rides along with the first passage and is not counted against the budget
            n = 0 if s == heading_unit else count_tokens(text[s[0]:s[1]])
            if cur and cur_tok + n > config.max_tokens:
                groups.append(cur)
                carry, carry_tok = [], 0
                for prev in reversed(cur):
                    pn = count_tokens(text[prev[0]:prev[1]])
                    if carry_tok + pn > config.overlap or carry_tok + pn + n > config.max_tokens:
                        break
                    carry.insert(0, prev)
                    carry_tok += pn
                cur, cur_tok = carry, carry_tok
            cur.append(s)
            cur_tok += n
        if cur:
            groups.append(cur)
    out = []
    for k, g in enumerate(groups):
        start, end = g[0][0], g[-1][1]
        if len(groups) == 1:
            start, end = min(start, section.start), max(end, section.end)
        pid = base if len(groups) == 1 else f"{base}#p{k}"
        out.append(
            Passage(
                pid=pid,
                doc_id=doc.doc_id,
                text=text[start:end],
                aspect=section.aspect or None,
                start=start,
                end=end,
                sentences=list(g),
                title=doc.title,
                heading=section.heading,
                metadata=doc.metadata,
            )
        )
    return out


def _is_title_only(text: str, section: Section, title: str) -> bool:
    """Whether an untitled section holds nothing but the document's title (its case and spacing aside)."""
    return section.end - section.start <= 2 * len(title) + 8 and \
        " ".join(text[section.start:section.end].split()).lower() == " ".join(title.split())


def segment(doc: Document, config: SegmenterConfig | None = None, lazy_sentences: bool = False) -> list[Passage]:
    """Passages of a document: its given sections, else detected headings, else paragraphs.

    ``lazy_sentences``: passages that are a whole section (``max_tokens`` 0, or a section that fits in it) get
    ``sentences=None`` instead of their sentence spans (an index computes them when it reads the passage back: see
    :func:`passage_sentences`)."""
    config = config or SegmenterConfig()
    if doc.sections is not None:
        sections = doc.sections
    else:
        sections = detect_sections(doc.text) or paragraph_sections(doc.text)
        title = doc.title.strip().lower()
        for sec in sections:
            if title and sec.heading.strip().lower() == title:  # the document's own title line is not an aspect
                sec.aspect = ""
        if title and len(sections) > 1 and not sections[0].heading and _is_title_only(doc.text, sections[0], title):
            # the title line alone: every passage carries the title already, and a passage of nothing but it (no
            # aspect, a few words) would outrank the sections it names; a document of nothing but its title keeps it
            sections = sections[1:]
    passages: list[Passage] = []
    plain_blanks = lazy_sentences and _OTHER_BLANK_RE.search(doc.text) is None
    for i, s in enumerate(sections):
        passages.extend(section_passages(doc, s, i, config, lazy_sentences, plain_blanks))
    return passages
