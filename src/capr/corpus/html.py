"""HTML pages (a saved health article, an exported note): one document per ``.html``/``.htm`` file, gzip'd or not.

A page is read as the text a reader sees (capr.corpus.blocks): its ``<h2>``…``<h6>`` headings open sections,
paragraphs, list items and table rows are lines of their section, and what is not the article is left out —
scripts, styles, navigation, footers, asides and forms, the site's own ``<header>``, and, on a page with a
``<main>`` or ``<article>``, everything outside them. The title is the article's first ``<h1>`` (else the site
header's), else ``<title>``, else the file's name. The text is decoded as the page declares (``<meta charset>``), else as UTF-8.
Parsing is Python's forgiving ``html.parser``: unclosed paragraphs and list items, as browsers accept them, are
read as browsers read them.
"""

from __future__ import annotations

import codecs
import gzip
import re
from html.parser import HTMLParser
from pathlib import Path

from capr.corpus.blocks import HEADING, LINE, PARAGRAPH, Block, blocks_document
from capr.corpus.files import READ_ERRORS, compressed_data, read_error_reason, stray_utf16_mark
from capr.corpus.report import ReadReport
from capr.errors import BadInputError
from capr.records import Document


# elements whose content is not the page's text
_LEFT_OUT = {"script", "style", "noscript", "template", "svg", "nav", "footer", "aside", "form", "button", "select",
             "iframe", "head", "object", "canvas", "dialog", "menu"}
# elements that end the line (or paragraph) before them
_BLOCKS = {"p", "div", "section", "article", "main", "header", "ul", "ol", "li", "table", "thead", "tbody", "tfoot",
           "tr", "dl", "dt", "dd", "blockquote", "pre", "hr", "figure", "figcaption", "address", "details", "summary",
           "caption", "body", "html", "h1", "h2", "h3", "h4", "h5", "h6"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_ARTICLE = {"main", "article"}
# blocks that continue the paragraph before them on the next line: list items, table rows, text after a <br>
_LINES = {"li", "dt", "dd", "tr", "br"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_CHARSET_RE = re.compile(rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)
_SPACE_RE = re.compile(r"\s+")


class _PageBlock:
    __slots__ = ("kind", "parts", "in_article", "in_page_header")

    def __init__(self, kind: str, in_article: bool, in_page_header: bool = False) -> None:
        self.kind, self.parts, self.in_article, self.in_page_header = kind, [], in_article, in_page_header

    def text(self) -> str:
        joined = "".join(self.parts)
        return joined.strip("\n") if self.kind == "pre" else _SPACE_RE.sub(" ", joined).strip()


class _PageText(HTMLParser):
    """The blocks of a page's text (kind, text, whether inside <main>/<article> or the page's own <header>), with
    its <title>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[_PageBlock] = []
        self.title_parts: list[str] = []
        self.left_out: list[str] = []  # open elements whose content is left out, innermost last
        self.article = 0
        self.page_header = 0  # open <header> elements outside any <main>/<article>: the site's, not the article's
        self.in_title = False
        self.pre = 0
        self.current = _PageBlock("p", False)

    def _flush(self, kind: str = "p") -> None:
        if self.current.text():
            self.blocks.append(self.current)
        self.current = _PageBlock("pre" if self.pre else kind, self.article > 0, self.page_header > 0)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
            return
        if tag == "body" and "head" in self.left_out:  # a head left open ends where the body begins
            del self.left_out[self.left_out.index("head"):]
        if tag in _LEFT_OUT:
            if tag not in _VOID:
                self.left_out.append(tag)
            return
        if self.left_out:
            return
        if tag in _ARTICLE or dict(attrs).get("role") == "main":
            self.article += 1
        elif tag == "header" and not self.article:
            self.page_header += 1
        if tag == "pre":
            self.pre += 1
        if tag in _BLOCKS or tag == "br":
            self._flush(tag if tag in _HEADINGS or tag in _LINES else "p")
            if tag == "li":
                self.current.parts.append("- ")
        elif tag in ("td", "th") and "".join(self.current.parts).strip():
            self.current.parts.append(" | ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _LEFT_OUT:  # <br/>, <hr/>: a self-closed element opens nothing to close
            self.handle_starttag(tag, attrs)
            if tag in _ARTICLE or dict(attrs).get("role") == "main":
                self.article -= 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
            return
        if self.left_out:
            if tag in self.left_out:  # an element left open inside it is closed with it, as a browser closes it
                del self.left_out[len(self.left_out) - 1 - self.left_out[::-1].index(tag):]
            return
        if tag in _BLOCKS:
            self._flush()
        if tag == "pre" and self.pre:
            self.pre -= 1
            self.current.kind = "pre" if self.pre else "p"
        if tag in _ARTICLE and self.article:
            self.article -= 1
            self.current.in_article = self.article > 0
        elif tag == "header" and self.page_header and not self.article:
            self.page_header -= 1
            self.current.in_page_header = self.page_header > 0

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_parts.append(data)
        elif not self.left_out:
            self.current.parts.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def html_document(markup: str, doc_id: str, fallback_title: str = "", metadata: dict | None = None) -> Document:
    """The document a page reads as (see the module's docstring)."""
    page = _PageText()
    page.feed(markup)
    page.close()
    has_article = any(b.in_article for b in page.blocks)

    def is_body(b: _PageBlock) -> bool:  # the article where the page marks one, else all but the site's header
        return b.in_article if has_article else not b.in_page_header

    h1s = [b for b in page.blocks if b.kind == "h1"]
    # the article's own <h1>; a site's header may hold another (its name), the title only when no other is
    title_block = next((b for b in h1s if is_body(b)), h1s[0] if h1s else None)
    title = (title_block.text() if title_block is not None else "") or \
        _SPACE_RE.sub(" ", "".join(page.title_parts)).strip() or fallback_title
    laid = [Block(HEADING if b.kind in _HEADINGS else LINE if b.kind in _LINES else PARAGRAPH, b.text())
            for b in page.blocks if is_body(b) and b is not title_block]
    return blocks_document(laid, doc_id, title, metadata)


def read_html_markup(path: Path) -> str:
    """A page's text, decoded as it declares (a byte-order mark, else ``<meta charset>``), else as UTF-8."""
    if (why := compressed_data(path)) is not None:
        raise BadInputError(str(path), why)
    try:
        with (gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")) as fh:
            data = fh.read()
    except READ_ERRORS as e:
        raise BadInputError(str(path), read_error_reason(e)) from None
    if not data.strip():
        raise BadInputError(str(path), "file is empty" if not data else "file contains only whitespace")
    if stray_utf16_mark(data[:8192]):  # UTF-8 behind a UTF-16 byte-order mark
        data = data[2:]
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            break
    else:
        declared = _CHARSET_RE.search(data[:4096])
        encoding = declared.group(1).decode("ascii") if declared else "utf-8"
        if b"\x00" in data[:4096] and not declared:
            raise BadInputError(str(path), "binary file (contains NUL bytes), expected an HTML page")
    try:
        return data.decode(encoding)
    except LookupError:
        raise BadInputError(str(path), f"unknown text encoding {encoding!r} (its <meta charset>)") from None
    except UnicodeDecodeError as e:
        if encoding in ("utf-8", "utf-8-sig", "utf-16"):
            what = "UTF-16" if encoding == "utf-16" else "UTF-8"
            raise BadInputError(str(path), f"not {what} text (invalid byte at offset {e.start}) and it declares no "
                                "charset (<meta charset=...>)") from None
        raise BadInputError(str(path), f"not {encoding} text as its <meta charset> declares (invalid byte at offset "
                            f"{e.start})") from None


def read_html_file(path: Path, root: Path, report: ReadReport) -> Document | None:
    """One page; its id is its path under ``root`` without the suffix (None: a bad file, reported)."""
    try:
        markup = read_html_markup(path)
    except BadInputError as e:
        report.bad(e.source, e.reason)
        return None
    shown = path.relative_to(root)
    stem = shown.with_suffix("") if shown.suffix.lower() == ".gz" else shown
    report.at(str(path), None)
    return html_document(markup, stem.with_suffix("").as_posix(), stem.stem.replace("_", " ").replace("-", " "),
                         {"path": shown.as_posix()})


__all__ = ["html_document", "read_html_file"]
