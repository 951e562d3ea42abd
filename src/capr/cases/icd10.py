"""ICD-10-CM names for diagnosis codes, and the ICD-10-CM diagnoses a case text mentions.

Names come from PyPI `simple-icd-10-cm` (the CDC tabular list; names ~98.5 % of CodiEsp's diagnosis codes). A
code it does not know is named by its category (first three characters) when that is known.

Mentions are dictionary matches of ICD-10-CM names in the text: each code's name lower-cased, without
parenthesised qualifiers ("Essential (primary) hypertension" → "essential hypertension") and "unspecified", also
cut at a comma that only qualifies it ("Hepatomegaly, not elsewhere classified" → "hepatomegaly"); names
starting with "other" or shorter than four letters are left out, and so are external causes and factors (V-Z).
Longest match first; a name shared by several codes is read as the most general one. A mention a negation governs
is not a diagnosis of the case and is skipped: "no", "without", "denies", "negative for", "ruled out", "absence of",
"free of" govern the rest of their clause — every item of "denies chest pain, palpitations or syncope" — up to a
sentence or clause mark (. ; : ! ?) or a word that starts another statement ("but", "which", "has", "was", …);
"not", which more often negates a verb than a finding, governs its next three words."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

_WORD_RE = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")
# a word, or a mark that ends a clause (a full stop inside "38.5" does not)
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*|[.;:!?,](?=\s|$)|\n", re.IGNORECASE)
_PAREN_RE = re.compile(r"\s*\([^()]*\)")
_BRACKET_RE = re.compile(r"\s*\[([^\[\]]*)\]")
_COMPLICATION_RE = re.compile(r"\s+(?:without|with) (?:complications?|mention of complication)$|\s+uncomplicated$")
# negation cues (as word sequences) and how many words they govern (None: the rest of the clause)
_NEGATIONS: dict[tuple[str, ...], int | None] = {
    ("no",): None, ("without",): 3, ("denies",): None, ("denied",): None, ("deny",): None,
    ("negative", "for"): None, ("ruled", "out"): None, ("absence", "of"): None, ("free", "of"): None, ("not",): 3}
# words that start another statement and so end a negation's scope ("no fever, but a history of asthma")
_SCOPE_ENDS = frozenset(("but", "however", "although", "though", "except", "apart", "aside", "yet", "which", "who",
                         "whose", "whereas", "while", "because", "since", "due", "secondary", "presented", "presents",
                         "reports", "reported", "complains", "complained", "developed", "has", "had", "have", "is",
                         "are", "was", "were", "showed", "shows", "revealed", "diagnosed", "now", "then", "later"))
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


@lru_cache(maxsize=1)
def _names() -> dict[str, str]:
    """Dotted code → its ICD-10-CM name, every code and category (cached as JSON: `simple-icd-10-cm` takes ~2 s to
    load its XML, most of a cold `capr cases similar`)."""
    def build() -> dict[str, str]:
        icd = _icd()
        return {c: str(icd.get_description(c)) for c in icd.get_all_codes(with_dots=True) if _is_code(icd, c)}

    return _cached_table("icd10-names", build)


def _is_code(icd: Any, code: str) -> bool:
    """A category or a code under one, not a chapter or a block. simple-icd-10-cm reads the 39 categories that are
    a block of their own ("B20 Human immunodeficiency virus [HIV] disease", "C50 Malignant neoplasm of breast") as
    blocks too: they are codes with names, and CodiEsp codes them (B20 without its name cost the codes list 0.1 MAP
    on CodiEsp dev)."""
    return icd.is_category(code) or not icd.is_chapter_or_block(code)


def _dotted(code: str) -> str:
    c = code.strip().upper()
    return c if "." in c or len(c) <= 3 else f"{c[:3]}.{c[3:]}"


@lru_cache(maxsize=100_000)
def code_name(code: str) -> str:
    """The English ICD-10-CM name of ``code`` (dotted or not, any case), its category's name when the code itself
    is not listed, or ""."""
    names = _names()
    c = _dotted(code)
    for candidate in (c, category(c)):
        if candidate and candidate in names:
            return names[candidate]
    return ""


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def name_forms(name: str) -> list[str]:
    """The surface forms under which a code name is searched in text (see the module docstring)."""
    synonyms = [b.strip().lower() for b in _BRACKET_RE.findall(name)]  # "Rubella [German measles]"
    base = _BRACKET_RE.sub("", _PAREN_RE.sub("", name)).lower()
    base = re.sub(r",?\s*unspecified\b", "", base).strip(" ,")
    head, _, rest = base.partition(",")
    forms = [base, head.strip()] if _QUALIFIER_RE.match(rest.strip()) else [base]
    plain = _COMPLICATION_RE.sub("", forms[-1]).strip(" ,")  # "Rubella without complication" → "rubella"
    forms += [plain, *synonyms]
    out = []
    for f in forms:
        words = _words(f)
        if not words or words[0] == "other" or len(words) > _MAX_WORDS or len("".join(words)) < 4:
            continue
        out.append(" ".join(words))
    return list(dict.fromkeys(out))


def lookup_forms(name: str) -> list[str]:
    """More forms of a code name, for looking a disease's *name* up (never for scanning text): the part before
    " of " ("Basal cell carcinoma of skin" → basal cell carcinoma; "Leiomyoma of uterus" → leiomyoma) and each side
    of " and " ("Tinea barbae and tinea capitis" → tinea capitis), when that part is specific (two words or more, or
    one long word)."""
    out = []
    for form in name_forms(name):
        parts = [form.split(" of ")[0]] if " of " in form else []
        parts += form.split(" and ") if " and " in form else []
        for part in parts:
            words = part.split()
            if len(words) >= 2 or (words and len(words[0]) >= 8):
                out.append(part)
    return list(dict.fromkeys(out))


MENTION_TABLE_VERSION = 3  # 3: the names of categories that are their own block


@lru_cache(maxsize=1)
def mention_table() -> dict[str, str]:
    """Surface form → the most general ICD-10-CM code (categories and their sub-codes; chapters and blocks are
    not diagnoses). Built from the installed `simple-icd-10-cm` in ~3 s and cached as JSON under capr's cache
    directory (a cold `capr cases similar` reads it in milliseconds)."""
    return _cached_table("icd10-mentions", _build_mention_table)


def _cached_table(kind: str, build: Callable[[], dict[str, str]]) -> dict[str, str]:
    import json
    from importlib.metadata import PackageNotFoundError, version

    from capr.index.atomic import write_json
    from capr.models.encoder import cache_root

    try:
        stamp = version("simple-icd-10-cm")
    except PackageNotFoundError:
        stamp = "unknown"
    path = cache_root() / f"{kind}-v{MENTION_TABLE_VERSION}-{stamp}.json"
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(table, dict):
            return table
    except (OSError, ValueError):
        pass  # not built yet, or damaged: built again
    table = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, table)
    except OSError:
        pass  # a read-only cache: the table is still used, built again next time
    return table


def _build_mention_table(forms: Callable[[str], list[str]] = name_forms) -> dict[str, str]:
    icd = _icd()
    table: dict[str, str] = {}
    for code in icd.get_all_codes(with_dots=True):
        # (not the categories that are their own block either: "neoplasms" would name D49, every cancer's profile)
        if icd.is_chapter_or_block(code) or not code.startswith(_MENTION_CHAPTERS):
            continue
        for form in forms(str(icd.get_description(code))):
            old = table.get(form)
            if old is None or (len(code), code) < (len(old), old):
                table[form] = code
    return table


@lru_cache(maxsize=1)
def lookup_table() -> dict[str, str]:
    """Name → ICD-10-CM code for looking a disease's name up: :func:`mention_table` and, where it has no entry, the
    :func:`lookup_forms` of every code name (cached beside it)."""
    extra = _cached_table("icd10-lookup", lambda: _build_mention_table(lookup_forms))
    return {**extra, **mention_table()}


def _scan(text: str, limit: int | None = None, table: dict[str, str] | None = None
          ) -> tuple[list[tuple[str, int, int]], list[bool], list[tuple[int, str, str]]]:
    """The words of ``text`` (lower case, with their character spans), whether a negation governs each, and the
    mentions found ((first word, code, surface form), longest match first; a cue inside a mention is no cue).
    Stops after ``limit`` distinct codes. ``table``: surface form → value (default: :func:`mention_table`)."""
    table = mention_table() if table is None else table
    words: list[tuple[str, int, int]] = []
    breaks: set[int] = set()  # word positions a clause mark precedes
    commas: set[int] = set()  # word positions a comma precedes
    for m in _TOKEN_RE.finditer(text):
        if m.group() == ",":
            commas.add(len(words))
        elif m.group()[0].isalnum():
            words.append((m.group().lower(), m.start(), m.end()))
        else:
            breaks.add(len(words))
    plain = [w for w, _, _ in words]
    negated = [False] * len(plain)
    mentions: list[tuple[int, str, str]] = []
    codes: set[str] = set()
    scope_start = scope_end = 0  # the words in [scope_start, scope_end) are governed by a negation
    windowed = False  # the scope is a cue's few words, which a comma ends ("without treatment, heart failure")
    i = 0
    while i < len(plain) and (limit is None or len(codes) < limit):
        # a statement word right after the cue is what it negates ("does not have asthma"), later it starts another
        if i in breaks or (plain[i] in _SCOPE_ENDS and i > scope_start) or (windowed and i in commas):
            scope_end = i
        for n in range(min(_MAX_WORDS, len(plain) - i), 0, -1):
            form = " ".join(plain[i:i + n])
            code = table.get(form)
            if code is not None:
                mentions.append((i, code, form))
                codes.add(code)
                for j in range(i, i + n):
                    negated[j] = j < scope_end
                i += n
                break
        else:
            for cue, span in _NEGATIONS.items():
                if tuple(plain[i:i + len(cue)]) == cue:
                    i = scope_start = i + len(cue)
                    windowed = span is not None and scope_end <= i
                    scope_end = max(scope_end, len(plain) if span is None else i + span)
                    break
            else:
                negated[i] = i < scope_end
                i += 1
    return words, negated, mentions


def find_mentions(text: str, limit: int = 10) -> list[Diagnosis]:
    """ICD-10-CM names the text mentions (affirmed), in text order, one per code, at most ``limit``."""
    words, negated, mentions = _scan(text)
    out: dict[str, Diagnosis] = {}
    for i, code, form in mentions:
        if len(out) >= limit:
            break
        if not negated[i] and code not in out:
            out[code] = Diagnosis(code, code_name(code), "mention", form)
    return list(out.values())


def find_names(text: str, table: dict[str, str]) -> list[tuple[str, str, bool]]:
    """(value, surface form, negated) of each name of ``table`` (surface form, as :func:`name_forms` writes one →
    value) the text mentions, in text order, longest match first, with the same negation scopes as
    :func:`find_mentions`."""
    _, negated, mentions = _scan(text, table=table)
    return [(value, form, negated[i]) for i, value, form in mentions]


def surface_form(name: str) -> str:
    """A name as the mention scanner reads words (lower case, words joined by one space)."""
    return " ".join(_words(name))


def labelled_diagnoses(codes: list[str]) -> list[Diagnosis]:
    return [Diagnosis(c.upper(), code_name(c), "label") for c in codes]


def diagnoses_of(metadata: dict[str, Any], text: str) -> tuple[bool, list[Diagnosis]]:
    """(labelled, diagnoses): the case's own codes when it has any, else the ICD-10-CM names its text mentions."""
    codes = metadata.get("diagnoses")
    if isinstance(codes, list) and codes:
        return True, labelled_diagnoses([str(c) for c in codes])
    return False, find_mentions(text)


__all__ = ["Diagnosis", "category", "code_name", "diagnoses_of", "find_mentions", "find_names", "lookup_forms",
           "lookup_table", "surface_form", "labelled_diagnoses",
           "mention_table", "name_forms"]
