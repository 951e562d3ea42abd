"""Readers: every source becomes a stream of :class:`capr.records.Document`."""

from __future__ import annotations

import json
import re
from enum import Enum
from pathlib import Path
from typing import Iterator

from capr.corpus.ccda import is_ccda_head
from capr.corpus.files import read_head
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, oversized


class Format(str, Enum):
    auto = "auto"
    text = "text"
    jsonl = "jsonl"
    medquad = "medquad"
    medquad_cdv = "medquad-cdv"
    mtsamples = "mtsamples"
    mts_dialog = "mts-dialog"
    beir = "beir"
    mimic3 = "mimic3"
    mimic4 = "mimic4"
    fhir = "fhir"
    ccda = "ccda"


def _sniff_json(source: Path) -> Format | None:
    """FHIR when the first JSON value (a resource, a Bundle, or an NDJSON line) has a resourceType."""
    head = read_head(source, 65536)
    first = head.split(b"\n", 1)[0] if source.name.lower().endswith((".ndjson", ".ndjson.gz", ".jsonl", ".jsonl.gz")) else head
    if re.search(rb'^\s*\{\s*"resourceType"\s*:', first) or re.search(rb'"resourceType"\s*:\s*"(Bundle|DocumentReference|Composition|DiagnosticReport)"', first):
        return Format.fhir
    return None


def _sniff_csv(source: Path) -> Format | None:
    header = read_head(source, 4096).split(b"\n", 1)[0].lower()
    cols = {c.strip().strip('"') for c in header.decode("utf-8", "replace").split(",")}
    if {"row_id", "subject_id", "category", "text"} <= cols:
        return Format.mimic3  # MIMIC-III NOTEEVENTS
    if {"note_id", "subject_id", "note_type", "text"} <= cols:
        return Format.mimic4  # MIMIC-IV-Note discharge / radiology
    return None


def detect_format(source: Path) -> Format:
    source = Path(source)
    if not source.exists():
        raise BadInputError(str(source), "no such file or directory")
    if source.is_dir():
        names = {p.name for p in source.iterdir()}
        if names & {"corpus.jsonl", "corpus.jsonl.gz"}:
            return Format.beir
        if "passages.jsonl.gz" in names and "queries.jsonl.gz" in names:
            return Format.medquad_cdv
        if any(n.startswith("MTS-Dialog-") for n in names):
            return Format.mts_dialog
        # a folder of C-CDA documents, or a FHIR bulk export (NDJSON per resource type) or JSON resources
        first_xml = next((p for p in sorted(source.glob("*.xml")) if p.is_file()), None)
        if first_xml is not None and is_ccda_head(read_head(first_xml, 4096)):
            return Format.ccda
        first_json = next((p for p in sorted(source.iterdir()) if p.is_file()
                           and p.name.lower().endswith((".ndjson", ".ndjson.gz", ".json"))), None)
        if first_json is not None and _sniff_json(first_json) is Format.fhir:
            return Format.fhir
        if "MedQuAD.tar.gz" in names:
            raise BadInputError(str(source), "directory holds MedQuAD.tar.gz: pass that file as SOURCE")
        if any(source.rglob("*.xml")) and not any(source.rglob("*.txt")):
            return Format.medquad
        return Format.text
    name = source.name.lower()
    if name.endswith(".xml") and is_ccda_head(read_head(source, 4096)):
        return Format.ccda
    if name.endswith((".tar.gz", ".tgz", ".tar", ".xml")):
        return Format.medquad
    if name.endswith((".txt", ".md", ".text", ".markdown")):
        return Format.text
    if name.endswith((".csv", ".csv.gz")):
        header = read_head(source, 4096).split(b"\n", 1)[0].lower()
        sniffed = _sniff_csv(source)
        if sniffed is not None:
            return sniffed
        if b"transcription" in header:
            return Format.mtsamples
        if b"section_header" in header:
            return Format.mts_dialog
        raise BadInputError(str(source), "CSV is neither MTSamples (transcription column), MTS-Dialog, MIMIC-III NOTEEVENTS "
                            "(ROW_ID, SUBJECT_ID, CATEGORY, TEXT) nor MIMIC-IV-Note (note_id, subject_id, note_type, text)")
    if name.endswith((".json", ".json.gz")) and _sniff_json(source) is Format.fhir:
        return Format.fhir
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")):
        if _sniff_json(source) is Format.fhir:
            return Format.fhir
        first = read_head(source, 65536).split(b"\n", 1)[0]
        try:
            rec = json.loads(first)
        except ValueError:
            return Format.jsonl  # the JSONL reader reports the bad line precisely
        if isinstance(rec, dict) and "medquad_file" in rec and "pid" in rec:
            return Format.medquad_cdv
        return Format.jsonl
    raise BadInputError(str(source), "cannot detect the format; pass --format (text, jsonl, medquad, medquad-cdv, mtsamples, mts-dialog, beir, mimic3, mimic4, fhir, ccda)")


def read_documents(source: str | Path, format: Format | str = Format.auto, report: ReadReport | None = None) -> Iterator[Document]:
    """Stream documents from ``source``. Bad records raise :class:`BadInputError` unless
    ``report.skip_bad`` is set, in which case they are collected in ``report.skipped``."""
    from capr.corpus import beir, ccda, fhir, jsonl, medquad, mimic, mts_dialog, mtsamples, text

    source = Path(source)
    report = report if report is not None else ReadReport()
    try:
        fmt = Format(format)
    except ValueError:
        raise BadInputError(str(source), f"unknown format {format!r}; choose one of {[f.value for f in Format]}") from None
    if fmt is Format.auto:
        fmt = detect_format(source)
    elif not source.exists():
        raise BadInputError(str(source), "no such file or directory")
    readers = {
        Format.text: text.read_text_dir,
        Format.jsonl: jsonl.read_jsonl,
        Format.medquad: medquad.read_medquad,
        Format.medquad_cdv: medquad.read_medquad_cdv,
        Format.mtsamples: mtsamples.read_mtsamples,
        Format.mts_dialog: mts_dialog.read_mts_dialog,
        Format.beir: beir.read_beir_corpus,
        Format.mimic3: mimic.read_mimic3,
        Format.mimic4: mimic.read_mimic4,
        Format.fhir: fhir.read_fhir,
        Format.ccda: ccda.read_ccda,
    }
    limit = report.max_doc_chars
    for doc in readers[fmt](source, report):
        if not doc.text or doc.text.isspace():  # not .strip(): no copy of a huge text
            report.empty += 1
            continue
        if limit is not None and (why := oversized(doc.text, limit)) is not None:
            # refused here, where the file is known, before the document is held any longer
            report.bad(str(doc.metadata.get("path") or source), why, doc.doc_id)
            continue
        yield doc


__all__ = ["Format", "ReadReport", "detect_format", "read_documents"]
