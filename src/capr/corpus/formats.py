"""Every input format, registered once (:data:`FORMATS`): its name, how it is recognised — by a file's name, by a
folder's layout, or by what a file holds (its CSV header, its first JSON record, its XML root) — and its reader.
``detect_format`` (a source) and ``file_format`` (one file of a folder) decide through the registry; readers are
named as ``module:function`` under ``capr.corpus`` and imported only when a source of their format is read."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from capr.corpus.ccda import is_ccda_head
from capr.corpus.casereports import sniff_case_report
from capr.corpus.csv_docs import COLUMNS_HELP, documents_delimiter
from capr.corpus.files import (check_text_file, first_line, folder_files, holds_json_array, is_hidden, missing_reason,
                               parse_json, read_each_file, read_head, xml_root_name)
from capr.errors import BadInputError
from capr.records import Document

if TYPE_CHECKING:
    from capr.corpus.report import ReadReport


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


_TEXT_SUFFIXES = (".markdown", ".md", ".text", ".txt")
TEXT_NAMES = _TEXT_SUFFIXES + tuple(s + ".gz" for s in _TEXT_SUFFIXES)
HTML_NAMES = (".html", ".htm", ".xhtml", ".html.gz", ".htm.gz", ".xhtml.gz")
DOCX_NAMES = (".docx", ".docm")
PDF_NAMES = (".pdf",)
CSV_NAMES = (".csv", ".csv.gz")
TSV_NAMES = (".tsv", ".tsv.gz")
JSON_NAMES = (".json", ".json.gz")
JSON_LINES_NAMES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
MEDQUAD_ROOTS = {"document", "diseasefile", "doc"}


def _csv_header(path: Path) -> bytes:
    return first_line(read_head(path, 4096)).lower()


def _csv_columns(path: Path) -> set[str]:
    return {c.strip().strip('"') for c in _csv_header(path).decode("utf-8", "replace").split(",")}


def _first_record(path: Path) -> object:
    """The first line of a JSON-lines file, parsed (None when it is not JSON: the reader reports it precisely)."""
    try:
        return parse_json(first_line(read_head(path, 65536)), one_line=True)
    except ValueError:
        return None


def is_fhir(path: Path) -> bool:
    """FHIR when the first JSON value (a resource, a Bundle, or an NDJSON line) has a resourceType."""
    head = read_head(path, 65536)
    first = first_line(head) if path.name.lower().endswith((".ndjson", ".ndjson.gz", ".jsonl", ".jsonl.gz")) else head
    return bool(re.search(rb'^\s*\{\s*"resourceType"\s*:', first) or re.search(
        rb'"resourceType"\s*:\s*"(Bundle|DocumentReference|Composition|DiagnosticReport)"', first))


def one_object_per_line(path: Path) -> bool:
    """Whether the first line is one whole JSON object: JSON lines under a ``.json`` name."""
    return isinstance(_first_record(path), dict)


def _is_medquad_cdv_record(path: Path) -> bool:
    rec = _first_record(path)
    return isinstance(rec, dict) and "medquad_file" in rec and "pid" in rec


@dataclass(frozen=True)
class FormatSpec:
    """One format: its reader, and how a source of it is recognised."""

    format: Format
    # "module:function" under capr.corpus: reads a source (a file or a folder) of this format; None for a format of
    # one document per file, whose source is one such file or a folder of them (see ``what``)
    reader: str | None
    names: tuple[str, ...] = ()  # a file named so is of this format, whatever it holds
    file_reader: str | None = None  # reads one file as one document (its id the path under the folder read)
    what: str = ""  # what such files are, for a folder that holds none
    # recognised among files of ``family`` (CSV files, JSON lines, ...) by what ``holds(path)`` finds in them
    family: str | None = None
    holds: Callable[[Path], bool] | None = None
    layout: Callable[[set[str]], bool] | None = None  # recognised as a folder holding these names


FORMATS: dict[Format, FormatSpec] = {s.format: s for s in (
    FormatSpec(Format.text, None, names=TEXT_NAMES, file_reader="text:read_text_file",
               what=f"text files ({', '.join(TEXT_NAMES)})"),
    FormatSpec(Format.html, None, names=HTML_NAMES, file_reader="html:read_html_file",
               what=f"HTML pages ({', '.join(HTML_NAMES)})"),
    FormatSpec(Format.docx, None, names=DOCX_NAMES, file_reader="docx:read_docx_file",
               what=f"Word documents ({', '.join(DOCX_NAMES)})"),
    FormatSpec(Format.pdf, None, names=PDF_NAMES, file_reader="pdf:read_pdf_file", what="PDF files (.pdf)"),
    FormatSpec(Format.beir, "beir:read_beir_corpus", layout=lambda names: bool(names & {"corpus.jsonl", "corpus.jsonl.gz"})),
    FormatSpec(Format.medquad_cdv, "medquad:read_medquad_cdv", family="jsonl", holds=_is_medquad_cdv_record,
               layout=lambda names: {"passages.jsonl.gz", "queries.jsonl.gz"} <= names),
    FormatSpec(Format.mimic3, "mimic:read_mimic3", family="csv",  # MIMIC-III NOTEEVENTS
               holds=lambda p: {"row_id", "subject_id", "category", "text"} <= _csv_columns(p)),
    FormatSpec(Format.mimic4, "mimic:read_mimic4", family="csv",  # MIMIC-IV-Note discharge / radiology
               holds=lambda p: {"note_id", "subject_id", "note_type", "text"} <= _csv_columns(p)),
    FormatSpec(Format.csv, "csv_docs:read_csv_documents", family="csv", holds=lambda p: documents_delimiter(p) is not None),
    FormatSpec(Format.mtsamples, "mtsamples:read_mtsamples", family="csv", holds=lambda p: b"transcription" in _csv_header(p)),
    FormatSpec(Format.mts_dialog, "mts_dialog:read_mts_dialog", family="csv",
               holds=lambda p: b"section_header" in _csv_header(p),
               layout=lambda names: any(n.startswith("MTS-Dialog-") for n in names)),
    FormatSpec(Format.e3c, "casereports:read_e3c", family="jsonl", holds=lambda p: sniff_case_report(_first_record(p)) == "e3c"),
    FormatSpec(Format.codiesp, "casereports:read_codiesp", family="jsonl",
               holds=lambda p: sniff_case_report(_first_record(p)) == "codiesp"),
    FormatSpec(Format.openstax, "casereports:read_openstax", family="jsonl",
               holds=lambda p: sniff_case_report(_first_record(p)) == "openstax"),
    FormatSpec(Format.fhir, "fhir:read_fhir", family="json", holds=is_fhir),
    FormatSpec(Format.jsonl, "jsonl:read_jsonl", family="json", holds=lambda p: holds_json_array(p) or one_object_per_line(p)),
    FormatSpec(Format.ccda, "ccda:read_ccda", family="xml", holds=lambda p: is_ccda_head(read_head(p, 4096))),
    FormatSpec(Format.medquad, "medquad:read_medquad", names=(".tar.gz", ".tgz", ".tar"), family="xml",
               holds=lambda p: True),
    FormatSpec(Format.mixed, "folder:read_folder"),
)}


def _resolve(ref: str) -> Callable:
    module, function = ref.split(":")
    return getattr(importlib.import_module(f"capr.corpus.{module}"), function)


def reader(fmt: Format) -> Callable[[Path, "ReadReport"], Iterator[Document]]:
    """The reader of a source of this format: ``reader(source, report)`` yields its documents."""
    spec = FORMATS[fmt]
    if spec.reader is not None:
        return _resolve(spec.reader)
    read_one = _resolve(spec.file_reader)
    return lambda source, report: read_each_file(source, report, lambda p: is_named(p, fmt), read_one, spec.what)


def file_reader(fmt: Format) -> Callable | None:
    """For formats of one document per file: ``file_reader(path, root, report)`` reads one file of a folder."""
    ref = FORMATS[fmt].file_reader
    return _resolve(ref) if ref else None


def is_named(path: Path, fmt: Format) -> bool:
    """Whether ``path`` is named as a file of ``fmt`` (``.html``, ``.txt.gz``, ...)."""
    return path.name.lower().endswith(FORMATS[fmt].names)


def format_by_name(path: Path) -> Format | None:
    """The formats a file's name decides alone: plain-text notes, HTML pages, Word documents and PDF files."""
    for fmt in (Format.text, Format.html, Format.docx, Format.pdf):
        if is_named(path, fmt):
            return fmt
    return None


def sniffed(path: Path, family: str) -> Format | None:
    """The first format of ``family`` (in the registry's order) whose content test ``path`` passes."""
    return next((s.format for s in FORMATS.values() if s.family == family and s.holds(path)), None)


def folder_layout(source: Path) -> Format | None:
    """The formats that are a folder layout rather than a folder of documents (BEIR, the CDV split, MTS-Dialog)."""
    names = {p.name for p in source.iterdir()}
    for spec in FORMATS.values():
        if spec.layout is not None and spec.layout(names):
            return spec.format
    if "MedQuAD.tar.gz" in names:
        # its sibling files (a SOURCE.md) are not MedQuAD documents to index next to it
        raise BadInputError(str(source), "directory holds MedQuAD.tar.gz: pass that file as SOURCE")
    return None


_GZIP_READ = ".jsonl.gz, .json.gz, .ndjson.gz, .csv.gz, .tsv.gz, .txt.gz, .md.gz, .html.gz and .tar.gz"
_COMPRESSED_NAMES = {".bz2": "a bzip2", ".xz": "an xz", ".lzma": "an xz", ".zst": "a zstd", ".zip": "a zip",
                     ".7z": "a 7-Zip", ".rar": "a RAR"}
_KNOWN_NAMES = TEXT_NAMES + HTML_NAMES + DOCX_NAMES + PDF_NAMES + (".xml",) + JSON_NAMES + JSON_LINES_NAMES + \
    CSV_NAMES + TSV_NAMES + (".tar.gz", ".tgz", ".tar")


def compressed(path: Path) -> str | None:
    """Why a compressed file no reader takes is not read, by its name (an Office document is a zip too, but is
    not named as one)."""
    suffix = path.suffix.lower()
    if suffix in _COMPRESSED_NAMES:
        return (f"{_COMPRESSED_NAMES[suffix]}-compressed file, which capr does not read: decompress it (gzip is read, "
                f"for {_GZIP_READ})")
    if suffix == ".gz":
        return f"a gzip-compressed file of a kind read only uncompressed (gzip is read for {_GZIP_READ}): decompress it"
    return None


def _json_file(path: Path) -> Format | str:
    """A ``.json`` file's format, or why it has none."""
    return sniffed(path, "json") or ("JSON file is not a FHIR resource or Bundle (no resourceType), an array of "
                                     "documents or one document per line")


def file_format(path: Path) -> Format | str:
    """The format of one file of a folder, or why no reader accepts it."""
    if path.stat().st_size == 0:
        return "file is empty"
    name = path.name.lower()
    if (named := format_by_name(path)) is not None:
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
        if root is not None and root.lower() in MEDQUAD_ROOTS:
            return Format.medquad
        what = f"root element <{root}>" if root else "no XML root element found"
        return f"XML file is neither a C-CDA ClinicalDocument nor a MedQuAD Document ({what})"
    if name.endswith(JSON_NAMES):
        return _json_file(path)
    if name.endswith(_KNOWN_NAMES):
        try:
            return detect_format(path)
        except BadInputError as e:
            return e.reason
    if (why := compressed(path)) is not None:
        return f"{why}; --skip-bad indexes the other files"
    return (f"no reader for this kind of file (notes: {', '.join(TEXT_NAMES)}; HTML pages; Word .docx; PDF; JSONL, FHIR JSON/NDJSON, "
            "C-CDA or MedQuAD XML, CSV or TSV); --skip-bad indexes the other files")


def _csv_format(source: Path) -> Format:
    sniff = sniffed(source, "csv")
    if sniff is not None:
        return sniff
    raise BadInputError(str(source), f"CSV columns fit no reader: a CSV of documents has {COLUMNS_HELP}; also read "
                        "are MTSamples (transcription column), MTS-Dialog, MIMIC-III NOTEEVENTS (ROW_ID, SUBJECT_ID, "
                        "CATEGORY, TEXT) and MIMIC-IV-Note (note_id, subject_id, note_type, text); rename its columns "
                        'or write JSONL, one {"id": ..., "title": ..., "text": ...} per line')


def _tsv_format(source: Path) -> Format:
    if documents_delimiter(source) is not None:
        return Format.csv
    header = first_line(read_head(source, 4096)).decode("utf-8", "replace")
    cols = [c.strip().strip('"').lower() for c in header.split("\t")]
    raise BadInputError(str(source), f"TSV columns fit no reader: a TSV of documents has a header line naming "
                        f"{COLUMNS_HELP}; got {cols[:8]}")


def _json_lines_format(source: Path) -> Format:
    if is_fhir(source):
        return Format.fhir
    if _first_record(source) is None:
        return Format.jsonl  # the JSONL reader reports the bad line precisely
    return sniffed(source, "jsonl") or Format.jsonl


def _file_source_format(source: Path) -> Format:
    """The format of a file given as the source."""
    if source.stat().st_size == 0:  # before any sniff: it finds no CSV header or JSON value in nothing
        raise BadInputError(str(source), "file is empty")
    name = source.name.lower()
    if name.endswith(".xml") or name.endswith(FORMATS[Format.medquad].names):
        return sniffed(source, "xml") if name.endswith(".xml") else Format.medquad
    if (named := format_by_name(source)) is not None:
        return named
    if name.endswith(CSV_NAMES + TSV_NAMES) and b"\x00" in read_head(source, 4096):
        check_text_file(source)  # binary (or BOM-less UTF-16) is said as such, not as columns that fit no reader
    if name.endswith(CSV_NAMES):
        return _csv_format(source)
    if name.endswith(TSV_NAMES):
        return _tsv_format(source)
    if name.endswith(JSON_NAMES):
        found = _json_file(source)
        if not isinstance(found, Format):
            raise BadInputError(str(source), found + "; pass --format if it is another format")
        if found is Format.fhir or holds_json_array(source):
            return found
    if name.endswith(JSON_NAMES + JSON_LINES_NAMES):  # JSON lines
        return _json_lines_format(source)
    if (why := compressed(source)) is not None:
        raise BadInputError(str(source), why)
    raise BadInputError(str(source), "cannot detect the format; pass --format (text, jsonl, csv, medquad, medquad-cdv, "
                        "mtsamples, mts-dialog, beir, mimic3, mimic4, fhir, ccda, e3c, codiesp, openstax)")


def folder_formats(source: Path) -> list[tuple[Path, Format | str]]:
    """Every file under a folder with its format (or why none), in path order, symbolic links followed
    (a broken or looping one is listed with why). Files no reader takes under hidden names (.DS_Store,
    .git/...) are system or tool litter, passed over without a word."""
    out: list[tuple[Path, Format | str]] = []
    for path, why in folder_files(source):
        fmt = why if why is not None else file_format(path)
        if not isinstance(fmt, Format) and is_hidden(path, source):
            continue
        out.append((path, fmt))
    return out


def detect_format(source: Path) -> Format:
    """The format of a source: a folder's layout or its files' one format (mixed when they have several), a file's
    by its name and what it holds."""
    source = Path(source)
    if not source.exists():
        raise BadInputError(str(source), missing_reason(source))
    if source.is_dir():
        layout = folder_layout(source)
        if layout is not None:
            return layout
        # a folder of notes, C-CDA documents, FHIR resources, MedQuAD XML, ...: its files' one format,
        # or mixed when they have several (each is then read by its own)
        kinds = {f for _, f in folder_formats(source) if isinstance(f, Format)}
        return kinds.pop() if len(kinds) == 1 else Format.mixed
    return _file_source_format(source)


__all__ = ["DOCX_NAMES", "FORMATS", "Format", "FormatSpec", "HTML_NAMES", "PDF_NAMES", "TEXT_NAMES", "compressed",
           "detect_format", "file_format", "file_reader", "folder_formats", "folder_layout", "format_by_name", "is_named", "reader"]
