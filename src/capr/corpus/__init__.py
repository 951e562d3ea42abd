"""Readers: every source becomes a stream of :class:`capr.records.Document` (``read_documents``); which reader reads
a source is decided by the format registry (capr.corpus.formats)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from capr.corpus.files import folder_files, is_labels_file, missing_reason
from capr.corpus.formats import Format, detect_format, folder_layout, is_named, reader
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, normalize_newlines, oversized


def _check_text_format(source: Path) -> None:
    """``--format text`` on a file another reader takes (a FHIR Bundle, JSONL, C-CDA) would index its raw
    markup as one note: refused, naming the format it has. A file with a text suffix, or one no format is
    detected for, is read as text, as asked."""
    if is_named(source, Format.text):
        return
    try:
        other = detect_format(source)
    except BadInputError:
        if source.name.lower().endswith((".json", ".json.gz")):
            raise BadInputError(str(source), "a JSON file, not a plain-text note: documents are read one per line "
                                "or as one JSON array (--format jsonl); FHIR resources with --format fhir") from None
        return
    if other is not Format.text:
        raise BadInputError(str(source), f"the file looks like {other.value} input, not a plain-text note; "
                            f"use --format {other.value} (or auto)")


def _nothing_read(source: Path, fmt: Format, report: ReadReport, before: tuple[int, int, int, int]) -> BadInputError:
    """The error for a source that gave no document: what its read skipped, or what it lacks."""
    skipped, empty, flagged, duplicates = (now - then for now, then in zip(report.counts(), before))
    mine = ReadReport(skipped=report.skipped[len(report.skipped) - skipped:], empty=empty, flagged=flagged,
                      duplicates=duplicates)
    why = mine.summary() if report.counts() != before else ""
    if mine.skipped:
        why += f"; the first: {mine.skipped[0]}"
    elif not why:
        if source.is_dir() and not folder_files(source):
            why = "the folder holds no files"
        elif fmt is Format.fhir:
            why = "no DocumentReference, Composition or DiagnosticReport resource"
        else:
            why = "the source holds no records"
    return BadInputError(str(source), f"no documents found ({why})")


def read_documents(source: str | Path, format: Format | str = Format.auto, report: ReadReport | None = None,
                   require_documents: bool = False) -> Iterator[Document]:
    """Stream documents from ``source``. Bad records raise :class:`BadInputError` unless
    ``report.skip_bad`` is set, in which case they are collected in ``report.skipped``.
    ``require_documents``: a source that gives no document at all raises BadInputError (once read to
    its end, so a writer consuming the stream aborts): `capr index` must not replace an index with an
    empty one because every record was empty or skipped."""
    source = Path(source)
    report = report if report is not None else ReadReport()
    try:
        fmt = Format(format)
    except ValueError:
        raise BadInputError(str(source), f"unknown format {format!r}; choose one of {[f.value for f in Format]}") from None
    if fmt is Format.auto:
        if not source.exists():
            raise BadInputError(str(source), missing_reason(source))
        # a plain folder is read file by file even when its files share one format, so that a file of
        # another format (or of none) is read by its own reader or reported, never passed over
        fmt = (folder_layout(source) or Format.mixed) if source.is_dir() else detect_format(source)
    elif not source.exists():
        raise BadInputError(str(source), missing_reason(source))
    if fmt is Format.mixed and not source.is_dir():
        fmt = detect_format(source)
    if fmt is Format.text and source.is_file():
        _check_text_format(source)
    if fmt is Format.jsonl and source.is_file() and is_labels_file(source):
        raise BadInputError(str(source), "labelled passages written by `capr labels`, not documents: give the corpus "
                                         "they were made from")
    before = report.counts()
    report.location = None
    limit = report.max_doc_chars
    found = 0
    for doc in reader(fmt)(source, report):
        where, _ = report.take_location(doc.doc_id, str(doc.metadata.get("path") or source))
        if not doc.text or doc.text.isspace():  # not .strip(): no copy of a huge text
            report.empty += 1
            continue
        if limit is not None and (why := oversized(doc.text, limit)) is not None:
            # refused here, where the file is known, before the document is held any longer
            report.bad(where, why, doc.doc_id)
            continue
        found += 1
        yield normalize_newlines(doc)
    if not found and require_documents:
        raise _nothing_read(source, fmt, report, before)


__all__ = ["Format", "ReadReport", "detect_format", "normalize_newlines", "read_documents"]
