"""Segments: immutable slices of an index (stores, term matrix, filter columns, vectors).

A generation lists its segments and a live mask per segment; adding documents writes a new
segment, deleting writes new masks. Nothing already written is rewritten.
"""

from __future__ import annotations

import array
import json
import os
import re
import shutil
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np

from capr.corpus.segment import SegmenterConfig
from capr.index.analyzer import Analyzer
from capr.index.atomic import fsync_dir, write_json, write_npy
from capr.index.lexical import TermMatrix
from capr.index.store import Column, RecordStore
from capr.records import Document, Passage

BUILTIN_FIELDS = ("aspect", "doc_id", "heading", "title")
_MAX_FILTER_VALUE_LEN = 256
SEGMENTS = "segments"
_SEG_RE = re.compile(r"^seg-(\d{6})$")


def passage_index_text(p: Passage, include_title: bool) -> str:
    """What both the lexical and the dense side index for a passage."""
    return f"{p.title}\n{p.text}" if include_title and p.title else p.text


class SegmentBuilder:
    """Streams documents into a new segment folder; ``finish`` writes arrays and renames it into place."""

    def __init__(self, root: Path, segmenter: SegmenterConfig, analyzer: Analyzer) -> None:
        self.root = root
        self.segmenter = segmenter
        self.analyzer = analyzer
        segdir = root / SEGMENTS
        segdir.mkdir(parents=True, exist_ok=True)
        nums = [int(m.group(1)) for p in segdir.iterdir() if (m := re.match(r"^\.?seg-(\d{6})", p.name))]
        self.name = f"seg-{max(nums, default=0) + 1:06d}"
        self.tmp = segdir / f".{self.name}.tmp-{os.getpid()}"
        self.tmp.mkdir()
        self._docs_fh = open(self.tmp / "documents.jsonl", "wb")
        self._pass_fh = open(self.tmp / "passages.jsonl", "wb")
        self._doc_offsets = [0]
        self._pass_offsets = [0]
        self.doc_ids: list[str] = []
        self.pids: list[str] = []
        self.texts: list[str] = []  # what the dense encoder reads per passage (the index text unless it adds context)
        # only a dense index needs the texts at commit; a lexical one must not hold a whole corpus in memory
        self.keep_texts = True
        self.dense_text: Callable[[Passage, str], str] | None = None
        self._vocab: dict[str, int] = {}
        self._cols = array.array("i")  # term ids, passage by passage
        self._tfs = array.array("f")  # their term frequencies
        self._nnz = array.array("i")  # distinct terms per passage
        self._lens = array.array("f")
        self._fields: dict[str, list[Any]] = {f: [] for f in BUILTIN_FIELDS}
        self._dropped_fields: set[str] = set()
        self.n_passages = 0

    @property
    def terms(self) -> set[str]:
        return set(self._vocab)

    @property
    def field_names(self) -> set[str]:
        return set(self._fields)

    def add(self, doc: Document, passages: list[Passage]) -> None:
        drow = len(self.doc_ids)
        self.doc_ids.append(doc.doc_id)
        self._write(self._docs_fh, self._doc_offsets, doc.to_dict())
        for p in passages:
            rec = p.to_dict()
            rec.pop("metadata")
            rec["doc_row"] = drow
            self._write(self._pass_fh, self._pass_offsets, rec)
            self.pids.append(p.pid)
            text = passage_index_text(p, self.segmenter.include_title)
            if self.keep_texts:
                self.texts.append(self.dense_text(p, text) if self.dense_text else text)
            tokens = self.analyzer(text)
            vocab = self._vocab
            # one (term, tf) pair per distinct term of the passage, not one entry per token: the postings
            # of a large corpus (a MIMIC NOTEEVENTS file) are the writer's main memory
            counts = Counter(vocab.setdefault(t, len(vocab)) for t in tokens)
            self._cols.extend(counts.keys())
            self._tfs.extend(counts.values())
            self._nnz.append(len(counts))
            self._lens.append(len(tokens))
            self._add_fields(p, doc.metadata)
            self.n_passages += 1

    @staticmethod
    def _write(fh, offsets: list[int], rec: dict) -> None:
        fh.write(json.dumps(rec, ensure_ascii=False).encode("utf-8") + b"\n")
        offsets.append(fh.tell())

    def _add_fields(self, p: Passage, meta: dict[str, Any]) -> None:
        row = self.n_passages
        values = {"aspect": p.aspect, "doc_id": p.doc_id, "heading": p.heading, "title": p.title}
        for k, v in meta.items():
            if k in self._dropped_fields or k in values:
                continue
            if isinstance(v, (str, int, float, bool)) and not (isinstance(v, str) and len(v) > _MAX_FILTER_VALUE_LEN):
                values[k] = v
            else:
                self._dropped_fields.add(k)
                self._fields.pop(k, None)
        for k, v in values.items():
            col = self._fields.get(k)
            if col is None:  # a field first seen now: earlier passages have no value
                col = self._fields[k] = [None] * row
            col.append(v)
        for col in self._fields.values():
            if len(col) < row + 1:
                col.append(None)

    def finish(self, vectors: np.ndarray | None, hnsw_threshold: int, progress: Callable[[str], None] | None = None) -> str:
        for fh in (self._docs_fh, self._pass_fh):
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        write_npy(self.tmp / "documents.offsets.npy", np.asarray(self._doc_offsets, dtype=np.int64))
        write_npy(self.tmp / "passages.offsets.npy", np.asarray(self._pass_offsets, dtype=np.int64))
        if progress:
            progress("term matrix")
        TermMatrix.from_rows(
            np.frombuffer(self._cols, dtype=np.int32),
            np.frombuffer(self._tfs, dtype=np.float32),
            np.frombuffer(self._nnz, dtype=np.int32),
            np.frombuffer(self._lens, dtype=np.float32),
            self._vocab,
        ).save(self.tmp / "lexical")
        coldir = self.tmp / "columns"
        coldir.mkdir()
        for name, raw in self._fields.items():
            Column.build(raw).save(coldir, name)
        if vectors is not None:
            from capr.index.vectors import save_vectors

            if progress:
                progress("vector index")
            save_vectors(self.tmp, vectors, hnsw_threshold)
        write_json(self.tmp / "segment.json", {"documents": len(self.doc_ids), "passages": self.n_passages, "fields": sorted(self._fields)})
        write_json(self.tmp / "doc_ids.json", self.doc_ids)
        write_json(self.tmp / "pids.json", self.pids)
        fsync_dir(self.tmp)
        final = self.root / SEGMENTS / self.name
        os.replace(self.tmp, final)
        fsync_dir(final.parent)
        return self.name

    def abort(self) -> None:
        for fh in (self._docs_fh, self._pass_fh):
            if not fh.closed:
                try:
                    fh.close()
                except OSError:  # flushing the buffer fails again on a full disk; the file is closed anyway
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)


class Segment:
    """An immutable segment on disk. Only segment.json and the record-store offsets are read when it is
    opened; the term matrix, the filter columns and the id lists are read on first use, so a writer
    that only needs to know which documents exist does not pay for the rest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        info = json.loads((path / "segment.json").read_text())
        self.n_passages = info["passages"]
        self.n_documents = info["documents"]
        self.fields = info["fields"]
        self.passages = RecordStore(path / "passages.jsonl")
        self.documents = RecordStore(path / "documents.jsonl")

    @cached_property
    def matrix(self) -> TermMatrix:
        return TermMatrix.load(self.path / "lexical")

    @cached_property
    def columns(self) -> dict[str, Column]:
        return {f: self.column(f) for f in self.fields}

    def column(self, name: str) -> Column:
        """One filter column (without loading the others)."""
        if "columns" in self.__dict__:
            return self.__dict__["columns"][name]
        return Column.load(self.path / "columns", name)

    @cached_property
    def doc_ids(self) -> list[str]:
        return json.loads((self.path / "doc_ids.json").read_text())

    @cached_property
    def pids(self) -> list[str]:
        return json.loads((self.path / "pids.json").read_text())

    def terms(self) -> set[str]:
        """The segment's vocabulary (from its term matrix if loaded, else straight from vocab.json)."""
        if "matrix" in self.__dict__:
            return set(self.matrix.vocab)
        return set(json.loads((self.path / "lexical" / "vocab.json").read_text(encoding="utf-8")))

    def vectors(self):
        from capr.index.vectors import SegmentVectors

        return SegmentVectors.load(self.path) if (self.path / "vectors.npy").exists() else None

    def close(self) -> None:
        self.passages.close()
        self.documents.close()

