"""A CSV of documents: one per row, with the fields of a JSONL record as columns (a ``.tsv`` file: tab-separated;
a ``.csv`` may be separated by semicolons, as Excel saves it in locales whose decimal mark is the comma).

``text`` and an id column (``doc_id``, ``id``, ``_id`` or ``docid``) are required, ``title`` is optional;
every other column becomes metadata (an empty cell is a field the document lacks). Column names are
matched without regard to case or surrounding spaces."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Iterator

from capr.corpus.files import csv_header, first_line, guard_reads, open_text, read_head
from capr.corpus.jsonl import ID_KEYS, parse_document_json
from capr.corpus.report import ReadReport
from capr.records import Document

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

COLUMNS_HELP = f"columns text and an id ({', '.join(ID_KEYS)}), title optional"


def is_documents_header(columns: set[str]) -> bool:
    """Whether lower-cased CSV column names are those of a CSV of documents."""
    return "text" in columns and bool(columns & set(ID_KEYS))


def is_tsv(path: Path) -> bool:
    return path.name.lower().endswith((".tsv", ".tsv.gz"))


def documents_delimiter(path: Path) -> str | None:
    """The column separator at which the file's header line names a CSV of documents, or None: a tab in a
    ``.tsv``; in a ``.csv`` a comma or the semicolon that Excel writes where the comma is the decimal mark."""
    line = first_line(read_head(path, 4096)).decode("utf-8", "replace")
    for delimiter in ("\t",) if is_tsv(path) else (",", ";"):
        columns = next(csv.reader([line], delimiter=delimiter), [])
        if is_documents_header({c.strip().lower() for c in columns}):
            return delimiter
    return None


def read_csv_documents(path: Path, report: ReadReport) -> Iterator[Document]:
    path = Path(path)
    delimiter = documents_delimiter(path) or ("\t" if is_tsv(path) else ",")
    with open_text(path) as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        fields = [f.strip().lower() for f in csv_header(path, reader)]
        if not is_documents_header(set(fields)):
            kind = "TSV" if is_tsv(path) else "CSV"
            report.bad(str(path), f"not a {kind} of documents ({COLUMNS_HELP}); got columns {fields}", "line 1")
            return
        reader.fieldnames = fields
        for row in guard_reads(path, reader, lambda: f"line {reader.line_num + 1}"):
            record = f"line {reader.line_num}"
            if None in row:  # csv keeps a long row's extra cells under the key None
                report.bad(str(path), f"row has more cells than the {len(fields)} columns of the header", record)
                continue
            if None in row.values():  # and fills the columns a short row lacks with None
                got = sum(v is not None for v in row.values())
                report.bad(str(path), f"row has {got} of {len(fields)} columns (truncated file?)", record)
                continue
            # an empty cell is a field the document lacks; an empty text, an empty document (counted as such)
            obj = {k: v for k, v in row.items() if v != "" or k == "text"}
            doc = parse_document_json(obj, str(path), record, report)
            if doc is not None:
                report.at(str(path), record)
                yield doc
