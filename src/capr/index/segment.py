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
from collections import _count_elements  # type: ignore[attr-defined]  # Counter's C loop
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np

from capr.corpus.passages import passage_index_text
from capr.corpus.segment import SegmenterConfig
from capr.text.analyzer import Analyzer
from capr.index.atomic import fsync_dir, write_json, write_npy
from capr.index.lexical import TermMatrix
from capr.index.meta import SegmentMeta
from capr.index.reading import damaged, load_npy, read_json
from capr.index.store import Column, RecordStore
from capr.records import Document, Passage

BUILTIN_FIELDS = ("aspect", "doc_id", "heading", "title")
_MAX_FILTER_VALUE_LEN = 256
SEGMENTS = "segments"
# json.dumps(rec, ensure_ascii=False) without building an encoder per call (the writer encodes two records a passage)
_encode_json = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
_TEXT_SLICE = 1 << 20  # a document text longer than this is written to the store in slices of this many characters
_TEXT_MARK = "\x00capr:text\x00"  # stands in for the text while the rest of the record is encoded
_encode_str = json.encoder.encode_basestring  # the JSON string literal of a str, as the encoder writes it


def _lazy_passage_json(p: Passage, drow: int) -> str | None:
    """The passage record of a passage whose sentences are not computed (``to_dict(keep_lazy=True)`` without
    metadata, plus doc_row) as json.dumps writes it, without the encoder's per-object work; None for any other
    passage (the encoder writes those)."""
    if p._sentences is not None or type(p.start) is not int or type(p.end) is not int or type(p.pid) is not str \
            or type(p.doc_id) is not str or type(p.text) is not str or type(p.title) is not str \
            or type(p.heading) is not str or not (p.aspect is None or type(p.aspect) is str):
        return None
    aspect = "null" if p.aspect is None else _encode_str(p.aspect)
    return (f'{{"pid": {_encode_str(p.pid)}, "doc_id": {_encode_str(p.doc_id)}, "text": {_encode_str(p.text)}, '
            f'"aspect": {aspect}, "start": {int.__repr__(p.start)}, "end": {int.__repr__(p.end)}, "sentences": null, '
            f'"title": {_encode_str(p.title)}, "heading": {_encode_str(p.heading)}, "doc_row": {int.__repr__(drow)}}}')
_SEG_RE = re.compile(r"^seg-(\d{6})$")


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
    """Streams documents into a new segment folder; ``finish`` writes arrays and renames it into place."""

    def __init__(self, root: Path, segmenter: SegmenterConfig, analyzer: Analyzer) -> None:
        self.root = root
        self.segmenter = segmenter
        self.analyzer = analyzer
        self.name, self.tmp = new_segment_dir(root)
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
        self._word_ids: dict[str, int] = {}  # folded word → its term id, -1 for a stopword (see add)
        self._cols = array.array("i")  # term ids, passage by passage
        self._tfs = array.array("f")  # their term frequencies
        self._nnz = array.array("i")  # distinct terms per passage
        self._pass_doc = array.array("i")  # each passage's document row (deletes find a document's rows by it)
        self._lens = array.array("f")
        self._fields: dict[str, list[Any]] = {f: [] for f in BUILTIN_FIELDS}
        # told of each metadata value that cannot be a filter value: (field, document id, what the value is)
        self.on_unfilterable: Callable[[str, str, str], None] | None = None
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
        self._write_document(doc.to_dict())
        meta = self._filter_values(doc)
        for p in passages:
            line = _lazy_passage_json(p, drow)
            if line is None:
                rec = p.to_dict(keep_lazy=True)  # sentences of a whole-section passage: computed when read
                rec.pop("metadata")
                rec["doc_row"] = drow
                line = _encode_json(rec)
            self._pass_fh.write(line.encode("utf-8") + b"\n")
            self._pass_offsets.append(self._pass_fh.tell())
            self._pass_doc.append(drow)
            self.pids.append(p.pid)
            text = passage_index_text(p, self.segmenter.include_title)
            if self.keep_texts:
                self.texts.append(self.dense_text(p, text) if self.dense_text else text)
            # one (term, tf) pair per distinct term of the passage, not one entry per token: the postings
            # of a large corpus (a MIMIC NOTEEVENTS file) are the writer's main memory.
            # Each distinct word of the segment is analysed once (its term id, or -1 for a stopword, is kept in
            # _word_ids); the passage's words are mapped to term ids and counted in C. Counter keeps first-seen order
            # and a new term's words are all new, so the term ids and the (term, tf) order are those of analysing
            # the passage and counting term ids token by token.
            words = self.analyzer.folded_words(text)
            wids = self._word_ids
            row: dict[int, int] = {}
            try:
                _count_elements(row, map(wids.__getitem__, words))  # Counter's own C loop
            except KeyError:  # words not seen yet in this segment: analyse them, in first-seen order
                missing = [w for w in dict.fromkeys(words) if w not in wids]
                vocab = self._vocab
                for w, t in zip(missing, self.analyzer.analyze_unseen(missing)):
                    wids[w] = -1 if t is None else vocab.setdefault(t, len(vocab))
                row = {}
                _count_elements(row, map(wids.__getitem__, words))
            n_tokens = len(words) - row.pop(-1, 0)
            self._cols.extend(row)
            self._tfs.extend(row.values())
            self._nnz.append(len(row))
            self._lens.append(n_tokens)
            self._add_fields(p, meta)
            self.n_passages += 1

    def _write_document(self, rec: dict) -> None:
        """The document record; a long text is escaped and written a slice at a time (JSON escapes each character
        on its own, so the bytes are those of encoding the record at once), not held as a second and third copy."""
        text = rec.get("text")
        if not isinstance(text, str) or len(text) <= _TEXT_SLICE:
            self._write(self._docs_fh, self._doc_offsets, rec)
            return
        parts = _encode_json({**rec, "text": _TEXT_MARK}).split(_encode_json(_TEXT_MARK))
        if len(parts) != 2:  # the mark also in another field: encode at once
            self._write(self._docs_fh, self._doc_offsets, rec)
            return
        head, tail = parts
        fh = self._docs_fh
        fh.write(head.encode("utf-8") + b'"')
        for i in range(0, len(text), _TEXT_SLICE):
            fh.write(_encode_json(text[i:i + _TEXT_SLICE])[1:-1].encode("utf-8"))
        fh.write(b'"' + tail.encode("utf-8") + b"\n")
        self._doc_offsets.append(fh.tell())

    @staticmethod
    def _write(fh, offsets: list[int], rec: dict) -> None:
        fh.write(_encode_json(rec).encode("utf-8") + b"\n")
        offsets.append(fh.tell())

    def _filter_values(self, doc: Document) -> dict[str, Any]:
        """The document's metadata values a filter can match. A value that is not one scalar (a list, an object) or
        is a long text is left out for this document alone, and said once to ``on_unfilterable``: the field stays
        filterable on every other document. A null is a value the document lacks."""
        meta = doc.metadata
        if not meta:
            return meta
        out: dict[str, Any] = {}
        for k, v in meta.items():
            if v is None or k in BUILTIN_FIELDS:
                continue
            why = _unfilterable(v)
            if why is None:
                out[k] = v
            elif self.on_unfilterable is not None:
                self.on_unfilterable(k, doc.doc_id, why)
        return out

    def _add_fields(self, p: Passage, meta: dict[str, Any]) -> None:
        fields = self._fields
        if not meta and len(fields) == len(BUILTIN_FIELDS):  # only the built-in fields (always present): fast path
            fields["aspect"].append(p.aspect)
            fields["doc_id"].append(p.doc_id)
            fields["heading"].append(p.heading)
            fields["title"].append(p.title)
            return
        row = self.n_passages
        values = {"aspect": p.aspect, "doc_id": p.doc_id, "heading": p.heading, "title": p.title, **meta}
        for k, v in values.items():
            col = fields.get(k)
            if col is None:  # a field first seen now: earlier passages have no value
                col = fields[k] = [None] * row
            col.append(v)
        for col in fields.values():
            if len(col) < row + 1:
                col.append(None)

    def finish(self, vectors: np.ndarray | None, hnsw_threshold: int, progress: Callable[[str], None] | None = None) -> str:
        for fh in (self._docs_fh, self._pass_fh):
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        if progress:
            progress("term matrix")
        matrix = TermMatrix.from_rows(
            np.frombuffer(self._cols, dtype=np.int32),
            np.frombuffer(self._tfs, dtype=np.float32),
            np.frombuffer(self._nnz, dtype=np.int32),
            np.frombuffer(self._lens, dtype=np.float32),
            self._vocab,
        )
        columns = {name: Column.build(raw) for name, raw in self._fields.items()}
        self.built = (matrix, columns)  # what a reader of this segment would read back (Segment.adopt)
        if vectors is not None and progress:
            progress("vector index")
        write_segment_files(self.tmp, np.asarray(self._doc_offsets, dtype=np.int64),
                            np.asarray(self._pass_offsets, dtype=np.int64), matrix, columns, self.doc_ids, self.pids,
                            np.frombuffer(self._pass_doc, dtype=np.int32), vectors, hnsw_threshold)
        return publish_segment(self.root, self.tmp, self.name)

    def abort(self) -> None:
        for fh in (self._docs_fh, self._pass_fh):
            if not fh.closed:
                try:
                    fh.close()
                except OSError:  # flushing the buffer fails again on a full disk; the file is closed anyway
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def new_segment_dir(root: Path) -> tuple[str, Path]:
    """The next free segment name and its temporary folder (renamed into place by :func:`publish_segment`)."""
    segdir = root / SEGMENTS
    segdir.mkdir(parents=True, exist_ok=True)
    nums = [int(m.group(1)) for p in segdir.iterdir() if (m := re.match(r"^\.?seg-(\d{6})", p.name))]
    name = f"seg-{max(nums, default=0) + 1:06d}"
    tmp = segdir / f".{name}.tmp-{os.getpid()}"
    tmp.mkdir()
    return name, tmp


def write_segment_files(tmp: Path, doc_offsets: np.ndarray, pass_offsets: np.ndarray, matrix: TermMatrix,
                        columns: dict[str, Column], doc_ids: list[str], pids: list[str], passage_doc_rows: np.ndarray,
                        vectors: np.ndarray | None, hnsw_threshold: int) -> None:
    """Everything but the two record stores (already written) of a segment being prepared in ``tmp``. Files are
    written in place and fsynced (no temporary names): the folder itself becomes visible only by its rename."""
    write_npy(tmp / "documents.offsets.npy", doc_offsets, atomic=False)
    write_npy(tmp / "passages.offsets.npy", pass_offsets, atomic=False)
    write_npy(tmp / "passage_doc_rows.npy", np.asarray(passage_doc_rows, dtype=np.int32), atomic=False)
    matrix.save(tmp / "lexical", atomic=False)
    coldir = tmp / "columns"
    coldir.mkdir()
    for name, col in columns.items():
        col.save(coldir, name, atomic=False)
    if vectors is not None:
        from capr.index.vectors import save_vectors

        save_vectors(tmp, vectors, hnsw_threshold)
    SegmentMeta(documents=len(doc_ids), passages=len(pids), fields=sorted(columns)).write(tmp)
    write_json(tmp / "doc_ids.json", doc_ids, atomic=False)
    write_json(tmp / "pids.json", pids, atomic=False)
    fsync_dir(coldir)
    fsync_dir(tmp / "lexical")


def publish_segment(root: Path, tmp: Path, name: str) -> str:
    fsync_dir(tmp)
    final = root / SEGMENTS / name
    os.replace(tmp, final)
    fsync_dir(final.parent)
    return name


def _check_json_tail(path: Path) -> None:
    """A JSON file capr wrote ends with its closing bracket: a copy cut short does not (cheap: the last bytes)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 16))
            tail = fh.read().rstrip()
    except OSError as e:
        raise damaged(path, e) from None
    if not tail.endswith((b"]", b"}")):
        raise damaged(path, "cut short (no closing bracket)")


class Segment:
    """An immutable segment on disk. Only segment.json and the record-store offsets are read when it is
    opened; the term matrix, the filter columns and the id lists are read on first use, so a writer
    that only needs to know which documents exist does not pay for the rest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        try:
            self.inode = os.stat(path).st_ino
        except OSError as e:  # a generation names a segment folder that is gone
            raise damaged(path, e) from None
        self.meta = SegmentMeta.read(path)
        self.n_passages = self.meta.passages
        self.n_documents = self.meta.documents
        self.fields = self.meta.fields
        self.passages = RecordStore(path / "passages.jsonl")
        self.documents = RecordStore(path / "documents.jsonl")

    @cached_property
    def matrix(self) -> TermMatrix:
        return TermMatrix.load(self.path / "lexical")

    @cached_property
    def columns(self) -> dict[str, Column]:
        return {f: self.column(f) for f in self.fields}

    def column(self, name: str) -> Column:
        """One filter column (without loading the others); kept, since segments are immutable and shared by
        every generation that names them."""
        col = self._columns.get(name)
        if col is None:
            col = self._columns[name] = Column.load(self.path / "columns", name)
        return col

    @cached_property
    def _columns(self) -> dict[str, Column]:
        return {}

    def value_table(self, name: str):
        """A column's ValueTable (range filters), built on its first range filter and kept."""
        from capr.filters import ValueTable

        tables = self.__dict__.setdefault("_tables", {})
        if name not in tables:
            tables[name] = ValueTable(self.column(name).values)
        return tables[name]

    def live_value_flags(self, name: str, live: np.ndarray) -> np.ndarray:
        """One flag per distinct value of a column: whether a live row (``live``: this segment's mask) has it."""
        col = self.column(name)
        held = np.zeros(len(col.values), dtype=bool)
        held[np.asarray(col.codes)[live]] = True
        return held

    def live_fields(self, live: np.ndarray) -> list[str]:
        """The fields a live passage (``live``: this segment's passage mask) has a value of: the built-in ones always,
        as in a rebuild, another only while a live passage has it. A column has at most one code for the missing
        value, so two codes among the live rows settle it without reading the column's values."""
        if live.all():
            return list(self.fields)
        out = []
        for f in self.fields:
            if f not in BUILTIN_FIELDS:
                col = self._columns.get(f)
                codes = np.asarray(col.codes if col is not None else
                                   load_npy(self.path / "columns" / f"{f}.codes.npy", mmap_mode="r"))[live]
                if not len(codes) or (codes.min() == codes.max() and self.column(f).values[int(codes[0])] is None):
                    continue
            out.append(f)
        return out

    def live_values(self, field: str, live: np.ndarray) -> list[tuple[Any, int]]:
        """(value, live passages) of each distinct value of a column that a live passage has, in the order of its
        first live passage and spelled as that passage spells it: what a rebuild of the live passages lists."""
        col = self.column(field)
        codes = np.asarray(col.codes)
        if live.all():  # codes are numbered in the order of their first passage (Column.build)
            counts = np.bincount(codes, minlength=len(col.values)).tolist()
            return [(v, n) for v, n in zip(col.values, counts) if n]
        live_codes = codes[live]
        counts = np.bincount(live_codes, minlength=len(col.values)).tolist()
        found, first = np.unique(live_codes, return_index=True)
        values = self.spellings(field, live)
        return [(values[c], counts[c]) for c in found[np.argsort(first)].tolist()]

    def spellings(self, field: str, live: np.ndarray) -> list[Any]:
        """A column's distinct values as its live passages spell them. A value is stored as its first passage spelled
        it (values that differ only in case or outer spaces share a code); when that passage is deleted, it is
        spelled as the first live passage that has it, read back from its record (only deleted passages make such
        values, so they are few)."""
        col = self.column(field)
        values = col.values
        dead = np.flatnonzero(~live)
        if not len(dead):
            return values
        codes = np.asarray(col.codes)
        n = len(codes)
        rows = np.flatnonzero(live)
        first_live = np.full(len(values), n, dtype=np.int64)
        found, at = np.unique(codes[rows], return_index=True)
        first_live[found] = rows[at]
        first_dead = np.full(len(values), n, dtype=np.int64)
        found, at = np.unique(codes[dead], return_index=True)
        first_dead[found] = dead[at]
        respelled = np.flatnonzero((first_dead < first_live) & (first_live < n)).tolist()
        if not respelled:
            return values
        values = list(values)
        for c in respelled:
            if values[c] is not None:
                values[c] = self._row_value(field, int(first_live[c]))
        return values

    def _row_value(self, field: str, row: int) -> Any:
        """The value of ``field`` that passage ``row`` was indexed with, from its records."""
        rec = self.passages.get(row)
        if field in BUILTIN_FIELDS:
            return rec.get(field)
        return self.documents.get(int(rec["doc_row"]))["metadata"].get(field)

    @cached_property
    def doc_rows(self) -> dict[str, int]:
        """doc_id → document row (built once per segment, reused by every generation: not per commit)."""
        return {d: i for i, d in enumerate(self.doc_ids)}

    @cached_property
    def pid_rows(self) -> dict[str, int]:
        """pid → passage row of this segment."""
        return {p: i for i, p in enumerate(self.pids)}

    @cached_property
    def passage_doc_rows(self) -> np.ndarray:
        """Each passage's document row. Segments written before this file existed derive it once from the
        doc_id column."""
        path = self.path / "passage_doc_rows.npy"
        if path.exists():
            return load_npy(path, mmap_mode="r")
        col = self.column("doc_id")
        rows = self.doc_rows
        by_code = np.asarray([rows.get(v, -1) for v in col.values], dtype=np.int32)
        return by_code[np.asarray(col.codes)]

    @cached_property
    def total_len(self) -> float:
        """Sum of all rows' lengths (exact: lengths are integers, summed in float64)."""
        return float(np.asarray(self.matrix.doc_len, dtype=np.float64).sum())

    @cached_property
    def doc_ids(self) -> list[str]:
        return read_json(self.path / "doc_ids.json")

    @cached_property
    def pids(self) -> list[str]:
        return read_json(self.path / "pids.json")

    def adopt(self, builder: SegmentBuilder) -> "Segment":
        """Takes the structures the writer still holds for this segment (term matrix, columns, id lists) instead
        of reading them back from the files it just wrote: a commit's reader refresh opens a dozen files fewer,
        each of which gives up the GIL to searches running in the same process."""
        matrix, columns = builder.built
        self.__dict__.update(matrix=matrix, doc_ids=builder.doc_ids, pids=builder.pids,
                             passage_doc_rows=np.frombuffer(builder._pass_doc, dtype=np.int32))
        self._columns.update(columns)
        self._files_ok = True  # written by this process a moment ago, from these very structures
        return self

    def preload(self) -> "Segment":
        """Reads every lazily loaded part now. A merge deletes the segments it replaces once no generation names
        them; a reader still serving an older generation (the service, during a write) must then find nothing
        left to read from their files — memory maps and loaded arrays outlive the files, paths do not."""
        self.matrix, self.doc_ids, self.pids, self.doc_rows, self.pid_rows, self.passage_doc_rows, self.total_len
        for f in self.fields:
            self.column(f)
        return self

    def terms(self) -> set[str]:
        """The segment's vocabulary (from its term matrix if loaded, else straight from vocab.json)."""
        if "matrix" in self.__dict__:
            return set(self.matrix.vocab)
        return set(read_json(self.path / "lexical" / "vocab.json"))

    def vectors(self):
        from capr.index.vectors import SegmentVectors

        return SegmentVectors.load(self.path) if (self.path / "vectors.npy").exists() else None

    def check_files(self, dense: bool = False) -> None:
        """Raises DamagedIndexError when a file this segment needs is missing, cut short or of the wrong size,
        reading only array headers and the last bytes of each JSON file (not the data: a writer must stay cheap).
        A writer calls it before changing an index, so a damaged index is refused before a new generation is
        committed on top of it, not reported after. Checked once per Segment: segments are immutable."""
        if self.__dict__.get("_files_ok"):
            return
        n, d = self.n_passages, self.n_documents
        arrays = {"passages.offsets.npy": n + 1, "documents.offsets.npy": d + 1, "lexical/doc_len.npy": n,
                  "lexical/live.npy": n, "lexical/indptr.npy": None, "lexical/indices.npy": None, "lexical/tf.npy": None}
        if (self.path / "passage_doc_rows.npy").exists():  # older segments derive it (see passage_doc_rows)
            arrays["passage_doc_rows.npy"] = n
        if dense:
            arrays["vectors.npy"] = n
        for f in self.fields:
            arrays[f"columns/{f}.codes.npy"] = n
        shapes = {}
        for rel, rows in arrays.items():
            a = load_npy(self.path / rel, mmap_mode="r")  # parses the header and checks the file holds the data
            shapes[rel] = a.shape
            if rows is not None and (a.ndim == 0 or a.shape[0] != rows):
                raise damaged(self.path / rel, f"has shape {a.shape}, segment.json says {rows} rows")
        if shapes["lexical/indices.npy"] != shapes["lexical/tf.npy"]:
            raise damaged(self.path / "lexical/tf.npy", f"has shape {shapes['lexical/tf.npy']}, "
                                                         f"indices.npy has {shapes['lexical/indices.npy']}")
        for rel in ["lexical/vocab.json", "doc_ids.json", "pids.json"] + [f"columns/{f}.values.json" for f in self.fields]:
            _check_json_tail(self.path / rel)
        self._files_ok = True

    def close(self) -> None:
        self.passages.close()
        self.documents.close()

