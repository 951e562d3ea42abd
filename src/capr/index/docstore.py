"""A segment's documents and passages, each text stored once, compressed (capr.index.blocks):

    texts.zst        the documents' texts (UTF-8), one after another; text_offsets.npy: where each starts
    documents.zst    one JSON line per document: doc_id, title, metadata, sections (no text); documents.offsets.npy
    passages.zst     one JSON line per passage: [pid, aspect, heading, start, end, sentences or null]; passages.offsets.npy
    passage_bytes.npy   each passage's text as a byte range of its document's text
    passage_doc_rows.npy  each passage's document row

A passage's text is a slice of its document's text (the segmenter cuts passages so), read as a few bytes of
``texts.zst``; its title and metadata are its document's. Reading one passage decompresses two or three small blocks."""

from __future__ import annotations

import array
import json
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from capr.index.atomic import write_npy
from capr.index.blocks import BlockReader, BlockWriter
from capr.index.reading import damaged, load_npy
from capr.records import Document, Passage

# json.dumps(rec, ensure_ascii=False) without building an encoder per call
_encode_json = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
STREAMS = ("texts", "documents", "passages")


# A document as its segment stores it, in plain data (a child process builds the store from it):
# (doc_id, title, text, metadata, sections as dicts or None, [(pid, aspect, heading, start, end, sentences or None)])
DocRecord = tuple


def doc_record(doc: Document, passages: list[Passage]) -> DocRecord:
    """The plain record of a document and its passages (each a slice of the document's text, as the segmenter cuts
    them: its text, title and document id are not stored again)."""
    text = doc.text
    for p in passages:
        if p.text != text[p.start:p.end] or p.title != doc.title or p.doc_id != doc.doc_id:
            raise ValueError(f"passage {p.pid!r} is not a slice of its document {doc.doc_id!r}")
    sections = None if doc.sections is None else [
        {"heading": s.heading, "aspect": s.aspect, "start": s.start, "end": s.end, "section_id": s.section_id}
        for s in doc.sections]
    return (doc.doc_id, doc.title, text, doc.metadata, sections,
            [(p.pid, p.aspect, p.heading, p.start, p.end, p._sentences) for p in passages])


def _byte_spans(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character spans of ``text`` as byte offsets of it in UTF-8 (the same numbers when it is ASCII)."""
    if text.isascii():
        return spans
    cuts = sorted({c for span in spans for c in span})
    at, pos, last = {}, 0, 0
    for c in cuts:
        pos += len(text[last:c].encode("utf-8"))
        at[c] = pos
        last = c
    return [(at[a], at[b]) for a, b in spans]


_COPY_BYTES = 1 << 23  # a merge reads and writes at most this much of a stream at once


def _copy_runs(writer: BlockWriter, reader: BlockReader, offsets: np.ndarray, rows: np.ndarray,
               out_offsets: "array.array[int]") -> None:
    """Appends records ``rows`` (ascending) of a stream, delimited by ``offsets``, to ``writer``, and each one's
    end offset in the new stream to ``out_offsets``."""
    if not len(rows):
        return
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    for run in np.split(rows, breaks):
        a, b = int(run[0]), int(run[-1]) + 1  # records [a, b)
        while a < b:
            # as many records as fit in _COPY_BYTES (at least one)
            stop = int(np.searchsorted(offsets, offsets[a] + _COPY_BYTES, "right")) - 1
            stop = min(max(stop, a + 1), b)
            base = writer.size
            writer.write(reader.read(int(offsets[a]), int(offsets[stop])))
            ends = offsets[a + 1:stop + 1].astype(np.int64) - int(offsets[a]) + base
            out_offsets.frombytes(ends.tobytes())
            a = stop


class DocStoreWriter:
    """Writes a segment's documents and passages into ``directory`` (see the module's layout)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.streams = {name: BlockWriter(directory / f"{name}.zst") for name in STREAMS}
        self.text_offsets = array.array("q", [0])
        self.doc_offsets = array.array("q", [0])
        self.pass_offsets = array.array("q", [0])
        self.pass_bytes = array.array("q")
        self.pass_doc = array.array("i")

    @property
    def n_documents(self) -> int:
        return len(self.doc_offsets) - 1

    def add(self, record: DocRecord) -> None:
        doc_id, title, text, metadata, sections, passages = record
        drow = self.n_documents
        texts, docs, recs = self.streams["texts"], self.streams["documents"], self.streams["passages"]
        texts.write(text.encode("utf-8"))
        self.text_offsets.append(texts.size)
        docs.write(_encode_json({"doc_id": doc_id, "title": title, "metadata": metadata,
                                 "sections": sections}).encode("utf-8") + b"\n")
        self.doc_offsets.append(docs.size)
        spans = _byte_spans(text, [(p[3], p[4]) for p in passages])
        for (pid, aspect, heading, start, end, sents), (a, b) in zip(passages, spans):
            recs.write(_encode_json([pid, aspect, heading, start, end,
                                     None if sents is None else [list(s) for s in sents]]).encode("utf-8") + b"\n")
            self.pass_offsets.append(recs.size)
            self.pass_bytes.extend((a, b))
            self.pass_doc.append(drow)

    def copy(self, store: "DocStore", doc_rows: np.ndarray, passage_rows: np.ndarray, new_doc_of: np.ndarray) -> None:
        """Appends documents and passages of another segment's store as they are stored (nothing re-encoded);
        ``new_doc_of``: the document row in this store of each of ``store``'s document rows. Runs of adjacent
        rows are copied as one byte range each, a few megabytes at a time."""
        doc_rows = np.asarray(doc_rows, dtype=np.int64)
        passage_rows = np.asarray(passage_rows, dtype=np.int64)
        _copy_runs(self.streams["texts"], store.texts, np.asarray(store.text_offsets), doc_rows, self.text_offsets)
        _copy_runs(self.streams["documents"], store.documents, np.asarray(store.doc_offsets), doc_rows,
                   self.doc_offsets)
        _copy_runs(self.streams["passages"], store.passages, np.asarray(store.pass_offsets), passage_rows,
                   self.pass_offsets)
        spans = np.asarray(store.passage_bytes)[passage_rows].astype(np.int64)
        self.pass_bytes.frombytes(spans.tobytes())
        docs = np.asarray(new_doc_of)[np.asarray(store.passage_doc_rows)[passage_rows]].astype(np.int32)
        self.pass_doc.frombytes(docs.tobytes())

    def close(self) -> dict[str, int]:
        """Writes everything; returns each stream's logical size (for the segment's meta)."""
        sizes = {}
        for name, w in self.streams.items():
            w.close()
            sizes[name] = w.size
        d = self.directory
        write_npy(d / "text_offsets.npy", np.frombuffer(self.text_offsets, dtype=np.int64), atomic=False)
        write_npy(d / "documents.offsets.npy", np.frombuffer(self.doc_offsets, dtype=np.int64), atomic=False)
        write_npy(d / "passages.offsets.npy", np.frombuffer(self.pass_offsets, dtype=np.int64), atomic=False)
        spans = np.frombuffer(self.pass_bytes, dtype=np.int64).reshape(-1, 2)
        small = np.uint32 if not len(spans) or int(spans.max()) < 2**32 else np.int64
        write_npy(d / "passage_bytes.npy", spans.astype(small), atomic=False)
        write_npy(d / "passage_doc_rows.npy", np.frombuffer(self.pass_doc, dtype=np.int32), atomic=False)
        return sizes

    def abort(self) -> None:
        for w in self.streams.values():
            w.abort()


class DocStore:
    """Reads a segment's documents and passages (memory-mapped arrays, compressed blocks)."""

    def __init__(self, directory: Path, sizes: dict[str, int], block_bytes: int) -> None:
        self.directory = directory
        self.texts, self.documents, self.passages = (BlockReader(directory / f"{n}.zst", int(sizes[n]), block_bytes)
                                                     for n in STREAMS)
        self.text_offsets = load_npy(directory / "text_offsets.npy", mmap_mode="r")
        self.doc_offsets = load_npy(directory / "documents.offsets.npy", mmap_mode="r")
        self.pass_offsets = load_npy(directory / "passages.offsets.npy", mmap_mode="r")

    @cached_property
    def passage_bytes(self) -> np.ndarray:
        return load_npy(self.directory / "passage_bytes.npy", mmap_mode="r")

    @cached_property
    def passage_doc_rows(self) -> np.ndarray:
        return load_npy(self.directory / "passage_doc_rows.npy", mmap_mode="r")

    def text_bytes(self, d: int) -> bytes:
        return self.texts.read(int(self.text_offsets[d]), int(self.text_offsets[d + 1]))

    def header(self, d: int) -> dict[str, Any]:
        """Document ``d``'s record without its text."""
        return self._json(self.documents, self.doc_offsets, d)

    def record(self, r: int) -> list:
        """Passage ``r``'s record: [pid, aspect, heading, start, end, sentences or None]."""
        return self._json(self.passages, self.pass_offsets, r)

    def _json(self, stream: BlockReader, offsets: np.ndarray, i: int) -> Any:
        raw = stream.read(int(offsets[i]), int(offsets[i + 1]))
        try:
            return json.loads(raw)
        except ValueError as e:  # the bytes at this record's offsets are not what the writer put there
            raise damaged(stream.path, f"record {i}: {e}") from None

    def records(self) -> Iterator[list]:
        """Every passage record, in row order (decompressing the stream once)."""
        data = self.passages.read(0, self.passages.size)
        for line in data.splitlines():
            yield json.loads(line)

    def document(self, d: int) -> Document:
        rec = self.header(d)
        rec["text"] = self.text_bytes(d).decode("utf-8")
        return Document.from_dict(rec)

    def passage(self, r: int, header: dict[str, Any] | None = None) -> Passage:
        """Passage ``r``, its title and metadata its document's (``header``: that document's, when read already)."""
        pid, aspect, heading, start, end, sents = self.record(r)
        d = int(self.passage_doc_rows[r])
        head = header if header is not None else self.header(d)
        a, b = (int(x) for x in self.passage_bytes[r])
        base = int(self.text_offsets[d])
        text = self.texts.read(base + a, base + b).decode("utf-8")
        return Passage(pid=pid, doc_id=head["doc_id"], text=text, aspect=aspect, start=int(start), end=int(end),
                       sentences=None if sents is None else [(int(x), int(y)) for x, y in sents],
                       title=head.get("title", ""), heading=heading, metadata=dict(head.get("metadata") or {}))

    def release(self) -> None:
        """Unmaps the stream pages read so far (see BlockReader.release)."""
        for s in (self.texts, self.documents, self.passages):
            s.release()

    def close(self) -> None:
        for s in (self.texts, self.documents, self.passages):
            s.close()
