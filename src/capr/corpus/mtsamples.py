"""MTSamples CSV (Kaggle version): headings were flattened to ",HEADING:," and are restored as lines."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path
from typing import Iterator

from capr.corpus.files import csv_header, guard_reads, open_text
from capr.corpus.report import ReadReport
from capr.records import Document

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

# ",HEADING:," or ",Vitals:  text" or ",1.  item" → a new line. Lower-case continuations are ordinary commas.
_FLAT_HEADING_RE = re.compile(r"(?:^|,)\s*(?=(?:[A-Z][A-Za-z0-9 /&\-()']{0,60}:|\d{1,2}\.\s))")
_EMPTY_AFTER_COLON_RE = re.compile(r"^([A-Z][A-Za-z0-9 /&\-()']{0,60}:)\s*,\s*", re.M)

REQUIRED = ("transcription",)


def restore_layout(flat: str) -> str:
    text = _FLAT_HEADING_RE.sub("\n", flat.strip())
    text = _EMPTY_AFTER_COLON_RE.sub(r"\1 ", text)
    return "\n".join(line.strip() for line in text.strip().split("\n"))


def read_mtsamples(path: Path, report: ReadReport, dedupe: bool = True) -> Iterator[Document]:
    path = Path(path)
    seen: set[str] = set()
    with open_text(path) as fh:
        reader = csv.DictReader(fh)
        fields = csv_header(path, reader)
        missing = [c for c in REQUIRED if c not in fields]
        if missing:
            report.bad(str(path), f"not an MTSamples CSV: missing column(s) {missing}")
            return
        for rowno, row in enumerate(guard_reads(path, reader, lambda: f"line {reader.line_num + 1}"), 2):
            if None in row.values():
                # csv fills the columns a row lacks with None: a file cut part-way (or a broken row)
                got = sum(v is not None for v in row.values())
                report.bad(str(path), f"row has {got} of {len(fields)} columns (truncated file?)", f"line {reader.line_num}")
                continue
            flat = (row.get("transcription") or "").strip()
            note_id = (row.get("note_id") or row.get("") or str(rowno - 1)).strip()
            if not flat:
                report.empty += 1
                continue
            if dedupe:
                if flat in seen:
                    report.duplicates += 1
                    continue
                seen.add(flat)
            yield Document(
                doc_id=f"mtsamples-{note_id}",
                title=(row.get("sample_name") or "").strip(),
                text=restore_layout(flat),
                metadata={
                    "specialty": (row.get("medical_specialty") or "").strip(),
                    "description": (row.get("description") or "").strip(),
                    "keywords": (row.get("keywords") or "").strip(),
                },
            )
