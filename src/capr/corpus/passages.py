"""Documents become passages here, once, above every store: the admission checks (a storable id, a text within the
size limit, no id twice in one write, no passage id twice) and segmentation. A store (the embedded index, Milvus) is
given the admitted document's passages and keeps what it keeps of the document; it never segments."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig, segment
from capr.records import DEFAULT_MAX_DOC_CHARS, Document, Passage, check_doc_id, normalize_newlines, oversized

MADE_PID = re.compile(r"^(.*)#s\d+(?:#p\d+)?$")  # the passage ids capr makes: DOC#sN, DOC#sN#pK


def passage_index_text(p: Passage, include_title: bool) -> str:
    """What both the lexical and the dense side index for a passage."""
    return index_text(p.title, p.text, include_title)


def index_text(title: str, text: str, include_title: bool) -> str:
    """A passage's index text from its document's title and its own text: the title in front when the index includes
    titles (a document that is only its title has it as its text too, capr.corpus.beir.read_beir_corpus: read once)."""
    return f"{title}\n{text}" if include_title and title and text != title else text


def admit_document(doc: Document, report: ReadReport, max_doc_chars: int,
                   known: set[str] | frozenset[str] = frozenset()) -> tuple[str, str | None] | None:
    """The checks on one document: a storable id, a text within ``max_doc_chars``, an id not already in this write
    (``known``). A refused document is a bad record of ``report`` — skipped under ``--skip-bad``, else the error —
    and None is returned; an admitted one has its line breaks normalised (as read_documents gives them) and the
    (file, record) it is named by is returned."""
    path = str(doc.metadata.get("path") or "")
    try:
        check_doc_id(doc.doc_id)  # readers check it with file and line; this guards the Python API
    except ValueError as e:
        report.bad(path or "document", f"field 'doc_id': document id {e}", repr(doc.doc_id)[:80])
        return None
    if (why := oversized(doc.text, max_doc_chars)) is not None:
        report.bad(path or doc.doc_id, why, doc.doc_id)
        return None
    normalize_newlines(doc)
    # read_documents says where the document was read (file and line): the message names it as the readers name
    # their bad records; documents given directly are named by their path or id
    source, record = report.where(doc.doc_id) or (path or doc.doc_id, doc.doc_id)
    if doc.doc_id in known:
        report.bad(source, f"duplicate document id {doc.doc_id!r} (an earlier document has the same id)", record)
        return None
    return source, record


@dataclass(slots=True)
class Admitted:
    """A document that passed admission, with its passages (in document order)."""

    document: Document
    passages: list[Passage]


class Admission:
    """Admits and segments the documents of one write. Passage sentences are left to be computed when read
    (``lazy_sentences``): a store that keeps them keeps them unset, one that needs them reads the property."""

    def __init__(self, segmenter: SegmenterConfig | None = None, report: ReadReport | None = None,
                 max_doc_chars: int = DEFAULT_MAX_DOC_CHARS) -> None:
        self.segmenter = segmenter or SegmenterConfig()
        self.report = report if report is not None else ReadReport()  # no report to skip into: a bad document fails
        self.max_doc_chars = max_doc_chars
        self.doc_ids: set[str] = set()  # documents admitted so far
        # Passage ids a source assigned (section ids): the only ones that can collide across documents. Ids capr
        # makes ("DOC#sN") are unique once document ids are, so they are not kept — one write's memory must not
        # grow with its passages.
        self.source_pids: set[str] = set()

    def admit(self, doc: Document) -> Admitted | None:
        """The document's passages, or None when it is refused (a bad record of the report) or has none (counted as
        empty)."""
        named = admit_document(doc, self.report, self.max_doc_chars, self.doc_ids)
        if named is None:
            return None
        passages = segment(doc, self.segmenter, lazy_sentences=True)
        if not passages:
            self.report.empty += 1
            return None
        pids = [p.pid for p in passages]
        own = f"{doc.doc_id}#s"
        sourced = [p for p in pids if not p.startswith(own)]
        clash = self.source_pids.intersection(pids) or any(  # a source id shaped like another document's "DOC#sN"
            (m := MADE_PID.match(p)) is not None and m.group(1) in self.doc_ids for p in sourced)
        if len(set(pids)) != len(pids) or clash:
            self.report.bad(named[0], "duplicate passage ids", named[1])
            return None
        self.doc_ids.add(doc.doc_id)
        self.source_pids.update(sourced)
        return Admitted(doc, passages)

    def admit_all(self, documents: Iterable[Document]) -> Iterator[Admitted]:
        for doc in documents:
            admitted = self.admit(doc)
            if admitted is not None:
                yield admitted


__all__ = ["MADE_PID", "Admission", "Admitted", "admit_document", "index_text", "passage_index_text"]
