"""Word documents (``.docx``, Office Open XML; a clinic letter, a discharge summary written in Word): one document
per file, read with the standard library (a ``.docx`` is a zip of XML parts).

Paragraphs in a heading style (Word's "Heading 1"…"Heading 9", found by the style's name in ``word/styles.xml``,
so a German "Überschrift 1" counts, or by an outline level) open sections whose aspects are read as plain-text
headings' are; list paragraphs and table rows ("Drug | Dose") are lines of their own; other paragraphs are
separated by a blank line. The title is the document's Title-style paragraph, else its core property title, else
the file's name. Headers, footers, comments and tracked deletions are left out. A legacy ``.doc`` (Word 97-2003)
is refused with what to do.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from capr.corpus.blocks import HEADING, LINE, PARAGRAPH, Block, blocks_document
from capr.corpus.files import READ_ERRORS, read_error_reason
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
_HEADING_NAME_RE = re.compile(r"^heading\s*[1-9]$")
_SPACE_RE = re.compile(r"[ \t\r\f\v]+")
_MAX_PART_BYTES = 200 * 1024 * 1024  # a part that unpacks larger than this is not a letter but a zip bomb


def _part(z: zipfile.ZipFile, name: str) -> ET.Element | None:
    try:
        info = z.getinfo(name)
    except KeyError:
        return None
    if info.file_size > _MAX_PART_BYTES:
        raise BadInputError(z.filename or "", f"{name} unpacks to {info.file_size:,} bytes (more than "
                            f"{_MAX_PART_BYTES:,}): not read")
    try:
        return ET.fromstring(z.read(name))
    except ET.ParseError as e:
        raise BadInputError(z.filename or "", f"{name} is not well-formed XML ({str(e).split(':')[0]})") from None


def _styles(z: zipfile.ZipFile) -> tuple[set[str], set[str], set[str]]:
    """The ids of the heading styles, the title styles and the list styles, by their names (style ids are
    translated: a German Word writes "berschrift1" for "heading 1")."""
    headings, titles, lists = set(), set(), set()
    root = _part(z, "word/styles.xml")
    for style in ([] if root is None else root.iter(f"{W}style")):
        sid = style.get(f"{W}styleId") or ""
        name_el = style.find(f"{W}name")
        name = (name_el.get(f"{W}val") or "").strip().lower() if name_el is not None else ""
        level = style.find(f"{W}pPr/{W}outlineLvl")
        if _HEADING_NAME_RE.match(name) or (level is not None and (level.get(f"{W}val") or "9") < "9"):
            headings.add(sid)
        elif name == "title":
            titles.add(sid)
        elif name.startswith("list") or style.find(f"{W}pPr/{W}numPr") is not None:
            lists.add(sid)
    return headings, titles, lists


def _paragraph_text(p: ET.Element) -> str:
    """A paragraph's text as it reads: runs joined, tabs and breaks as spaces and line ends, deleted text left out."""
    out: list[str] = []
    for el in p.iter():
        tag = el.tag
        if tag == f"{W}t":
            out.append(el.text or "")
        elif tag in (f"{W}tab", f"{W}ptab"):
            out.append(" ")
        elif tag in (f"{W}br", f"{W}cr"):
            out.append("\n")
        elif tag == f"{W}noBreakHyphen":
            out.append("-")
    return "\n".join(_SPACE_RE.sub(" ", line).strip() for line in "".join(out).split("\n")).strip()


def _body_blocks(body: ET.Element, headings: set[str], titles: set[str], lists: set[str]) -> tuple[list[Block], str]:
    """The body's blocks in reading order, and the first Title-style paragraph's text."""
    blocks: list[Block] = []
    title = ""

    def walk(parent: ET.Element) -> None:
        nonlocal title
        for el in parent:
            if el.tag == f"{W}p":
                text = _paragraph_text(el)
                if not text:
                    continue
                ppr = el.find(f"{W}pPr")
                style = ppr.find(f"{W}pStyle") if ppr is not None else None
                sid = style.get(f"{W}val") if style is not None else None
                level = ppr.find(f"{W}outlineLvl") if ppr is not None else None
                if sid in titles:
                    if not title:
                        title = " ".join(text.split())
                        continue
                    blocks.append(Block(HEADING, " ".join(text.split())))
                elif sid in headings or (level is not None and (level.get(f"{W}val") or "9") < "9"):
                    blocks.append(Block(HEADING, " ".join(text.split())))
                elif sid in lists or (ppr is not None and ppr.find(f"{W}numPr") is not None):
                    blocks.append(Block(LINE, "- " + text))
                else:
                    blocks.append(Block(PARAGRAPH, text))
            elif el.tag == f"{W}tbl":
                first = True
                for row in el.findall(f"{W}tr"):
                    cells = [" ".join(_paragraph_text(p) for p in cell.iter(f"{W}p")).strip()
                             for cell in row.findall(f"{W}tc")]
                    line = " | ".join(c for c in cells if c)
                    if line:
                        blocks.append(Block(PARAGRAPH if first else LINE, line.replace("\n", " ")))
                        first = False
            elif el.tag in (f"{W}sdt", f"{W}sdtContent", f"{W}customXml", f"{W}ins", f"{W}smartTag"):
                walk(el)  # content controls and tracked insertions hold paragraphs of the text

    walk(body)
    return blocks, title


def docx_document(path: Path, doc_id: str, fallback_title: str = "", metadata: dict | None = None) -> Document:
    """The document a ``.docx`` file reads as (see the module's docstring)."""
    try:
        with zipfile.ZipFile(path) as z:
            root = _part(z, "word/document.xml")
            if root is None:
                raise BadInputError(str(path), "a zip without word/document.xml: not a Word document")
            body = root.find(f"{W}body")
            headings, titles, lists = _styles(z)
            core = _part(z, "docProps/core.xml")
    except zipfile.BadZipFile:
        raise BadInputError(str(path), "not a .docx (Office Open XML) file: not a zip archive; a Word 97-2003 .doc "
                            "must be saved as .docx") from None
    except READ_ERRORS as e:
        raise BadInputError(str(path), read_error_reason(e)) from None
    blocks, title = _body_blocks(body, headings, titles, lists) if body is not None else ([], "")
    if not title and core is not None:
        title = " ".join((core.findtext(_DC_TITLE) or "").split())
    return blocks_document(blocks, doc_id, title or fallback_title, metadata)


def read_docx_file(path: Path, root: Path, report: ReadReport) -> Document | None:
    """One Word document; its id is its path under ``root`` without the suffix (None: a bad file, reported)."""
    shown = path.relative_to(root)
    report.at(str(path), None)
    try:
        return docx_document(path, shown.with_suffix("").as_posix(), shown.stem.replace("_", " "),
                             {"path": shown.as_posix()})
    except BadInputError as e:
        report.bad(e.source or str(path), e.reason)
        return None


__all__ = ["docx_document", "read_docx_file"]
