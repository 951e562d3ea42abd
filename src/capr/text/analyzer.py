"""Text analysis for lexical retrieval: Unicode word tokens, case folding, accent folding of Latin letters,
per-language stopwords and Snowball stemming."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from capr.errors import CaprError

# Unicode-aware: \w matches letters and digits of any script (é, ß, кириллица, 汉字).
_TOKEN_RE = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=1)
def _marked_token_re() -> re.Pattern[str]:
    """Words with their combining marks (Unicode category M), which \\w leaves out: the vowel signs of Indic
    scripts ("हिन्दी" is one word, not ह, न, द) and the accents of decomposed (NFD) Latin text ("Me\\u0301nie\\u0300re")."""
    cat = unicodedata.category
    ranges: list[list[int]] = []
    for cp in range(0x300, 0x10000):  # the first mark is U+0300; past the BMP (rare scripts) the scan costs 0.3 s
        if cat(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    marks = "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)
    return re.compile(rf"\w[\w{marks}]*", re.UNICODE)


_MEMO_WORDS = 50_000  # distinct surface words analyze_words remembers (a few MB)

@lru_cache(maxsize=1)
def _bm25s_stopwords() -> Any:
    """bm25s' stopword lists, read from their own module file: ``import bm25s.stopwords`` would first run the
    bm25s package, which imports scipy (a third of a cold search's time) for lists that need nothing."""
    import importlib.util
    import sys

    mod = sys.modules.get("bm25s.stopwords")
    if mod is not None:
        return mod
    spec = importlib.util.find_spec("bm25s")
    where = spec.submodule_search_locations if spec is not None else None
    if not where:
        raise CaprError("capr's analyser needs the bm25s package for its stopword lists: pip install bm25s")
    path = Path(list(where)[0]) / "stopwords.py"
    file_spec = importlib.util.spec_from_file_location("capr._bm25s_stopwords", path)
    mod = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(mod)
    return mod


_STOPWORD_LISTS = {
    "english": "STOPWORDS_EN",
    "german": "STOPWORDS_GERMAN",
    "french": "STOPWORDS_FRENCH",
    "spanish": "STOPWORDS_SPANISH",
    "italian": "STOPWORDS_ITALIAN",
    "portuguese": "STOPWORDS_PORTUGUESE",
    "dutch": "STOPWORDS_DUTCH",
    "danish": "STOPWORDS_DANISH",
    "swedish": "STOPWORDS_SWEDISH",
    "norwegian": "STOPWORDS_NORWEGIAN",
    "russian": "STOPWORDS_RUSSIAN",
    "turkish": "STOPWORDS_TURKISH",
}


# letters NFKD leaves whole, as Lucene's ASCIIFoldingFilter spells them
_LATIN_LETTERS = str.maketrans({"ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O",
                                "đ": "d", "Đ": "D", "ł": "l", "Ł": "L", "þ": "th", "Þ": "TH", "ð": "d", "Ð": "D",
                                "ı": "i"})


def fold_latin_accents(word: str) -> str:
    """``word`` with its Latin letters' diacritics removed ("Ménière" → "Meniere", "Sjögren" → "Sjogren", "æ" → "ae"):
    users type health terms without their accents. Letters of other scripts keep theirs ("й" is not "и")."""
    if word.isascii():
        return word
    out = []
    for ch in word.translate(_LATIN_LETTERS):
        if ch.isascii():
            out.append(ch)
            continue
        base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
        if base.isascii():
            out.append(base)  # "" for a lone combining mark ("İ".lower() is "i" + a combining dot)
        else:
            out.append(ch)
    return "".join(out)


@dataclass(slots=True)
class AnalyzerConfig:
    language: str = "english"
    lowercase: bool = True
    stopwords: bool = True
    stem: bool = True
    extra_stopwords: list[str] = field(default_factory=list)
    fold_accents: bool = True  # Latin letters to ASCII before stopwords and stemming ("meniere" finds "Ménière")
    # a word keeps its combining marks and is read in NFC: "हिन्दी" is one term, decomposed "Ménière" is "Ménière"
    word_marks: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AnalyzerConfig":
        """The settings an index was written with. Each setting added later reads as what indexes written before it
        did, so that queries are analysed as their text was; a setting this capr does not know came from a newer one."""
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise CaprError(f"analyzer setting {', '.join(map(repr, unknown))} is unknown to this capr: the index was "
                            "written by a newer capr; upgrade capr (or rebuild the index with this one)")
        # an index written before accent folding (and words with their marks) existed kept its accents (and cut
        # words at marks)
        return cls(**{"fold_accents": False, "word_marks": False, **d})


class Analyzer:
    """Turns text into index terms. The same instance analyses documents and queries."""

    def __init__(self, config: AnalyzerConfig | None = None) -> None:
        self.config = config or AnalyzerConfig()
        lang = self.config.language.lower()
        if self.config.stem:
            import Stemmer  # PyStemmer: Snowball stemmers, C speed

            if lang not in Stemmer.algorithms():
                raise CaprError(
                    f"no stemmer for language {lang!r}; choose one of {sorted(Stemmer.algorithms())} "
                    "or disable stemming"
                )
            self._stemmer = Stemmer.Stemmer(lang)
        else:
            self._stemmer = None
        self._stopwords = frozenset(self._load_stopwords(lang))
        self._memo: dict[str, str | None] = {}  # surface word → analyze_word(word), for analyze_words

    def _tokens(self, text: str) -> re.Pattern[str]:
        """The word pattern for ``text``: ASCII text has no marks, so it keeps the plain (fast) pattern, and the
        pattern with marks is built the first time text with other letters comes (12 ms, once per process)."""
        return _marked_token_re() if self.config.word_marks and not text.isascii() else _TOKEN_RE

    def _nfc(self, word: str) -> str:
        """``word`` composed (NFC) when words keep their marks: "e" + U+0301 is "é", as a user types it."""
        return unicodedata.normalize("NFC", word) if self.config.word_marks and not word.isascii() else word

    def _load_stopwords(self, lang: str) -> set[str]:
        words: set[str] = {w.lower() for w in self.config.extra_stopwords}
        if self.config.stopwords:
            name = _STOPWORD_LISTS.get(lang)
            if name is None:
                raise CaprError(
                    f"no stopword list for language {lang!r}; known: {sorted(_STOPWORD_LISTS)}. "
                    "Disable stopwords or pass extra_stopwords"
                )
            words |= {w.lower() for w in getattr(_bm25s_stopwords(), name)}
        if self.config.fold_accents:  # "été" is a stopword as "ete" once the text's accents are folded
            words = {fold_latin_accents(w) for w in words}
        return words

    def words(self, text: str) -> list[tuple[str, int, int]]:
        """Surface words with their character spans (for highlighting)."""
        return [(m.group(), m.start(), m.end()) for m in self._tokens(text).finditer(text)]

    def analyze_word(self, word: str) -> str | None:
        word = self._nfc(word)
        w = word.lower() if self.config.lowercase else word
        if self.config.fold_accents:
            w = fold_latin_accents(w)
        if w.lower() in self._stopwords:
            return None
        if self._stemmer is not None:
            w = self._stemmer.stemWord(w)
        return w

    def analyze_words(self, words: list[str]) -> list[str | None]:
        """``analyze_word`` of each word, in one pass. Highlighting, snippets and sentence evidence analyse every
        word of every hit, so results are remembered per surface word (a bounded table, started afresh when full)."""
        memo = self._memo  # a local reference: another thread may replace the table meanwhile
        try:
            return [memo[w] for w in words]
        except KeyError:
            pass
        fresh = list(dict.fromkeys(w for w in words if w not in memo))
        if len(memo) + len(fresh) > _MEMO_WORDS:
            memo = self._memo = {}
            fresh = list(dict.fromkeys(words))
        memo.update(zip(fresh, self.analyze_unseen(fresh)))
        return [memo[w] for w in words]

    def analyze_unseen(self, words: list[str]) -> list[str | None]:
        """``analyze_words`` without the table, for a caller that keeps its own (the segment writer asks about
        each distinct word once)."""
        words = [self._nfc(w) for w in words]
        low = [w.lower() for w in words] if self.config.lowercase else list(words)
        if self.config.fold_accents:
            low = [fold_latin_accents(w) for w in low]
        stop = self._stopwords
        keep = [(w if self.config.lowercase else w.lower()) not in stop for w in low] if stop else [True] * len(low)
        stems = self._stemmer.stemWords(low) if self._stemmer is not None else low
        return [t if k else None for t, k in zip(stems, keep)]

    def folded_words(self, text: str) -> list[str]:
        """The words of ``text`` as ``__call__`` sees them before stopwords and stemming (case-folded if so
        configured): ``analyze_words`` of them is ``__call__``'s result with None for each dropped word."""
        if not self.config.lowercase:
            return [self._nfc(w) for w in self._tokens(text).findall(text)]
        return _TOKEN_RE.findall(text.lower()) if text.isascii() else [self._nfc(w).lower() for w in self._tokens(text).findall(text)]

    def __call__(self, text: str) -> list[str]:
        stop = self._stopwords
        if self.config.lowercase:
            # ASCII text: fold the whole string once (same words: ASCII case never changes a word boundary);
            # other text word by word, since folding can change lengths ("İ" → "i̇") and so the words
            raw = _TOKEN_RE.findall(text.lower()) if text.isascii() else [self._nfc(w).lower() for w in self._tokens(text).findall(text)]
            if self.config.fold_accents and not text.isascii():
                raw = [fold_latin_accents(w) for w in raw]
            if stop:
                raw = [w for w in raw if w not in stop]  # already folded
        else:
            raw = [self._nfc(w) for w in self._tokens(text).findall(text)]
            if self.config.fold_accents and not text.isascii():
                raw = [fold_latin_accents(w) for w in raw]
            if stop:
                raw = [w for w in raw if w.lower() not in stop]
        if self._stemmer is not None:
            raw = self._stemmer.stemWords(raw)
        return raw

