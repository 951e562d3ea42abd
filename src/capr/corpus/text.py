"""Plain-text directory (or single file): one document per .txt/.md file, gzip'd (.txt.gz) or not."""

from __future__ import annotations

import re
from pathlib import Path

from capr.text.aspects import is_known_heading
from capr.corpus.files import read_text
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document, normalize_newlines

def _note_path(path: Path) -> Path:
    """``path`` as the note it holds: a gzip'd note is the note it decompresses to (note.txt.gz: note.txt)."""
    return path.with_suffix("") if path.suffix.lower() == ".gz" else path


# A first line is the note's title when it reads as one: a few words ("Cardiology clinic note",
# "Discharge summary – gout"), not a sentence (no closing punctuation), a field ("Date: 2150-01-02"), a list
# item or a section heading, with the note's text after it. MTSamples' sample names and MedQuAD's
# document titles are short lines of this kind.
TITLE_MAX_WORDS = 12
TITLE_MAX_CHARS = 120
_NOT_TITLE_RE = re.compile(r"[.?!,;:]$|:\s|^[-*•+>|]|^\d{1,3}[.)]\s")


def first_line_title(text: str) -> str | None:
    """The first line of a plain-text note when it is the note's title (see above), else None."""
    first, _, rest = text.lstrip().partition("\n")
    first = first.strip()
    if not first or not rest.strip() or len(first) > TITLE_MAX_CHARS or len(first.split()) > TITLE_MAX_WORDS:
        return None
    if _NOT_TITLE_RE.search(first) or is_known_heading(first):
        return None
    return first


def _title(path: Path, text: str) -> str:
    first = text.lstrip().split("\n", 1)[0].strip()
    if first.startswith("# "):
        return first[2:].strip()
    return first_line_title(text) or _note_path(path).stem.replace("_", " ").replace("-", " ")


def read_text_file(path: Path, root: Path, report: ReadReport) -> Document | None:
    """One note; its id is its path under ``root`` without the suffix (None: a bad file, reported)."""
    try:
        text = read_text(path)
    except BadInputError as e:
        report.bad(e.source, e.reason)
        return None
    shown = path.relative_to(root)
    rel = _note_path(shown).with_suffix("").as_posix()
    report.at(str(path), None)
    # line ends normalised before the title is taken from the first line: a note saved with old Mac line
    # ends (\r alone) is one line to a search for "\n"
    doc = normalize_newlines(Document(doc_id=rel, title="", text=text, metadata={"path": shown.as_posix()}))
    doc.title = _title(path, doc.text)
    return doc
