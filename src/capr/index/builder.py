"""Building one segment: each admitted document is handed, as plain data, to the segment's sink (capr.index.analysis:
the document store, and the postings, counted in this process or in a child process beside it) while its filter
values and ids are kept here; ``finish`` writes the segment's files and renames its folder into place."""

from __future__ import annotations

import array
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np

from capr.corpus.passages import passage_index_text
from capr.corpus.segment import SegmenterConfig
from capr.index.analysis import CounterProcess, SegmentSink
from capr.index.docstore import doc_record
from capr.index.segment import BUILTIN_FIELDS, DOC_FIELDS, new_segment_dir, publish_segment, write_segment_files
from capr.index.store import Column
from capr.records import Document, Passage
from capr.text.analyzer import Analyzer

_MAX_FILTER_VALUE_LEN = 256


def _unfilterable(value: Any) -> str | None:
    """What makes a metadata value unusable as a filter value, None when it is usable."""
    if isinstance(value, (int, float, bool)):
        return None
    if isinstance(value, str):
        return f"a text of {len(value)} characters" if len(value) > _MAX_FILTER_VALUE_LEN else None
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


class SegmentBuilder:
    """Streams admitted documents into a new segment folder; ``finish`` writes the rest and renames it into place."""

    def __init__(self, root: Path, segmenter: SegmenterConfig, analyzer: Analyzer,
                 process: CounterProcess | None = None) -> None:
        """``process``: analyses the passages in a child process (one segment at a time); else this process does."""
        self.root = root
        self.segmenter = segmenter
        self.analyzer = analyzer
        self.name, self.tmp = new_segment_dir(root)
        self.sink = SegmentSink(self.tmp, analyzer, segmenter.include_title, process)
        self.pass_doc = array.array("i")  # each passage's document row
        self.doc_ids: list[str] = []
        self.sourced: dict[str, int] = {}  # passage ids a source assigned (not "DOC#s..."): pid → row
        self.texts: list[str] = []  # what the dense encoder reads per passage (the index text unless it adds context)
        # only a dense index needs the texts at commit; a lexical one must not hold a whole corpus in memory
        self.keep_texts = True
        self.dense_text: Callable[[Passage, str], str] | None = None
        # filter values: per passage (aspect, heading) and per document (doc_id, title, metadata)
        self._aspects: list[Any] = []
        self._headings: list[Any] = []
        self._doc_fields: dict[str, list[Any]] = {f: [] for f in DOC_FIELDS}
        # told of each metadata value that cannot be a filter value: (field, document id, what the value is)
        self.on_unfilterable: Callable[[str, str, str], None] | None = None
        self.n_passages = 0

    def add(self, doc: Document, passages: list[Passage]) -> None:
        drow = len(self.doc_ids)
        self.doc_ids.append(doc.doc_id)
        self.sink.add(doc_record(doc, passages))
        self._add_doc_fields(doc, drow)
        own = f"{doc.doc_id}#s"
        for p in passages:
            if not p.pid.startswith(own):
                self.sourced[p.pid] = self.n_passages
            if self.keep_texts:
                text = passage_index_text(p, self.segmenter.include_title)
                self.texts.append(self.dense_text(p, text) if self.dense_text else text)
            self._aspects.append(p.aspect)
            self._headings.append(p.heading)
            self.pass_doc.append(drow)
            self.n_passages += 1

    def _add_doc_fields(self, doc: Document, drow: int) -> None:
        """The document's filter values (one per document; its passages share them). A metadata value that is not one
        scalar (a list, an object) or is a long text is left out for this document alone, and said once to
        ``on_unfilterable``: the field stays filterable on every other document. A null is a value it lacks."""
        fields = self._doc_fields
        fields["doc_id"].append(doc.doc_id)
        fields["title"].append(doc.title)
        for k, v in doc.metadata.items():
            if v is None or k in BUILTIN_FIELDS:
                continue
            why = _unfilterable(v)
            if why is not None:
                if self.on_unfilterable is not None:
                    self.on_unfilterable(k, doc.doc_id, why)
                continue
            col = fields.get(k)
            if col is None:  # a field first seen now: earlier documents have no value
                col = fields[k] = [None] * drow
            col.append(v)
        for col in fields.values():
            if len(col) < drow + 1:
                col.append(None)

    def columns(self) -> dict[str, Column]:
        """The filter columns: per-passage ones as they are, per-document ones expanded to the document's passages
        (a document's passages are consecutive rows, so codes still number values in the order of their first row)."""
        doc_rows = np.frombuffer(self.pass_doc, dtype=np.int32)
        out = {"aspect": Column.build(self._aspects), "heading": Column.build(self._headings)}
        for name, raw in self._doc_fields.items():
            col = Column.build(raw)
            out[name] = Column(col.values, np.asarray(col.codes)[doc_rows])
        return out

    def finish(self, vectors: np.ndarray | None, hnsw_threshold: int, progress: Callable[[str], None] | None = None) -> str:
        if progress:
            progress("term matrix")
        sizes = self.sink.finish()
        columns = self.columns()
        self.built = columns  # what a reader of this segment would read back (Segment.adopt)
        if vectors is not None and progress:
            progress("vector index")
        write_segment_files(self.tmp, sizes, None, self.n_passages, columns, self.doc_ids, self.sourced, vectors,
                            hnsw_threshold)
        return publish_segment(self.root, self.tmp, self.name)

    def abort(self) -> None:
        self.sink.abort()
        shutil.rmtree(self.tmp, ignore_errors=True)
