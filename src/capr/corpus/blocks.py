"""A document laid out from the blocks a page or a word-processor file holds: headings open sections (each
heading's aspect read as a health article's heading, capr.text.aspects.article_heading_aspect: "Symptoms of gout"
in the article "Gout" is its symptoms), paragraphs are separated by a blank line,
and list items, table rows and lines after a break follow on the next line — the text a reader sees, with the
sections its headings make. The HTML and DOCX readers share it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from capr.text.aspects import article_heading_aspect
from capr.records import Document, Section

HEADING, PARAGRAPH, LINE = "heading", "paragraph", "line"


@dataclass(slots=True)
class Block:
    kind: str  # HEADING, PARAGRAPH (a blank line before it) or LINE (the next line: a list item, a table row)
    text: str


def blocks_document(blocks: Sequence[Block], doc_id: str, title: str, metadata: dict | None = None) -> Document:
    """One document from ``blocks`` (empty ones are passed over). Its sections: the text before the first heading
    (no aspect), then each heading with what follows it up to the next; a heading with nothing after it opens no
    section. Without headings the sections are left to segmentation (paragraphs)."""
    chunks: list[str] = []
    sections: list[Section] = []
    pos = 0
    opened: tuple[str, int] | None = None  # the open section's heading and where it starts
    previous = None

    def close(end: int) -> None:
        if opened is not None and end > opened[1] + len(opened[0]):
            sections.append(Section(heading=opened[0], aspect=article_heading_aspect(opened[0], title), start=opened[1],
                                    end=end))

    for block in blocks:
        if not block.text:
            continue
        sep = "" if not chunks else "\n" if previous == HEADING or block.kind == LINE else "\n\n"
        if block.kind == HEADING:
            close(pos)
            if opened is None and pos:  # the text before the first heading
                sections.append(Section(heading="", aspect="", start=0, end=pos))
            opened = (block.text, pos + len(sep))
        chunks.append(sep + block.text)
        pos += len(sep) + len(block.text)
        previous = block.kind
    close(pos)
    return Document(doc_id=doc_id, title=title, text="".join(chunks), metadata=dict(metadata or {}),
                    sections=sections or None)


__all__ = ["Block", "HEADING", "LINE", "PARAGRAPH", "blocks_document"]
