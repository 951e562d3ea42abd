"""MIMIC clinical notes: MIMIC-III ``NOTEEVENTS.csv(.gz)`` and MIMIC-IV-Note (``discharge.csv.gz``,
``radiology.csv.gz``; also their ``*_detail`` siblings are not notes and are refused by the header check).

Both are read row by row with the csv module (a 2 GB NOTEEVENTS never sits in memory); sections are left
to heading detection, which copes with the de-identification placeholders (see capr.text.deid).

Metadata: the source's own columns under their (lower-cased) names, so MIMIC users filter as they know
them (``subject_id=10006``, ``category in (Discharge summary, Radiology)``, ``charttime>=2150-01-01``), plus
the names every EHR reader fills: ``patient``, ``encounter``, ``note_type``, ``category`` and ``date``.
Identifiers stay strings (``"10006"``); dates and times are ISO 8601 (``2151-07-16T14:30:00``).
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path
from typing import Iterator

from capr.corpus.files import open_text
from capr.corpus.report import ReadReport
from capr.records import Document

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

MIMIC3_REQUIRED = ("row_id", "subject_id", "category", "text")
MIMIC4_REQUIRED = ("note_id", "subject_id", "note_type", "text")
# MIMIC-IV-Note note_type codes → the MIMIC-III CATEGORY words, so one category filter spans both
MIMIC4_CATEGORIES = {"DS": "Discharge summary", "RR": "Radiology", "AR": "Radiology addendum", "DA": "Discharge addendum"}

_DT_RE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?)?")


def iso_datetime(value: str | None) -> str:
    """MIMIC's "2151-07-16 14:30:00" (or a bare date) as ISO 8601; "" for empty, the raw text if unparsable."""
    v = (value or "").strip()
    m = _DT_RE.match(v)
    if not m:
        return v
    y, mo, d, h, mi, s = m.groups()
    date = f"{y}-{int(mo):02d}-{int(d):02d}"
    return date if h is None else f"{date}T{int(h):02d}:{mi}:{s or '00'}"


def _is_error(flag: str | None) -> bool:
    # ISERROR is empty for valid notes and "1" for notes a care provider marked as erroneous
    f = (flag or "").strip()
    return f not in ("", "0", "0.0")


def _rows(path: Path, report: ReadReport, required: tuple[str, ...], what: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(CSV line number, row with lower-cased keys); the header is checked once."""
    with open_text(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            report.bad(str(path), f"not a {what} CSV: no header")
            return
        keys = [h.strip().lower() for h in header]
        missing = [c for c in required if c not in keys]
        if missing:
            report.bad(str(path), f"not a {what} CSV: missing column(s) {', '.join(missing)}")
            return
        n = len(keys)
        try:
            for row in reader:
                if not row:
                    continue
                line = reader.line_num
                if len(row) != n:
                    report.bad(str(path), f"{len(row)} fields, the header has {n}", f"line {line}")
                    continue
                yield line, dict(zip(keys, row))
        except csv.Error as e:
            report.bad(str(path), f"malformed CSV: {e}", f"line {reader.line_num}")


def read_mimic3(path: Path, report: ReadReport) -> Iterator[Document]:
    """MIMIC-III NOTEEVENTS: rows with ISERROR set are skipped and counted (``report.flagged``)."""
    path = Path(path)
    for line, row in _rows(path, report, MIMIC3_REQUIRED, "MIMIC-III NOTEEVENTS"):
        row_id = row["row_id"].strip()
        if not row_id:
            report.bad(str(path), "empty ROW_ID", f"line {line}")
            continue
        if _is_error(row.get("iserror")):
            report.flagged += 1
            continue
        subject = row["subject_id"].strip()
        if not subject:
            report.bad(str(path), "empty SUBJECT_ID", f"ROW_ID {row_id} (line {line})")
            continue
        category = row["category"].strip()
        description = (row.get("description") or "").strip()
        chartdate = iso_datetime(row.get("chartdate"))
        charttime = iso_datetime(row.get("charttime"))
        hadm = (row.get("hadm_id") or "").strip()
        meta = {
            "source": "mimic-iii",
            "row_id": row_id,
            "subject_id": subject,
            "patient": subject,
            "category": category,
            "note_type": category,
            "description": description,
            # discharge summaries have a CHARTDATE only: "date" is the most precise time every note has
            "date": charttime or chartdate,
        }
        if hadm:
            meta["hadm_id"] = meta["encounter"] = hadm
        if chartdate:
            meta["chartdate"] = chartdate
        if charttime:
            meta["charttime"] = charttime
        title = category if not description or description.lower() == "report" else f"{category}: {description}"
        report.at(str(path), f"line {line}")
        yield Document(doc_id=f"mimic3-{row_id}", title=title, text=row["text"], metadata=meta)


def read_mimic4(path: Path, report: ReadReport) -> Iterator[Document]:
    """MIMIC-IV-Note discharge / radiology notes."""
    path = Path(path)
    for line, row in _rows(path, report, MIMIC4_REQUIRED, "MIMIC-IV-Note"):
        note_id = row["note_id"].strip()
        if not note_id:
            report.bad(str(path), "empty note_id", f"line {line}")
            continue
        subject = row["subject_id"].strip()
        if not subject:
            report.bad(str(path), "empty subject_id", f"note_id {note_id} (line {line})")
            continue
        note_type = row["note_type"].strip()
        category = MIMIC4_CATEGORIES.get(note_type.upper(), note_type)
        charttime = iso_datetime(row.get("charttime"))
        storetime = iso_datetime(row.get("storetime"))
        hadm = (row.get("hadm_id") or "").strip()
        meta = {
            "source": "mimic-iv",
            "note_id": note_id,
            "subject_id": subject,
            "patient": subject,
            "note_type": note_type,
            "category": category,
            "date": charttime or storetime,
        }
        seq = (row.get("note_seq") or "").strip()
        if seq:
            # a count, not an identifier: stored as a number so note_seq>=2 compares numerically on Milvus too
            meta["note_seq"] = int(seq) if seq.isdigit() else seq
        if hadm:
            meta["hadm_id"] = meta["encounter"] = hadm
        if charttime:
            meta["charttime"] = charttime
        if storetime:
            meta["storetime"] = storetime
        report.at(str(path), f"line {line}")
        yield Document(doc_id=note_id, title=category, text=row["text"], metadata=meta)
