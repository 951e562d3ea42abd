"""Narrative markup as readable plain text: FHIR XHTML (``text.div``), HTML attachments and the C-CDA
narrative block (``paragraph``, ``list/item``, ``table``, ``content``, ``br``).

Lines follow the layout a reader sees; list items become "- item"; a table row becomes
"Header: value; Header: value" so each row stands alone as a sentence (a medication row is then
retrievable as "Medication: lisinopril 10 mg; Directions: once daily; Status: active").
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from typing import Union

Node = tuple[str, list[Union["Node", str]]]

_INLINE = {"content", "span", "b", "i", "em", "strong", "a", "linkhtml", "sub", "sup", "font", "u", "small", "big",
           "footnoteref", "abbr", "code", "s", "strike", "q", "cite", "time", "mark", "label"}
_SKIP = {"style", "script", "head", "title", "rendermultimedia", "meta", "link", "colgroup", "col"}
_LISTS = {"list", "ul", "ol", "dl"}
_ITEMS = {"item", "li", "dt", "dd"}
_VOID = {"br", "hr", "img", "meta", "link", "col", "input", "wbr", "area", "base", "source"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_WS_RE = re.compile(r"\s+")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1].split(":")[-1].lower()


def from_element(el: ET.Element) -> Node:
    """An ElementTree element (any namespace) as a node."""
    children: list[Node | str] = []
    if el.text:
        children.append(el.text)
    for child in el:
        if isinstance(child.tag, str):  # comments and processing instructions have callable tags
            children.append(from_element(child))
        if child.tail:
            children.append(child.tail)
    return _local(el.tag), children


class _Builder(HTMLParser):
    """Tolerant HTML → nodes (HTML attachments need not be well-formed XML)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root: Node = ("div", [])
        self.stack: list[Node] = [self.root]

    def handle_starttag(self, tag: str, attrs) -> None:
        node: Node = (tag.lower(), [])
        self.stack[-1][1].append(node)
        if tag.lower() not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs) -> None:
        self.stack[-1][1].append((tag.lower(), []))

    def handle_endtag(self, tag: str) -> None:
        tag = tag.lower()
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1][1].append(data)


def from_html(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root


def _inline_text(node: Node | str) -> str:
    """All text under a node on one line (table cells, list items' inline parts)."""
    if isinstance(node, str):
        return node
    tag, children = node
    if tag in _SKIP:
        return ""
    if tag == "br":
        return " "
    return " ".join(_inline_text(c) for c in children) if tag not in _INLINE else "".join(_inline_text(c) for c in children)


def _clean(s: str) -> str:
    return _WS_RE.sub(" ", s).strip()


def _table_lines(node: Node) -> list[str]:
    rows: list[tuple[list[str], bool]] = []  # (cells, is_header)
    caption: list[str] = []

    def walk(n: Node, in_head: bool) -> None:
        tag, children = n
        if tag == "caption":
            caption.append(_clean(_inline_text(n)))
            return
        if tag == "tr":
            cells = [c for c in children if isinstance(c, tuple) and c[0] in ("td", "th")]
            texts = [_clean(_inline_text(c)) for c in cells]
            header = in_head or (bool(cells) and all(c[0] == "th" for c in cells))
            rows.append((texts, header))
            return
        for c in children:
            if isinstance(c, tuple):
                walk(c, in_head or tag == "thead")

    walk(node, False)
    lines = [c for c in caption if c]
    headers: list[str] = []
    for cells, is_header in rows:
        if is_header:
            headers = cells
            continue
        if not any(cells):
            continue
        if headers and len(cells) > 1:
            parts = [f"{h}: {v}" if h else v for h, v in zip(headers, cells) if v]
            parts += [v for v in cells[len(headers):] if v]
            lines.append("; ".join(parts))
        else:
            lines.append(" | ".join(v for v in cells if v))
    if not rows or all(is_header for _, is_header in rows):
        lines.extend(" | ".join(c for c in cells if c) for cells, _ in rows if any(cells))
    return lines


def node_lines(node: Node) -> list[str]:
    """The node's text as lines (blocks start new lines; inline content joins)."""
    lines: list[str] = []
    buf: list[str] = []

    def flush() -> None:
        text = _clean("".join(buf))
        if text:
            lines.append(text)
        buf.clear()

    def walk(n: Node | str) -> None:
        if isinstance(n, str):
            buf.append(n)
            return
        tag, children = n
        if tag in _SKIP:
            return
        if tag == "br":
            flush()
            return
        if tag in _INLINE:
            for c in children:
                walk(c)
            return
        if tag == "table":
            flush()
            lines.extend(_table_lines(n))
            return
        if tag in _LISTS:
            flush()
            for c in children:
                if isinstance(c, tuple) and c[0] in _ITEMS:
                    for i, line in enumerate(node_lines(c)):
                        lines.append(f"- {line}" if i == 0 else f"  {line}")
                elif isinstance(c, tuple):
                    walk(c)
                elif c.strip():
                    buf.append(c)
            flush()
            return
        if tag in _HEADINGS:
            # "Plan:" on its own line: the heading detector then starts a section here
            flush()
            text = _clean(_inline_text(n))
            if text:
                lines.append(text if text.endswith(":") else f"{text}:")
            return
        flush()  # any other element is a block: paragraph, div, caption, item, section
        for c in children:
            walk(c)
        flush()

    walk(node)
    flush()
    return lines


def element_text(el: ET.Element) -> str:
    return "\n".join(node_lines(from_element(el)))


def xhtml_text(markup: str) -> str:
    """FHIR narrative XHTML or an HTML document as plain text. Well-formed XHTML is parsed as XML;
    anything else with the tolerant HTML parser."""
    try:
        node = from_element(ET.fromstring(markup))
    except ET.ParseError:
        node = from_html(markup)
    return "\n".join(node_lines(node))
