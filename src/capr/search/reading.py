"""A free-text question read as a pharmacist or a clinician reads it, before it is searched (issue 53).

"how does valium affect the brain" is about diazepam, the word the answer uses; "afib" is atrial fibrillation;
"rivatigmine" is rivastigmine. The reading finds, in the question's words:

- names of the lexicon (capr.labels.lexicon): a drug's brand, salt or misspelled name read as its generic name, an
  HPO synonym read as its term's name, clinical shorthand read as what it stands for;
- misspellings: a word written in lower case that the index does not have, that is no English word and no word
  of the lexicon (as written or as stemmed: "striving" is "strive"), one edit (a letter deleted, inserted, replaced,
  or two swapped) from a word the index has that is English or a word of the lexicon — checked against the index's
  own vocabulary, so a correction is always a word some passage holds, and never a one-off word of a passage
  ("menkes" is not read as "menes"). A capitalised word is a name ("Medline", "Biotene"): never corrected.

What it read is added to the question: the BM25 terms get the read names' words (a misspelled word is replaced by
the index's word), and the dense encoder reads "valium (diazepam)". A question none of whose words the index has,
even after reading (another script, another language, gibberish), is answered with a notice instead of the
nearest unrelated passages. The search says what it read (``SearchResult.reading``: "read 'valium' as diazepam").
"""

from __future__ import annotations

import math
import string
import unicodedata
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from capr.labels.lexicon import ABBREVIATION, DRUG, FINDING
from capr.store.protocol import Capability

if TYPE_CHECKING:
    from capr.search.query import ParsedQuery

SPELLING = "spelling"
# shorter words have too many one-edit neighbours to guess among ("strep" is one edit from "step")
MIN_SPELLING_CHARS = 6
_LETTERS = string.ascii_lowercase


@dataclass(frozen=True)
class ReadWord:
    """One word (or name) of the question and what it was read as."""

    text: str  # as the question writes it
    read_as: str
    kind: str  # drug | finding | abbreviation | spelling

    def to_dict(self) -> dict[str, str]:
        return {"text": self.text, "read_as": self.read_as, "kind": self.kind}

    def __str__(self) -> str:
        return f"read {self.text!r} as {self.read_as}"


@dataclass(frozen=True)
class Reading:
    words: tuple[ReadWord, ...]
    terms: list[str]  # the BM25 terms of the question as read
    dense_text: str  # what a dense encoder reads
    notice: str | None = None  # set when no word of the question is in the index
    withheld: bool = False  # nothing is shown (a question in another script than the index's)


def _edits(word: str) -> set[str]:
    """Every string one edit from ``word`` (Norvig's four edits)."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return ({a + b[1:] for a, b in splits if b} | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
            | {a + c + b[1:] for a, b in splits if b for c in _LETTERS} | {a + c + b for a, b in splits for c in _LETTERS})


def _script(text: str) -> str | None:
    """The script most of ``text``'s letters are written in ("CYRILLIC", "CJK", "ARABIC"...)."""
    counts: dict[str, int] = {}
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            if name:
                counts[name.split()[0]] = counts.get(name.split()[0], 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


def _surface_corrected(word: str, stem: str, corrected: str) -> str:
    """``word`` with the edit that turned its analysed form ``stem`` into ``corrected`` ("rivatigmine" →
    "rivastigmine", "thearapy" → "therapy"); the corrected stem when the edit falls where the word and its stem
    differ."""
    low = word.lower()
    tail = 0
    while tail < min(len(stem), len(corrected)) and stem[len(stem) - 1 - tail] == corrected[len(corrected) - 1 - tail]:
        tail += 1
    head_stem, head_corrected = stem[: len(stem) - tail], corrected[: len(corrected) - tail]
    return head_corrected + low[len(head_stem):] if low.startswith(head_stem) else corrected


class QuestionReader:
    """Reads free-text questions against one store: its analyser and (where it has them) its term statistics.
    ``kinds``: what is read (the lexicon's kinds and ``spelling``); ``dense``: whether the encoder reads the readings
    too ("valium (diazepam)") or the question as written."""

    kinds: tuple[str, ...] = (DRUG, ABBREVIATION, FINDING, SPELLING)
    dense: bool = True

    def __init__(self, store: Any, lexicon: Any = None) -> None:
        self.store = store
        self.analyzer = store.analyzer
        self.statistics = Capability.collection_stats in store.capabilities
        self._lexicon = lexicon

    @property
    def lexicon(self) -> Any:
        if self._lexicon is None:
            from capr.labels.lexicon import reading_lexicon

            self._lexicon = reading_lexicon()
        return self._lexicon

    def applies(self, pq: "ParsedQuery") -> bool:
        """Free text, analysed as English (the lexicon's language)."""
        config = getattr(self.analyzer, "config", None)
        return (not pq.structured and bool(pq.text) and config is not None
                and config.language.lower() == "english")

    def known(self, terms: list[str]) -> dict[str, float]:
        """Those of ``terms`` the index holds, with their IDF (every term, when the store cannot tell)."""
        if not self.statistics:
            return {t: 1.0 for t in terms}
        return self.store.term_idf(list(dict.fromkeys(terms))) if terms else {}

    def read(self, pq: "ParsedQuery") -> Reading:
        text = pq.text or ""
        words: list[ReadWord] = []
        added: list[str] = []
        dense_parts: list[tuple[int, int, str]] = []  # (start, end, replacement) in the question's text
        covered: set[int] = set()
        asked = set(pq.terms)
        for start, end, entry in self.lexicon.find(text):
            covered.update(range(start, end))
            surface = text[start:end]
            if entry.reading == entry.name or entry.kind not in self.kinds:
                continue  # the name is the canonical one: nothing to read
            if entry.kind == FINDING and self.statistics and self._all_known(self.analyzer(surface)):
                continue  # a finding the documents name as the question does ("cancer"): read as written
            read_as = self._in_index(entry)
            new = [t for t in dict.fromkeys(self.analyzer(read_as)) if t not in asked]
            if not new:
                continue
            words.append(ReadWord(surface, read_as, entry.kind))
            added += new
            asked.update(new)
            if self.dense:
                dense_parts.append((start, end, f"{surface} ({read_as})"))
        terms = list(pq.terms)
        if self.statistics and SPELLING in self.kinds:
            corrections = self._spellings(text, covered, set(terms))
            for word, start, end, stem, corrected in corrections:
                surface = _surface_corrected(word, stem, corrected)
                words.append(ReadWord(word, surface, SPELLING))
                terms = [corrected if t == stem else t for t in terms]
                if self.dense:
                    dense_parts.append((start, end, surface))
        terms += added
        dense = text
        for start, end, replacement in sorted(dense_parts, reverse=True):
            dense = dense[:start] + replacement + dense[end:]
        notice, withheld = self.notice(text, terms)
        return Reading(tuple(sorted(words, key=lambda w: text.find(w.text))), terms, dense, notice, withheld)

    def _all_known(self, terms: list[str]) -> bool:
        return bool(terms) and len(self.known(terms)) == len(set(terms))

    def _in_index(self, entry: Any) -> str:
        """What a lexicon entry reads as, in this index's words: its reading; for a drug whose generic name the
        index lacks, another name of the drug the index has (the most frequent), else the generic name."""
        if entry.kind != DRUG or not self.statistics:
            return entry.reading
        if self._all_known(self.analyzer(entry.reading)):
            return entry.reading
        best, best_idf = entry.reading, math.inf
        for name in self.lexicon.names_of(entry.reading, DRUG):
            if name == entry.name or len(name.split()) > 2:
                continue
            name_terms = list(dict.fromkeys(self.analyzer(name)))
            idf = self.known(name_terms)
            if name_terms and len(idf) == len(name_terms) and max(idf.values()) < best_idf:
                best, best_idf = name, max(idf.values())
        return best

    def _spellings(self, text: str, covered: set[int], terms: set[str]) -> list[tuple[str, int, int, str, str]]:
        """(word, start, end, its analysed form, the index's word one edit from it) for each misspelled word."""
        candidates = []
        for word, start, end in self.analyzer.words(text):
            if (start in covered or len(word) < MIN_SPELLING_CHARS or not word.isalpha() or not word.isascii()
                    or not word.islower()):
                continue
            stem = self.analyzer.analyze_word(word)
            if stem and stem in terms:
                candidates.append((word, start, end, stem))
        if not candidates:
            return []
        unknown = set(t for *_, t in candidates) - set(self.known([t for *_, t in candidates]))
        candidates = [c for c in candidates if c[3] in unknown]
        named = self.lexicon.known([f for c in candidates for f in (c[0], c[3])]) if candidates else set()
        out = []
        for word, start, end, stem in candidates:
            if word in named or stem in named:
                continue  # an English word or a name the index happens not to hold
            in_index = self.known(sorted(_edits(stem)))
            near = {t: idf for t, idf in in_index.items() if t in self.lexicon.known(in_index)}
            if near:
                corrected = min(near, key=lambda t: (near[t], t))  # the most frequent: lowest IDF
                out.append((word, start, end, stem, corrected))
        return out

    def notice(self, text: str, terms: list[str]) -> tuple[str | None, bool]:
        """What to say when no word of the question, as read, is in the index, and whether to show nothing. A question
        in another script than the index's gets no answers: its nearest passages by meaning are unrelated. One in the
        index's script keeps the dense answers with the notice: an English word the documents do not use is still
        one the encoder reads ("endocannabinoids" over NFCorpus dev: withholding the answers of its six such
        questions cost 0.59 nDCG@10, one of them 76.5)."""
        if not self.statistics or not terms or self.known(terms):
            return None, False
        script = _script(text)
        if script and script != "LATIN":
            return (f"this index has no word of the question (written in {script.title()} script); "
                    "no passage is shown: ask with words the documents use"), True
        return ("this index has none of the question's words; the passages closest in meaning are shown"), False


def read_query(store: Any, pq: "ParsedQuery", lexicon: Any = None, read: bool = True) -> "ParsedQuery":
    """``pq`` as read (its ``reading`` set, its terms and dense text those of the reading); ``pq`` itself when it
    is no English free text or was read already. ``read=False``: nothing is read, only whether the index has any
    of the question's words (the notice)."""
    if pq.reading is not None:
        return pq
    reader = QuestionReader(store, lexicon)
    if not reader.applies(pq):
        return pq
    if read:
        reading = reader.read(pq)
    else:
        notice, withheld = reader.notice(pq.text or "", pq.terms)
        reading = Reading((), list(pq.terms), pq.text or "", notice, withheld)
    return replace(pq, terms=reading.terms, reading=reading, _dense={})


def with_reading(pq: "ParsedQuery", reading: Reading | None) -> "ParsedQuery":
    """``pq`` (the question parsed again, e.g. about its focus) keeping what the question was read as: its words
    read, the terms the reading added, the encoder's text."""
    if reading is None or pq.reading is not None:
        return pq
    return replace(pq, terms=list(dict.fromkeys(pq.terms + reading.terms)), reading=reading, _dense={})


__all__ = ["MIN_SPELLING_CHARS", "QuestionReader", "ReadWord", "Reading", "read_query", "with_reading"]
