"""Typed records shared by every reader, index, model and evaluator.

Character offsets always refer to ``Document.text`` so that evidence found in a
passage can be highlighted in the original document.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from bisect import bisect_left
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable, Iterator

from capr.errors import BadInputError, CaprError, QueryError
from capr.text.spans import Span


DOC_ID_MAX_LENGTH = 256
# A document longer than this is refused (a bad record: --skip-bad skips it). 10 M characters is far
# beyond any clinical note or article; a bigger "document" is almost always a mistake (a whole dump in
# one JSON field) and would be held, segmented and analysed in memory at once.
DEFAULT_MAX_DOC_CHARS = 10_000_000


def oversized(text: str, max_doc_chars: int) -> str | None:
    """Why a document text is refused for its size (readers, writers and stores say it the same way), or None."""
    if len(text) <= max_doc_chars:
        return None
    return f"document text has {len(text):,} characters, more than the limit of {max_doc_chars:,} (--max-doc-chars)"


def check_doc_id(value: object) -> str:
    """The one rule for document ids, applied by the readers, the index writer, the CLI and the HTTP
    service alike (so no id can be stored that the API then refuses, or the reverse). Returns the id
    as a string (an integer becomes its decimal string); raises ValueError with the reason otherwise.

    Ids appear in URLs (``/documents/{id}``), run files and passage ids, so they must be printable
    text without surrounding blanks and must not look like a path that climbs ("../x", "/etc").
    Slashes inside are allowed: the text reader names documents by their relative path."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"must be a string (or an integer), got {type(value).__name__}")
    s = str(value)
    if not s:
        raise ValueError("must not be empty")
    if len(s) > DOC_ID_MAX_LENGTH:
        raise ValueError(f"must be at most {DOC_ID_MAX_LENGTH} characters, got {len(s)}")
    if s != s.strip():
        raise ValueError("must not start or end with whitespace")
    # (printable text has no Cc or Cs character; an id without "/" is its only path segment: fast paths)
    if not s.isprintable() and any(unicodedata.category(c) in ("Cc", "Cs") for c in s):
        raise ValueError("must not contain control characters or lone surrogates")
    if (s in (".", "..") if "/" not in s else
            s.startswith("/") or any(part in ("", ".", "..") for part in s.split("/"))):
        raise ValueError("must not start with '/' or contain empty, '.' or '..' path segments")
    return s


SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit: a larger or negative one was a ValueError traceback
MAX_RESULTS = 1_000_000  # a search's k: more than any ranking is read to
MAX_BOOST = 1000.0  # a score multiplier ×(1 + b) beyond this ranks as it does and only risks overflowing


class OptionRange(str, Enum):
    """The values a numeric option (of training, evaluation or search) can take; each reads as what the error says
    it must be."""

    count = "at least 1"
    count0 = "0 or more"
    share = "between 0 and 1"
    positive = "positive"
    rate = "a number >= 0"
    seed = f"between 0 and {SEED_MAX}"
    results = f"a whole number from 1 to {MAX_RESULTS:,}"
    boost = f"a number from 0 to {MAX_BOOST:g}"


def check_option(option: str, value: Any, must: OptionRange, field: str | None = None) -> None:
    """One clear error naming ``option`` when ``value`` is outside ``must``; None (unset: the default) passes. Such
    values ran anyway (a zero --max-length silently became the default, a NaN boost printed "score": NaN, which is
    not JSON) or failed with a traceback after the work had started. ``field``: the error is a QueryError naming it
    (a search option; the service answers 400), else a CaprError."""
    if value is None:
        return
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    whole = real and (isinstance(value, numbers.Integral) or float(value).is_integer())
    ok = real and math.isfinite(value) and {
        OptionRange.count: whole and value >= 1,
        OptionRange.count0: whole and value >= 0,
        OptionRange.share: 0 <= value <= 1,
        OptionRange.positive: value > 0,
        OptionRange.rate: value >= 0,
        OptionRange.seed: whole and 0 <= value <= SEED_MAX,
        OptionRange.results: whole and 1 <= value <= MAX_RESULTS,
        OptionRange.boost: 0 <= value <= MAX_BOOST,
    }[must]
    if not ok:
        shown = f"{value:g}" if real else repr(value)
        message = f"{option} must be {must.value}, got {shown}"
        raise QueryError(message, field) if field else CaprError(message)


def check_options(options: Iterable[tuple[str, Any, OptionRange]]) -> None:
    """:func:`check_option` for each (option, value, range), in order: the first one out of range is the error."""
    for option, value, must in options:
        check_option(option, value, must)


@dataclass(slots=True)
class Section:
    """A headed region of a document; ``aspect`` is the normalized heading."""

    heading: str
    aspect: str
    start: int
    end: int
    section_id: str | None = None  # an id the source assigns (e.g. a MedQuAD answer id)


@dataclass(slots=True)
class Document:
    doc_id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # Readers of structured sources fill sections; otherwise segmentation detects them.
    sections: list[Section] | None = None

    def to_dict(self) -> dict[str, Any]:
        # hand-written: dataclasses.asdict deep-copies recursively and dominated indexing time
        return {
            "doc_id": self.doc_id,
            "title": self.title,
            "text": self.text,
            "metadata": self.metadata,
            "sections": None if self.sections is None else [
                {"heading": s.heading, "aspect": s.aspect, "start": s.start, "end": s.end, "section_id": s.section_id}
                for s in self.sections
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Document":
        sections = d.get("sections")
        return cls(
            doc_id=d["doc_id"],
            title=d.get("title", ""),
            text=d["text"],
            metadata=dict(d.get("metadata") or {}),
            sections=[Section(**s) for s in sections] if sections is not None else None,
        )


@dataclass(slots=True)
class Sentence:
    start: int
    end: int
    text: str


@dataclass  # no slots: ``sentences`` is a property (see below)
class Passage:
    pid: str
    doc_id: str
    text: str
    aspect: str | None
    start: int
    end: int
    # document offsets. Given as None (segment(lazy_sentences=True), a stored null) for a passage that is a whole
    # section: computed from its text on first access (the property below), identical to the segmenter's
    sentences: list[Span] | None = field(default_factory=list)
    title: str = ""
    heading: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, keep_lazy: bool = False) -> dict[str, Any]:
        """The passage as a JSON object; ``keep_lazy``: sentences not computed yet stay null (an index stores
        them so, and computes them when it reads the passage)."""
        sents = self._sentences if keep_lazy else self.sentences
        return {
            "pid": self.pid,
            "doc_id": self.doc_id,
            "text": self.text,
            "aspect": self.aspect,
            "start": self.start,
            "end": self.end,
            "sentences": None if sents is None else [list(s) for s in sents],
            "title": self.title,
            "heading": self.heading,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Passage":
        sents = d.get("sentences", [])
        return cls(
            pid=d["pid"],
            doc_id=d["doc_id"],
            text=d["text"],
            aspect=d.get("aspect"),
            start=int(d.get("start", 0)),
            end=int(d.get("end", len(d["text"]))),
            # null: a whole-section passage stored without its sentences, computed on first access
            sentences=None if sents is None else [(int(a), int(b)) for a, b in sents],
            title=d.get("title", ""),
            heading=d.get("heading", ""),
            metadata=dict(d.get("metadata") or {}),
        )

    def sentence_texts(self) -> list[str]:
        """Sentences as text, using passage-relative slicing of the document offsets."""
        return [self.text[a - self.start : b - self.start] for a, b in self.sentences]


def _passage_sentences(self: Passage) -> list[Span]:
    s = self._sentences
    if s is None:
        from capr.text.sentences import passage_sentences

        s = self._sentences = passage_sentences(self.text, self.start)
    return s


def _set_passage_sentences(self: Passage, value: list[Span] | None) -> None:
    self._sentences = value


Passage.sentences = property(_passage_sentences, _set_passage_sentences,  # type: ignore[assignment]
                             doc="Sentence spans (document offsets); computed on first access when given as None.")


class Retriever(str, Enum):
    bm25 = "bm25"
    tfidf = "tfidf"
    dense = "dense"
    hybrid = "hybrid"


LEXICAL = (Retriever.bm25, Retriever.tfidf)


@dataclass(slots=True)
class Query:
    """A free-text question, a structured ⟨entity, aspect⟩ question, or both."""

    qid: str
    text: str | None = None
    entity: str | None = None
    aspect: str | None = None

    def __post_init__(self) -> None:
        if not (self.text and self.text.strip()) and not (
            (self.entity and self.entity.strip()) or (self.aspect and self.aspect.strip())
        ):
            raise ValueError(f"query {self.qid!r} is empty: give a text or an entity/aspect")


@dataclass(slots=True, frozen=True)
class Qrel:
    qid: str
    pid: str
    relevance: int = 1


@dataclass(slots=True)
class ScoredPassage:
    pid: str
    score: float
    rank: int
    passage: Passage | None = None


@dataclass(slots=True)
class Run:
    """Ranked results per query, as written to and read from TREC run files."""

    name: str = "capr"
    results: dict[str, list[ScoredPassage]] = field(default_factory=dict)

    def __iter__(self) -> Iterator[tuple[str, list[ScoredPassage]]]:
        return iter(self.results.items())

    def __len__(self) -> int:
        return len(self.results)

    def as_scores(self) -> dict[str, dict[str, float]]:
        return {qid: {sp.pid: sp.score for sp in hits} for qid, hits in self.results.items()}


class PairRepeats:
    """The (query, document) pairs of one judgement or run file, seen line by line. trec_eval refuses a file that
    names a pair twice ("duplicate docs"), and a reader that keeps the last one silently changes the metrics: a
    repeat with another grade or score is refused here, since which one counts would decide the result; a repeat
    with the same value changes nothing, so it is dropped (the pair counts once) and said in one warning."""

    def __init__(self, path: object, value_name: str, repeat_name: str) -> None:
        self.path, self.value_name, self.repeat_name = str(path), value_name, repeat_name
        self.first: dict[tuple[str, str], tuple[int, float]] = {}
        self.repeats = 0
        self.example = ""

    def is_new(self, qid: str, pid: str, value: float, lineno: int) -> bool:
        """False for a repeat with the same value (skip the line); a repeat with another value is a BadInputError."""
        seen = self.first.get((qid, pid))
        if seen is None:
            self.first[(qid, pid)] = (lineno, value)
            return True
        if seen[1] != value:
            raise BadInputError(self.path, f"query {qid!r}, document {pid!r}: {self.value_name} {seen[1]:g} at line "
                                f"{seen[0]} and {value:g} here; a pair may appear once (trec_eval refuses repeats), "
                                "and which one counts would change the metrics", f"line {lineno}")
        if not self.repeats:
            self.example = f"the first at line {lineno}: query {qid!r}, document {pid!r}, as at line {seen[0]}"
        self.repeats += 1
        return False

    def report(self, warn: Callable[[str], None] | None) -> None:
        """Says the repeats once, through ``warn`` (default: Python's warnings)."""
        if not self.repeats:
            return
        message = (f"{self.path}: {self.repeats} line(s) repeat {self.repeat_name} with the same {self.value_name} "
                   f"({self.example}); each pair counts once")
        if warn is None:
            import warnings

            warnings.warn(message, stacklevel=3)
        else:
            warn(message)


def qrels_as_dict(qrels: list[Qrel]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q in qrels:
        out.setdefault(q.qid, {})[q.pid] = q.relevance
    return out


_CRLF = "\r\n"


def normalize_newlines(doc: Document) -> Document:
    """Windows (\\r\\n) and old Mac (\\r) line ends become \\n, in place: heading detection, sentence
    splitting and the analyzer all work on lines ended by \\n, and a note saved on Windows must segment
    as the same note saved elsewhere. Section offsets move back by the \\r removed before them."""
    if "\r" in doc.title:
        doc.title = doc.title.replace(_CRLF, "\n").replace("\r", "\n")
    text = doc.text
    if "\r" not in text:  # the common case: no copy
        return doc
    if doc.sections:
        removed: list[int] = []  # where each dropped \r (of a \r\n) was
        i = text.find(_CRLF)
        while i != -1:
            removed.append(i)
            i = text.find(_CRLF, i + 2)
        for s in doc.sections:
            s.start -= bisect_left(removed, s.start)
            s.end -= bisect_left(removed, s.end)
    doc.text = text.replace(_CRLF, "\n").replace("\r", "\n")
    return doc
