"""Plain-text directory (or single file): one document per .txt/.md file."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from capr.corpus.files import read_text, wanted_files
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document

TEXT_SUFFIXES = {".txt", ".md", ".text", ".markdown"}


def _title(path: Path, text: str) -> str:
    first = text.lstrip().split("\n", 1)[0].strip()
    if first.startswith("# "):
        return first[2:].strip()
    return path.stem.replace("_", " ").replace("-", " ")


def read_text_file(path: Path, root: Path, report: ReadReport) -> Document | None:
    """One note; its id is its path under ``root`` without the suffix (None: a bad file, reported)."""
    try:
        text = read_text(path)
    except BadInputError as e:
        report.bad(e.source, e.reason)
        return None
    rel = path.relative_to(root).with_suffix("").as_posix()
    report.at(str(path), None)
    return Document(doc_id=rel, title=_title(path, text), text=text, metadata={"path": rel + path.suffix})


def read_text_dir(source: Path, report: ReadReport) -> Iterator[Document]:
    source = Path(source)
    if source.is_file():
        files, root = [source], source.parent
    else:
        files = wanted_files(source, report, lambda p: p.suffix.lower() in TEXT_SUFFIXES)
        root = source
        if not files:
            raise BadInputError(str(source), f"no text files ({', '.join(sorted(TEXT_SUFFIXES))}) found")
    for path in files:
        doc = read_text_file(path, root, report)
        if doc is not None:
            yield doc
