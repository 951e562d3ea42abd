"""A folder of files in several formats (``Format.mixed``): each file read by its own format's reader."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from capr.corpus.files import check_text_file, is_labels_file
from capr.corpus.formats import Format, file_reader, folder_formats, reader
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document


def read_folder(source: Path, report: ReadReport) -> Iterator[Document]:
    """A folder read file by file, each by its own format; a file no reader accepts is a bad record."""
    from capr.corpus import ccda, fhir, medquad

    files = folder_formats(source)
    # a FHIR bulk export keeps PractitionerRole in a file of its own: read first, for the other files
    roles = fhir.export_roles([p for p, f in files if f is Format.fhir])
    for path, fmt in files:
        if not isinstance(fmt, Format):  # (a Format is a str too)
            report.bad(str(path), fmt)
        elif fmt is Format.jsonl and is_labels_file(path):  # e.g. `capr labels DIR --out DIR/labels.jsonl`
            report.note(f"{path}: labelled passages written by `capr labels`, not documents: passed over")
        elif (read_one := file_reader(fmt)) is not None:  # a note, a page, a Word document or a PDF: one document
            if (doc := read_one(path, source, report)) is not None:
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
            yield from reader(fmt)(path, report)


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
