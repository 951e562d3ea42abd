"""Readers: every source becomes a stream of :class:`capr.records.Document`."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Callable, Iterator

from capr.corpus.ccda import is_ccda_head
from capr.corpus.csv_docs import COLUMNS_HELP, documents_delimiter
from capr.corpus.files import (DOCX_NAMES, HTML_NAMES, PDF_NAMES, check_text_file, first_line, folder_files,
                               holds_json_array, is_docx_name, is_hidden, is_html_name, is_labels_file, is_pdf_name,
                               missing_reason, parse_json, read_head, xml_root_name)
from capr.corpus.report import ReadReport
from capr.corpus.text import TEXT_NAMES, is_text_name
from capr.errors import BadInputError
from capr.records import Document, normalize_newlines, oversized


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
    csv = "csv"  # a CSV of documents: id, title, text and metadata columns
    e3c = "e3c"  # E3C clinical case narratives (JSONL)
    codiesp = "codiesp"  # CodiEsp coded clinical cases (JSONL)
    openstax = "openstax"  # OpenStax textbook sections (JSONL)
    html = "html"  # HTML pages: one document per .html/.htm file
    docx = "docx"  # Word documents: one document per .docx file
    pdf = "pdf"  # PDF files: one document per .pdf, its text layer
    # a folder of files in different formats: each file is read by its own (detected) format
    mixed = "mixed"


def _sniff_json(source: Path) -> Format | None:
    """FHIR when the first JSON value (a resource, a Bundle, or an NDJSON line) has a resourceType."""
    head = read_head(source, 65536)
    first = first_line(head) if source.name.lower().endswith((".ndjson", ".ndjson.gz", ".jsonl", ".jsonl.gz")) else head
    if re.search(rb'^\s*\{\s*"resourceType"\s*:', first) or re.search(rb'"resourceType"\s*:\s*"(Bundle|DocumentReference|Composition|DiagnosticReport)"', first):
        return Format.fhir
    return None


def _one_object_per_line(source: Path) -> bool:
    """Whether the first line is one whole JSON object: JSON lines under a ``.json`` name."""
    first = first_line(read_head(source, 65536))
    try:
        return isinstance(parse_json(first, one_line=True), dict)
    except ValueError:
        return False


def _sniff_csv(source: Path) -> Format | None:
    header = first_line(read_head(source, 4096)).lower()
    cols = {c.strip().strip('"') for c in header.decode("utf-8", "replace").split(",")}
    if {"row_id", "subject_id", "category", "text"} <= cols:
        return Format.mimic3  # MIMIC-III NOTEEVENTS
    if {"note_id", "subject_id", "note_type", "text"} <= cols:
        return Format.mimic4  # MIMIC-IV-Note discharge / radiology
    if documents_delimiter(source) is not None:
        return Format.csv
    return None


def _folder_layout(source: Path) -> Format | None:
    """The formats that are a folder layout rather than a folder of documents (BEIR, the CDV split, MTS-Dialog)."""
    names = {p.name for p in source.iterdir()}
    if names & {"corpus.jsonl", "corpus.jsonl.gz"}:
        return Format.beir
    if "passages.jsonl.gz" in names and "queries.jsonl.gz" in names:
        return Format.medquad_cdv
    if any(n.startswith("MTS-Dialog-") for n in names):
        return Format.mts_dialog
    if "MedQuAD.tar.gz" in names:
        # its sibling files (a SOURCE.md) are not MedQuAD documents to index next to it
        raise BadInputError(str(source), "directory holds MedQuAD.tar.gz: pass that file as SOURCE")
    return None


_GZIP_READ = ".jsonl.gz, .json.gz, .ndjson.gz, .csv.gz, .tsv.gz, .txt.gz, .md.gz, .html.gz and .tar.gz"
_MEDQUAD_ROOTS = {"document", "diseasefile", "doc"}
_KNOWN_NAMES = TEXT_NAMES + HTML_NAMES + DOCX_NAMES + PDF_NAMES + (".xml", ".json", ".json.gz", ".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz",
                              ".csv", ".csv.gz", ".tsv", ".tsv.gz", ".tar.gz", ".tgz", ".tar")


def _format_by_name(path: Path) -> Format | None:
    """The formats a file's name decides: plain-text notes, HTML pages, Word documents and PDF files."""
    for is_named, fmt in ((is_text_name, Format.text), (is_html_name, Format.html), (is_docx_name, Format.docx),
                          (is_pdf_name, Format.pdf)):
        if is_named(path):
            return fmt
    return None


def _file_format(path: Path) -> Format | str:
    """The format of one file of a folder, or why no reader accepts it."""
    if path.stat().st_size == 0:
        return "file is empty"
    name = path.name.lower()
    if (named := _format_by_name(path)) is not None:
        return named
    if name.endswith(".doc"):
        return "a Word 97-2003 .doc, which capr does not read: save it as .docx (or as text); --skip-bad indexes the other files"
    if name.endswith(".xml"):
        # by the root element, not the folder's first XML file: a config.xml next to C-CDA documents is
        # neither C-CDA nor MedQuAD
        head = read_head(path, 4096)
        root = xml_root_name(head)
        if root == "ClinicalDocument" or (root is None and is_ccda_head(head)):
            return Format.ccda
        if root is not None and root.lower() in _MEDQUAD_ROOTS:
            return Format.medquad
        what = f"root element <{root}>" if root else "no XML root element found"
        return f"XML file is neither a C-CDA ClinicalDocument nor a MedQuAD Document ({what})"
    if name.endswith((".json", ".json.gz")):
        if _sniff_json(path) is Format.fhir:
            return Format.fhir
        if holds_json_array(path) or _one_object_per_line(path):
            return Format.jsonl
        return ("JSON file is not a FHIR resource or Bundle (no resourceType), an array of documents or one document "
                "per line")
    if name.endswith(_KNOWN_NAMES):
        try:
            return detect_format(path)
        except BadInputError as e:
            return e.reason
    if (why := _compressed(path)) is not None:
        return f"{why}; --skip-bad indexes the other files"
    return (f"no reader for this kind of file (notes: {', '.join(TEXT_NAMES)}; HTML pages; Word .docx; PDF; JSONL, FHIR JSON/NDJSON, "
            "C-CDA or MedQuAD XML, CSV or TSV); --skip-bad indexes the other files")


_COMPRESSED_NAMES = {".bz2": "a bzip2", ".xz": "an xz", ".lzma": "an xz", ".zst": "a zstd", ".zip": "a zip",
                     ".7z": "a 7-Zip", ".rar": "a RAR"}


def _compressed(path: Path) -> str | None:
    """Why a compressed file no reader takes is not read, by its name (an Office document is a zip too, but is
    not named as one)."""
    suffix = path.suffix.lower()
    if suffix in _COMPRESSED_NAMES:
        return (f"{_COMPRESSED_NAMES[suffix]}-compressed file, which capr does not read: decompress it (gzip is read, "
                f"for {_GZIP_READ})")
    if suffix == ".gz":
        return f"a gzip-compressed file of a kind read only uncompressed (gzip is read for {_GZIP_READ}): decompress it"
    return None


def _folder_files(source: Path) -> list[tuple[Path, Format | str]]:
    """Every file under a folder with its format (or why none), in path order, symbolic links followed
    (a broken or looping one is listed with why). Files no reader takes under hidden names (.DS_Store,
    .git/...) are system or tool litter, passed over without a word."""
    out: list[tuple[Path, Format | str]] = []
    for path, why in folder_files(source):
        fmt = why if why is not None else _file_format(path)
        if not isinstance(fmt, Format) and is_hidden(path, source):
            continue
        out.append((path, fmt))
    return out


def _read_folder(source: Path, report: ReadReport) -> Iterator[Document]:
    """A folder read file by file, each by its own format; a file no reader accepts is a bad record."""
    from capr.corpus import ccda, docx, fhir, html, medquad, pdf, text

    one_per_file = {Format.text: text.read_text_file, Format.html: html.read_html_file,
                    Format.docx: docx.read_docx_file, Format.pdf: pdf.read_pdf_file}
    files = _folder_files(source)
    # a FHIR bulk export keeps PractitionerRole in a file of its own: read first, for the other files
    roles = fhir.export_roles([p for p, f in files if f is Format.fhir])
    for path, fmt in files:
        if not isinstance(fmt, Format):  # (a Format is a str too)
            report.bad(str(path), fmt)
        elif fmt is Format.jsonl and is_labels_file(path):  # e.g. `capr labels DIR --out DIR/labels.jsonl`
            report.note(f"{path}: labelled passages written by `capr labels`, not documents: passed over")
        elif fmt in one_per_file:  # a note, a page, a Word document or a PDF: one document, its id its path
            if (doc := one_per_file[fmt](path, source, report)) is not None:
                yield doc
        elif fmt is Format.medquad and path.name.lower().endswith(".xml"):
            if (doc := medquad.read_medquad_file(path, report, subset=path.parent.name)) is not None:
                yield doc
        elif fmt is Format.ccda:
            yield from ccda.read_ccda(path, report)
        elif fmt is not Format.medquad and _refused_whole(path, report):
            continue
        elif fmt is Format.fhir:
            yield from fhir.read_fhir_file(path, report, roles)
        else:  # JSONL, CSV, a tarball: their readers take one file
            yield from _readers()[fmt](path, report)


def _refused_whole(path: Path, report: ReadReport) -> bool:
    """Whether a folder's text file is refused before a record of it is read (empty, binary, compressed, not UTF-8
    at its head): a bad record, skipped under --skip-bad as an empty note is. An error part-way through the file
    stays fatal (see guard_reads)."""
    try:
        check_text_file(path)
    except BadInputError as e:
        report.bad(e.source, e.reason, e.record)
        return True
    return False


def _readers() -> dict[Format, Callable[[Path, ReadReport], Iterator[Document]]]:
    from capr.corpus import (beir, casereports, ccda, csv_docs, docx, fhir, html, jsonl, medquad, mimic, mts_dialog,
                             mtsamples, pdf, text)

    return {
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
        Format.csv: csv_docs.read_csv_documents,
        Format.e3c: casereports.read_e3c,
        Format.codiesp: casereports.read_codiesp,
        Format.openstax: casereports.read_openstax,
        Format.html: html.read_html,
        Format.docx: docx.read_docx,
        Format.pdf: pdf.read_pdf,
        Format.mixed: _read_folder,
    }


def detect_format(source: Path) -> Format:
    source = Path(source)
    if not source.exists():
        raise BadInputError(str(source), missing_reason(source))
    if source.is_dir():
        layout = _folder_layout(source)
        if layout is not None:
            return layout
        # a folder of notes, C-CDA documents, FHIR resources, MedQuAD XML, ...: its files' one format,
        # or mixed when they have several (each is then read by its own)
        kinds = {f for _, f in _folder_files(source) if isinstance(f, Format)}
        return kinds.pop() if len(kinds) == 1 else Format.mixed
    if source.stat().st_size == 0:  # before any sniff: it finds no CSV header or JSON value in nothing
        raise BadInputError(str(source), "file is empty")
    name = source.name.lower()
    if name.endswith(".xml") and is_ccda_head(read_head(source, 4096)):
        return Format.ccda
    if name.endswith((".tar.gz", ".tgz", ".tar", ".xml")):
        return Format.medquad
    if (named := _format_by_name(source)) is not None:
        return named
    if name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz")) and b"\x00" in read_head(source, 4096):
        check_text_file(source)  # binary (or BOM-less UTF-16) is said as such, not as columns that fit no reader
    if name.endswith((".csv", ".csv.gz")):
        header = first_line(read_head(source, 4096)).lower()
        sniffed = _sniff_csv(source)
        if sniffed is not None:
            return sniffed
        if b"transcription" in header:
            return Format.mtsamples
        if b"section_header" in header:
            return Format.mts_dialog
        raise BadInputError(str(source), f"CSV columns fit no reader: a CSV of documents has {COLUMNS_HELP}; also read "
                            "are MTSamples (transcription column), MTS-Dialog, MIMIC-III NOTEEVENTS (ROW_ID, SUBJECT_ID, "
                            "CATEGORY, TEXT) and MIMIC-IV-Note (note_id, subject_id, note_type, text); rename its columns "
                            'or write JSONL, one {"id": ..., "title": ..., "text": ...} per line')
    if name.endswith((".tsv", ".tsv.gz")):
        header = first_line(read_head(source, 4096)).decode("utf-8", "replace")
        cols = [c.strip().strip('"').lower() for c in header.split("\t")]
        if documents_delimiter(source) is not None:
            return Format.csv
        raise BadInputError(str(source), f"TSV columns fit no reader: a TSV of documents has a header line naming "
                            f"{COLUMNS_HELP}; got {cols[:8]}")
    if name.endswith((".json", ".json.gz")):
        if _sniff_json(source) is Format.fhir:
            return Format.fhir
        if holds_json_array(source):
            return Format.jsonl  # documents exported as one JSON array
        if not _one_object_per_line(source):
            raise BadInputError(str(source), "JSON file is not a FHIR resource or Bundle (no resourceType), an array of "
                                "documents or one document per line; pass --format if it is another format")
    if name.endswith((".json", ".json.gz", ".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")):  # JSON lines
        if _sniff_json(source) is Format.fhir:
            return Format.fhir
        first = first_line(read_head(source, 65536))
        try:
            rec = parse_json(first, one_line=True)
        except ValueError:
            return Format.jsonl  # the JSONL reader reports the bad line precisely
        if isinstance(rec, dict) and "medquad_file" in rec and "pid" in rec:
            return Format.medquad_cdv
        from capr.corpus.casereports import sniff_case_report

        if (kind := sniff_case_report(rec)) is not None:
            return Format(kind)
        return Format.jsonl
    if (why := _compressed(source)) is not None:
        raise BadInputError(str(source), why)
    raise BadInputError(str(source), "cannot detect the format; pass --format (text, jsonl, csv, medquad, medquad-cdv, mtsamples, mts-dialog, beir, mimic3, mimic4, fhir, ccda, e3c, codiesp, openstax)")


def _check_text_format(source: Path) -> None:
    """``--format text`` on a file another reader takes (a FHIR Bundle, JSONL, C-CDA) would index its raw
    markup as one note: refused, naming the format it has. A file with a text suffix, or one no format is
    detected for, is read as text, as asked."""
    if is_text_name(source):
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
        fmt = (_folder_layout(source) or Format.mixed) if source.is_dir() else detect_format(source)
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
    for doc in _readers()[fmt](source, report):
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
