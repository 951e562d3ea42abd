"""ICD-10-CM names for diagnosis codes, and the ICD-10-CM diagnoses a case text mentions.

Names come from PyPI `simple-icd-10-cm` (the CDC tabular list; names ~98.5 % of CodiEsp's diagnosis codes). A
code it does not know is named by its category (first three characters) when that is known.

Mentions are dictionary matches of ICD-10-CM names in the text: each code's name lower-cased, without
parenthesised qualifiers ("Essential (primary) hypertension" → "essential hypertension") and "unspecified", also
cut at a comma that only qualifies it ("Hepatomegaly, not elsewhere classified" → "hepatomegaly"); names
starting with "other" or shorter than four letters are left out, and so are external causes and factors (V-Z).
Longest match first; a name shared by several codes is read as the most general one. A mention right after a
negation ("no", "without", "denies", "negative for", "ruled out") is not a diagnosis of the case and is skipped."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_WORD_RE = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")
_PAREN_RE = re.compile(r"\s*\([^()]*\)")
_NEGATIONS = ("no", "not", "without", "denies", "denied", "negative for", "ruled out", "absence of", "free of")
_MAX_WORDS = 8
# what follows a comma in a name that only qualifies it ("Hepatomegaly, not elsewhere classified"); a comma that
# lists ("Blood, injection, injury type phobia") does not end the name
_QUALIFIER_RE = re.compile(r"(not elsewhere classified|without|with|uncomplicated|initial|subsequent|sequela|"
                           r"site not specified|unilateral|bilateral|acute|chronic|primary|secondary)\b")
# external causes (V-Y) and factors of health status (Z) are not what a case is diagnosed with
_MENTION_CHAPTERS = tuple("ABCDEFGHIJKLMNOPQRST")


@dataclass(slots=True, frozen=True)
class Diagnosis:
    code: str | None  # ICD-10-CM code (upper case, dotted); None for a mention no code names
    name: str  # English name ("" when the code is not in ICD-10-CM)
    kind: str  # "label": the case's own code; "mention": an ICD-10-CM name found in its text
    mention: str | None = None  # the words of the text that matched (mentions only)

    @property
    def category(self) -> str | None:
        return category(self.code) if self.code else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"code": self.code, "name": self.name, "kind": self.kind, "category": self.category}
        if self.mention is not None:
            d["mention"] = self.mention
        return d


def category(code: str) -> str:
    """The ICD-10 category: the first three characters ("N45.3" → "N45")."""
    return code.strip().upper()[:3]


@lru_cache(maxsize=1)
def _icd():
    import simple_icd_10_cm as icd

    return icd


@lru_cache(maxsize=100_000)
def code_name(code: str) -> str:
    """The English ICD-10-CM name of ``code`` (dotted or not, any case), its category's name when the code itself
    is not listed, or ""."""
    icd = _icd()
    c = code.strip().upper()
    for candidate in (c, category(c)):
        if candidate and icd.is_valid_item(candidate):
            return str(icd.get_description(candidate))
    return ""


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def name_forms(name: str) -> list[str]:
    """The surface forms under which a code name is searched in text (see the module docstring)."""
    base = _PAREN_RE.sub("", name).lower()
    base = re.sub(r",?\s*unspecified\b", "", base).strip(" ,")
    head, _, rest = base.partition(",")
    forms = [base, head.strip()] if _QUALIFIER_RE.match(rest.strip()) else [base]
    out = []
    for f in forms:
        words = _words(f)
        if not words or words[0] == "other" or len(words) > _MAX_WORDS or len("".join(words)) < 4:
            continue
        out.append(" ".join(words))
    return list(dict.fromkeys(out))


@lru_cache(maxsize=1)
def mention_table() -> dict[str, str]:
    """Surface form → the most general ICD-10-CM code (categories and their sub-codes; chapters and blocks are
    not diagnoses)."""
    icd = _icd()
    table: dict[str, str] = {}
    for code in icd.get_all_codes(with_dots=True):
        if icd.is_chapter_or_block(code) or not code.startswith(_MENTION_CHAPTERS):
            continue
        for form in name_forms(str(icd.get_description(code))):
            old = table.get(form)
            if old is None or (len(code), code) < (len(old), old):
                table[form] = code
    return table


def _negated(words: list[str], start: int) -> bool:
    before = " ".join(words[max(0, start - 3):start])
    return any(re.search(rf"(?<![a-z]){re.escape(n)}(?![a-z])", before) for n in _NEGATIONS)


def find_mentions(text: str, limit: int = 10) -> list[Diagnosis]:
    """ICD-10-CM names the text mentions (affirmed), in text order, one per code, at most ``limit``."""
    table = mention_table()
    words = _words(text)
    out: dict[str, Diagnosis] = {}
    i = 0
    while i < len(words) and len(out) < limit:
        for n in range(min(_MAX_WORDS, len(words) - i), 0, -1):
            form = " ".join(words[i:i + n])
            code = table.get(form)
            if code is not None:
                if not _negated(words, i) and code not in out:
                    out[code] = Diagnosis(code, code_name(code), "mention", form)
                i += n
                break
        else:
            i += 1
    return list(out.values())


def labelled_diagnoses(codes: list[str]) -> list[Diagnosis]:
    return [Diagnosis(c.upper(), code_name(c), "label") for c in codes]


def diagnoses_of(metadata: dict[str, Any], text: str) -> tuple[bool, list[Diagnosis]]:
    """(labelled, diagnoses): the case's own codes when it has any, else the ICD-10-CM names its text mentions."""
    codes = metadata.get("diagnoses")
    if isinstance(codes, list) and codes:
        return True, labelled_diagnoses([str(c) for c in codes])
    return False, find_mentions(text)


__all__ = ["Diagnosis", "category", "code_name", "diagnoses_of", "find_mentions", "labelled_diagnoses",
           "mention_table", "name_forms"]
