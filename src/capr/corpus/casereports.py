"""Published clinical case reports and textbook sections, one JSON object per line:

- **E3C** (European Clinical Case Corpus, English): ``id, doi, source, licence, layer, text, ...`` — the
  case-presentation part of a case report; no diagnosis labels.
- **CodiEsp** (CLEF eHealth 2020, English translation): ``id, split, text, diagnoses, procedures`` — ICD-10-CM
  diagnosis codes and ICD-10-PCS procedure codes (lower case in the release; stored upper case, as written in
  ICD-10-CM) on the train and dev splits, none on the background split.
- **OpenStax** textbook sections: ``id, module, title, section, text``.

Each reader tags its documents with ``source`` (e3c | codiesp | openstax), so a case index can be filtered to
patient descriptions, and prefixes ids with the source so ids of different corpora never collide."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from capr.corpus.files import json_lines
from capr.corpus.report import ReadReport
from capr.records import Document, check_doc_id

E3C_KEYS = frozenset({"id", "doi", "text", "licence"})
CODIESP_KEYS = frozenset({"id", "split", "text", "diagnoses"})
OPENSTAX_KEYS = frozenset({"id", "module", "title", "section", "text"})
CODIESP_SPLITS = ("train", "dev", "test", "background")  # the release's three coded splits and its background set


def sniff_case_report(record: object) -> str | None:
    """The reader for a JSONL file whose first record is ``record``: "e3c", "codiesp", "openstax" or None."""
    if not isinstance(record, dict):
        return None
    keys = set(record)
    if CODIESP_KEYS <= keys and "procedures" in keys:
        return "codiesp"
    if E3C_KEYS <= keys:
        return "e3c"
    if OPENSTAX_KEYS <= keys:
        return "openstax"
    return None


def _fields(obj: object, path: Path, record: str, report: ReadReport, required: frozenset[str]) -> dict | None:
    if not isinstance(obj, dict):
        report.bad(str(path), f"expected a JSON object, got {type(obj).__name__}", record)
        return None
    missing = sorted(required - set(obj))
    if missing:
        report.bad(str(path), f"missing field(s) {', '.join(missing)}", record)
        return None
    if not isinstance(obj["text"], str):
        report.bad(str(path), "field 'text' must be a string", record)
        return None
    return obj


def _doc_id(prefix: str, value: object, path: Path, record: str, report: ReadReport) -> str | None:
    try:
        return check_doc_id(f"{prefix}:{check_doc_id(value)}")
    except ValueError as e:
        report.bad(str(path), f"field 'id': document id {e}", record)
        return None


def _records(path: Path, report: ReadReport, required: frozenset[str],
             prefix: str) -> Iterator[tuple[str, dict, str]]:
    """(record, fields, document id) of every record that has the required fields and a valid id."""
    for record, obj in json_lines(path, report):
        r = _fields(obj, path, record, report, required)
        if r is not None and (doc_id := _doc_id(prefix, r["id"], path, record, report)) is not None:
            yield record, r, doc_id


def read_e3c(path: Path, report: ReadReport) -> Iterator[Document]:
    path = Path(path)
    for record, r, doc_id in _records(path, report, E3C_KEYS, "e3c"):
        meta: dict[str, Any] = {"source": "e3c", "journal": str(r.get("source") or ""), "doi": str(r.get("doi") or ""),
                                "licence": str(r.get("licence") or ""), "layer": str(r.get("layer") or ""),
                                "published": str(r.get("publication_date") or "")}
        report.at(str(path), record)
        yield Document(doc_id=doc_id, title="", text=r["text"], metadata=meta)


def _codes(value: object, field: str, path: Path, record: str, report: ReadReport) -> list[str] | None:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(c, str) and c.strip() for c in value):
        report.bad(str(path), f"field {field!r} must be a list of code strings", record)
        return None
    return list(dict.fromkeys(c.strip().upper() for c in value))


def read_codiesp(path: Path, report: ReadReport) -> Iterator[Document]:
    path = Path(path)
    for record, r, doc_id in _records(path, report, CODIESP_KEYS, "codiesp"):
        if r["split"] not in CODIESP_SPLITS:
            report.bad(str(path), f"field 'split' is {r['split']!r}; expected one of {', '.join(CODIESP_SPLITS)}", record)
            continue
        diagnoses = _codes(r.get("diagnoses"), "diagnoses", path, record, report)
        procedures = _codes(r.get("procedures"), "procedures", path, record, report)
        if diagnoses is None or procedures is None:
            continue
        # one sentence per line in the release: a case is one paragraph, not a list of headings
        text = " ".join(line.strip() for line in r["text"].splitlines() if line.strip())
        meta = {"source": "codiesp", "split": r["split"], "diagnoses": diagnoses, "procedures": procedures}
        report.at(str(path), record)
        yield Document(doc_id=doc_id, title="", text=text, metadata=meta)


def read_openstax(path: Path, report: ReadReport) -> Iterator[Document]:
    path = Path(path)
    book = path.name.split(".")[0]
    for record, r, doc_id in _records(path, report, OPENSTAX_KEYS, f"openstax:{book}"):
        title = " — ".join(t for t in (str(r["title"]).strip(), str(r["section"] or "").strip()) if t)
        report.at(str(path), record)
        yield Document(doc_id=doc_id, title=title, text=r["text"],
                       metadata={"source": "openstax", "book": book, "module": str(r["module"])})


__all__ = ["CODIESP_SPLITS", "read_codiesp", "read_e3c", "read_openstax", "sniff_case_report"]
