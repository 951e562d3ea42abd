"""Disease profiles from any index: per entity (a document's title or focus), the passages that describe how it
presents — its symptoms, signs, causes, exams and tests, overview — found the way ⟨entity, aspect⟩ search finds them,
by the aspect of each passage's heading.

A document is an entity's profile when it is reference text (not a patient's case: capr.cases.similar's sources) and
- it has a passage whose aspect says how the entity presents (symptoms, causes, exams and tests, diagnosis): MedQuAD's
  "What are the symptoms of X?", a user's article with a "Signs and symptoms" heading; its profile is those passages
  and its overview; or
- its title names a condition (an ICD-10-CM name, or a short title with a word such as "syndrome", "disease",
  "infection", "-itis", "-osis"): an OpenStax section "Brucellosis"; its profile is the whole document.

OpenStax titles read "Chapter — Section": the entity is the section. Documents of one entity (MedQuAD's GARD, GHR
and MedlinePlus pages of one disease) are one profile. Each entity gets the ICD-10-CM code its name is (the most
general code of that name: capr.cases.icd10.mention_table) where there is one; an entity whose code is a symptom
(chapter R: "Fever", "Headache") is a finding, not a diagnosis.

The table is read from the index's columns (title, aspect, source) — no passage text — once per index."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from capr.index.atomic import write_json

if TYPE_CHECKING:
    from capr.index.index import Index

# aspects that describe how a condition presents, and mark a document as a condition's article (a patient's note has
# "findings" and "diagnosis" sections too, never "symptoms" or "causes")
PRESENTING_ASPECTS = frozenset({"symptoms", "causes", "exams and tests"})
# the passages of a profile: those, the overview, how it is diagnosed, who is at risk and what follows
PROFILE_ASPECTS = PRESENTING_ASPECTS | {"information", "diagnosis", "findings", "susceptibility", "complications", None}
# the sources of patients' records: never a profile
PATIENT_SOURCES = ("codiesp", "e3c", "mimic-iii", "mimic-iv")
_CONDITION_WORD_RE = re.compile(
    r"\b(?:disease|syndrome|disorder|infections?|fever|cancer|carcinoma|tumou?rs?|deficiency|palsy|sclerosis|"
    r"anemia|leukemia|lymphoma|dystrophy|poisoning|\w+itis|\w+osis|\w+iasis|\w+emia|\w+pathy|\w+oma)\b", re.IGNORECASE)
_MAX_TITLE_WORDS = 8
_SYNONYM_DOCS = 3  # documents of an entity whose listed synonyms become its aliases
MAX_ENTITY_DOCUMENTS = 12  # more documents under one title: a subject (MedMCQA's "Pediatrics"), not one condition
_PAREN_RE = re.compile(r"\s*\(([^()]*)\)\s*")
_SPLIT_RE = re.compile(r"\s+—\s+")  # OpenStax's "Chapter — Section" (capr.corpus.casereports)


def normalize_name(name: str) -> str:
    """The key two names of one entity share: lower case, words only, possessives and "the" dropped ("Crohn's
    disease" and "Crohn disease"; "Sjögren’s syndrome" and "Sjogren syndrome")."""
    from capr.cases.findings import american
    from capr.text.analyzer import fold_latin_accents

    t = american(fold_latin_accents(name))
    t = re.sub(r"['’`]s\b", "", t)
    words = re.findall(r"[a-z0-9]+", t)
    return " ".join(w for w in words if w != "the")


# qualifiers an exam or a note adds that name the same disease as a profile's shorter name
QUALIFIERS = frozenset("primary acute chronic malignant benign typical classic idiopathic simple common uncomplicated "
                       "adult childhood juvenile".split())


def short_keys(key: str) -> list[str]:
    """A name key, then the key without its qualifiers ("primary sjogren syndrome" → "sjogren syndrome")."""
    words = key.split()
    kept = [w for w in words if w not in QUALIFIERS]
    return [key, " ".join(kept)] if kept and kept != words else [key]


def entity_names(title: str) -> list[str]:
    """The names a document title gives its entity: its section ("Chapter — Section" → Section) without a
    parenthesis, then what the parenthesis says ("Pertussis (Whooping Cough)" → pertussis, whooping cough)."""
    part = _SPLIT_RE.split(title.strip())[-1].strip() if title else ""
    if not part:
        return []
    inner = _PAREN_RE.findall(part)
    head = _PAREN_RE.sub(" ", part).strip(" ,.;:")
    out = [head] if head else []
    for group in inner:
        out += [g.strip() for g in re.split(r"\s+and\s+|,", group) if g.strip()]
    return out


def names_condition(name: str) -> bool:
    """Whether a title names a condition: short, not a question, an ICD-10-CM name or a word conditions are called."""
    if not name or name.rstrip().endswith("?") or len(name.split()) > _MAX_TITLE_WORDS:
        return False
    return bool(_CONDITION_WORD_RE.search(name)) or icd10_code(name) is not None


def icd10_code(name: str) -> str | None:
    """The ICD-10-CM code whose name (or a short form of it) is ``name``, or None."""
    from capr.cases.icd10 import lookup_table, surface_form

    return lookup_table().get(surface_form(name))


@dataclass(slots=True)
class Entity:
    key: str  # normalize_name of its name
    name: str  # as the corpus writes it (the first title)
    code: str | None = None  # ICD-10-CM code of the name
    aliases: list[str] = field(default_factory=list)  # its other names (a title's parenthesis)
    doc_ids: list[str] = field(default_factory=list)

    @property
    def is_finding(self) -> bool:
        """A symptom or sign (ICD-10-CM chapter R, or G89 pain), not a diagnosis."""
        return bool(self.code) and (self.code.startswith("R") or self.code.startswith("G89"))


class ProfileTable:
    """The entities of an index and their profile passages: ``rows`` (profile passages, grouped by entity) and
    ``starts`` (where each entity's rows begin in ``rows``), for per-entity maxima with ``np.maximum.reduceat``."""

    def __init__(self, entities: list[Entity], rows: np.ndarray, starts: np.ndarray,
                 by_key: dict[str, int] | None = None) -> None:
        self.entities = entities
        self.rows = rows
        self.starts = starts
        if by_key is None:  # each name and alias → its entity (the first entity to claim a name keeps it)
            by_key = {}
            for i, e in enumerate(entities):
                for k in [e.key, *(normalize_name(a) for a in e.aliases)]:
                    by_key.setdefault(k, i)
        self.by_key = by_key

    def __len__(self) -> int:
        return len(self.entities)

    def entity_rows(self, i: int) -> np.ndarray:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.rows)
        return self.rows[self.starts[i]:end]

    def find(self, name: str) -> int | None:
        return self.by_key.get(normalize_name(name))

    def per_entity_max(self, row_scores: np.ndarray) -> np.ndarray:
        """Each entity's best score over its profile rows."""
        if not len(self.rows):
            return np.zeros(0, dtype=np.float32)
        return np.maximum.reduceat(row_scores[self.rows], self.starts)

    @classmethod
    def from_index(cls, index: "Index", reference: np.ndarray) -> "ProfileTable":
        """Profiles of the documents whose rows are in ``reference`` (a row mask: the rows that are not patients')."""
        if not len(index) or "title" not in index.columns:
            return cls([], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        titles, aspects = index.columns["title"], index.columns["aspect"]
        doc_col = index.columns["doc_id"]
        tcodes, acodes = np.asarray(titles.codes), np.asarray(aspects.codes)
        dcodes = np.asarray(doc_col.codes)
        profile_aspect = np.array([v in PROFILE_ASPECTS for v in aspects.values], dtype=bool)
        presenting = np.array([v in PRESENTING_ASPECTS for v in aspects.values], dtype=bool)
        live_ref = reference & index.live
        # documents (by title) with a presenting aspect are articles about a condition
        article_titles = set(np.unique(tcodes[live_ref & presenting[acodes]]).tolist())
        entities: list[Entity] = []
        by_key: dict[str, int] = {}
        rows_of: list[list[np.ndarray]] = []
        ref_rows = np.flatnonzero(live_ref)
        order = np.argsort(tcodes[ref_rows], kind="stable")
        ref_rows = ref_rows[order]
        group_codes, group_starts = np.unique(tcodes[ref_rows], return_index=True)
        bounds = np.append(group_starts, len(ref_rows))
        for g, tcode in enumerate(group_codes.tolist()):
            title = titles.values[tcode]
            names = entity_names(title) if isinstance(title, str) else []
            if not names:
                continue
            article = tcode in article_titles
            if not article and not names_condition(names[0]):
                continue
            rows = ref_rows[bounds[g]:bounds[g + 1]]
            if len(np.unique(dcodes[rows])) > MAX_ENTITY_DOCUMENTS:
                continue  # a heading many documents share ("Pediatrics", "Introduction") names a subject, not an entity
            if article:
                rows = rows[profile_aspect[acodes[rows]]]
            key = normalize_name(names[0])
            if not len(rows) or not key:
                continue
            i = by_key.get(key)
            if i is None:
                i = by_key[key] = len(entities)
                entities.append(Entity(key, names[0], icd10_code(names[0]), names[1:]))
                rows_of.append([])
            e = entities[i]
            e.doc_ids.extend(d for d in dict.fromkeys(str(doc_col.values[c]) for c in np.unique(dcodes[rows]).tolist())
                             if d not in e.doc_ids)
            e.aliases.extend(a for a in names[1:] if a not in e.aliases)
            rows_of[i].append(rows)
        for e in entities:  # the other names its documents give the focus (MedQuAD's GARD, GHR, MedlinePlus)
            for doc_id in e.doc_ids[:_SYNONYM_DOCS]:
                synonyms = index.document(doc_id).metadata.get("synonyms")
                if isinstance(synonyms, list):
                    e.aliases.extend(a for a in map(str, synonyms) if a.strip() and a not in e.aliases)
        return cls._packed(entities, rows_of)

    @classmethod
    def _packed(cls, entities: list[Entity], rows_of: list[list[np.ndarray]]) -> "ProfileTable":
        for e in entities:
            if e.code is None:
                e.code = next((c for c in map(icd10_code, e.aliases) if c), None)
        parts = [np.unique(np.concatenate(r)) for r in rows_of]
        sizes = np.array([len(p) for p in parts], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(parts) else np.zeros(0, np.int64)
        rows = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
        return cls(entities, rows, starts)


    # -- saved beside the index's other caches -------------------------------------------------------
    def to_json(self) -> dict:
        return {"rows": self.rows.tolist(), "starts": self.starts.tolist(), "keys": self.by_key,
                "entities": [[e.key, e.name, e.code, e.aliases, e.doc_ids] for e in self.entities]}

    @classmethod
    def from_json(cls, data: dict) -> "ProfileTable":
        entities = [Entity(k, n, c, list(a), list(d)) for k, n, c, a, d in data["entities"]]
        return cls(entities, np.asarray(data["rows"], dtype=np.int64), np.asarray(data["starts"], dtype=np.int64),
                   data.get("keys"))


PROFILES_VERSION = 4


def index_cache_path(index: "Index", kind: str, mask: np.ndarray) -> Path:
    """Where something read from one generation of an index (through the rows of ``mask``) is kept: under capr's
    cache directory, named by the index's folder, its generation and the rows, so any change reads it anew."""
    from capr.models.encoder import cache_root

    key = "\x00".join([str(Path(index.root).resolve()), str(index.manifest.get("generation")),
                       ",".join(s.name for s in index.segments), str(len(index)),
                       hashlib.sha1(np.packbits(mask).tobytes()).hexdigest()])
    return cache_root() / "case-tables" / f"{kind}-v{PROFILES_VERSION}-{hashlib.sha1(key.encode()).hexdigest()[:20]}.json"


def cached(index: "Index", kind: str, mask: np.ndarray, build: Callable[[], Any]) -> Any:
    """``build()`` (a JSON value) of one generation of an index, read from the cache when it was built before."""
    path = index_cache_path(index, kind, mask)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("version") == PROFILES_VERSION:
            return data["value"]
    except (OSError, ValueError, KeyError):
        pass  # not built yet, or damaged: built again
    value = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"version": PROFILES_VERSION, "value": value})
    except OSError:
        pass  # a read-only cache: built again next time
    return value


def load_profiles(index: "Index", reference: np.ndarray) -> ProfileTable:
    """The profiles of ``index`` (the documents of the ``reference`` rows), cached after the first read (`capr
    case-index` reads them when it builds the index)."""
    data = cached(index, "profiles", reference, lambda: ProfileTable.from_index(index, reference).to_json())
    return ProfileTable.from_json(data)


def keys_of(names: Iterable[str]) -> list[str]:
    return [k for k in dict.fromkeys(normalize_name(n) for n in names) if k]


__all__ = ["QUALIFIERS", "short_keys", "Entity", "PATIENT_SOURCES", "PRESENTING_ASPECTS", "PROFILE_ASPECTS", "ProfileTable", "entity_names", "icd10_code", "keys_of",
           "cached", "index_cache_path", "load_profiles", "names_condition", "normalize_name"]
