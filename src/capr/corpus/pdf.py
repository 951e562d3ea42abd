"""PDF files (a scanned-in referral letter's text layer, a report saved as PDF): one document per ``.pdf``, its
text as pypdf extracts it in reading order, page after page. A PDF carries no headings as structure, so its sections
are found in the text as a plain-text note's are (``HISTORY OF PRESENT ILLNESS:``, capitalised lines). A line
that repeats at the top or bottom of most pages (a running header, "Page 2 of 5") is left out, and a word hyphenated
across a line end is joined. The title is the file's title property, else its file name. A PDF without a text
layer (a scanned image) or with its text encrypted is a bad record saying so.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

from capr.corpus.files import READ_ERRORS, read_error_reason
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, normalize_newlines

_PAGE_NUMBER_RE = re.compile(r"^\s*(page\s*)?\d+(\s*(of|/)\s*\d+)?\s*$", re.I)
_HYPHEN_RE = re.compile(r"(?<=[a-z])-\n(?=[a-z])")


def _running_lines(pages: list[list[str]]) -> set[str]:
    """Lines at the top or bottom of a page (its first or last two) that recur on at least half of the pages
    (three or more): running headers and footers. Page numbers are left out on any page."""
    if len(pages) < 3:
        return set()
    edges = Counter()
    for lines in pages:
        for line in {" ".join(x.split()) for x in lines[:2] + lines[-2:]}:
            if line:
                edges[line] += 1
    return {line for line, n in edges.items() if n >= max(3, len(pages) / 2)}


def pdf_text(path: Path) -> tuple[str, str]:
    """The text of a PDF (pages separated by a blank line) and its title property."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError
    except ImportError:  # an install without the PDF reader: say what to add, not a traceback
        raise BadInputError(str(path), "reading PDF needs pypdf: pip install pypdf") from None
    # pypdf logs what it repairs in a damaged file ("EOF marker not found"): the user hears of a PDF only through
    # the one line a bad record gets
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            try:
                reader.decrypt("")  # a PDF only locked against editing opens with the empty password
            except (DependencyError, NotImplementedError):
                raise BadInputError(str(path), "encrypted PDF (its cipher needs the cryptography package): save an "
                                    "unencrypted copy") from None
        pages = [(page.extract_text() or "").split("\n") for page in reader.pages]
        title = str((reader.metadata or {}).get("/Title") or "").strip()
    except FileNotDecryptedError:
        raise BadInputError(str(path), "encrypted PDF that needs a password: save an unencrypted copy") from None
    except PdfReadError as e:
        raise BadInputError(str(path), f"not a readable PDF ({e})") from None
    except READ_ERRORS as e:
        raise BadInputError(str(path), read_error_reason(e)) from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as e:
        # pypdf's parser lets a damaged file's own inconsistencies surface as these
        raise BadInputError(str(path), f"not a readable PDF ({type(e).__name__}: {e})") from None
    running = _running_lines(pages)
    kept = ["\n".join(line for line in lines if " ".join(line.split()) not in running
                      and not _PAGE_NUMBER_RE.match(line)).strip() for lines in pages]
    text = _HYPHEN_RE.sub("", "\n\n".join(p for p in kept if p))
    return text, title


def read_pdf_file(path: Path, root: Path, report: ReadReport) -> Document | None:
    """One PDF; its id is its path under ``root`` without the suffix (None: a bad file, reported)."""
    shown = path.relative_to(root)
    report.at(str(path), None)
    try:
        text, title = pdf_text(path)
    except BadInputError as e:
        report.bad(e.source or str(path), e.reason)
        return None
    if not text.strip():
        report.bad(str(path), f"PDF without a text layer ({_page_count(path)}; a scanned image?): run OCR on it first")
        return None
    return normalize_newlines(Document(doc_id=shown.with_suffix("").as_posix(),
                                       title=title or shown.stem.replace("_", " "), text=text,
                                       metadata={"path": shown.as_posix()}))


def _page_count(path: Path) -> str:
    from pypdf import PdfReader

    n = len(PdfReader(str(path)).pages)
    return f"{n} page{'s' if n != 1 else ''}"


__all__ = ["pdf_text", "read_pdf_file"]
