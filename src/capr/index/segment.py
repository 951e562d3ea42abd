"""Segments: immutable slices of an index (documents and passages, postings, filter columns, vectors).

A generation lists its segments and a live mask per segment; adding documents writes a new segment, deleting writes
new masks. Nothing already written is rewritten. A segment's folder:

    segment.json        its meta (capr.index.meta.SegmentMeta)
    texts.zst, documents.zst, passages.zst, ...   documents and passages (capr.index.docstore)
    lexical/            compact postings (capr.index.postings)
    columns/            filter columns (capr.index.store.Column)
    doc_ids.*           document ids in row order (capr.index.strings); sourced.json: passage ids a source assigned
    vectors.npy, hnsw.faiss   dense vectors (capr.index.vectors)
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from capr.corpus.passages import MADE_PID, passage_index_text  # noqa: F401  (passage_index_text: its old home)
from capr.index.atomic import fsync_dir, write_json
from capr.index.blocks import BLOCK_BYTES
from capr.index.docstore import STREAMS, DocStore
from capr.index.lexical import TermMatrix
from capr.index.meta import SegmentMeta
from capr.index.postings import LEXICAL, Postings, write_postings
from capr.index.reading import damaged, load_npy, read_json
from capr.index.strings import StringTable, write_strings
from capr.index.store import Column
from capr.records import Document, Passage

BUILTIN_FIELDS = ("aspect", "doc_id", "heading", "title")
DOC_FIELDS = ("doc_id", "title")  # built-in fields a document gives all its passages
SEGMENTS = "segments"


def new_segment_dir(root: Path) -> tuple[str, Path]:
    """The next free segment name and its temporary folder (renamed into place by :func:`publish_segment`)."""
    segdir = root / SEGMENTS
    segdir.mkdir(parents=True, exist_ok=True)
    nums = [int(m.group(1)) for p in segdir.iterdir() if (m := re.match(r"^\.?seg-(\d{6})", p.name))]
    name = f"seg-{max(nums, default=0) + 1:06d}"
    tmp = segdir / f".{name}.tmp-{os.getpid()}"
    tmp.mkdir()
    return name, tmp


def write_segment_files(tmp: Path, streams: dict[str, int], matrix: TermMatrix | None, n_passages: int,
                        columns: dict[str, Column], doc_ids: list[str], sourced: dict[str, int],
                        vectors: np.ndarray | None, hnsw_threshold: int) -> None:
    """Everything but the document store (already written) of a segment being prepared in ``tmp`` (and its postings,
    when ``matrix`` is None: written by the analysis). Files are written in place and fsynced (no temporary names):
    the folder itself becomes visible only by its rename."""
    if matrix is not None:
        write_postings(tmp / LEXICAL, matrix)
    coldir = tmp / "columns"
    coldir.mkdir()
    for name, col in columns.items():
        col.save(coldir, name, atomic=False)
    if vectors is not None:
        from capr.index.vectors import save_vectors

        save_vectors(tmp, vectors, hnsw_threshold)
    lengths = load_npy(tmp / LEXICAL / "doc_len.npy", mmap_mode="r")
    SegmentMeta(documents=len(doc_ids), passages=n_passages, fields=sorted(columns), streams=streams,
                block_bytes=BLOCK_BYTES, total_len=float(np.asarray(lengths, dtype=np.float64).sum())).write(tmp)
    write_strings(tmp, "doc_ids", doc_ids)
    write_json(tmp / "sourced.json", sourced, atomic=False)
    fsync_dir(coldir)
    fsync_dir(tmp / LEXICAL)


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
    """An immutable segment on disk. Only segment.json is read when it is opened; its document store, postings,
    filter columns and id lists are opened on first use, so a writer that only needs to know which documents exist
    does not pay for the rest."""

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
        self._columns: dict[str, Column] = {}

    @cached_property
    def store(self) -> DocStore:
        return DocStore(self.path, self.meta.streams, self.meta.block_bytes)

    @cached_property
    def postings(self) -> Postings:
        return Postings(self.path / LEXICAL)

    @cached_property
    def matrix(self) -> TermMatrix:
        """The postings decoded into memory (merges, TF-IDF over merged segments, case search)."""
        return self.postings.to_matrix()

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
        it (values a filter cannot tell apart, a number 7 and 7.0, share a code); when that passage is deleted, it is
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
        if field in ("aspect", "heading"):
            return self.store.record(row)[1 if field == "aspect" else 2]
        head = self.store.header(int(self.passage_doc_rows[row]))
        return head.get(field) if field in DOC_FIELDS else (head.get("metadata") or {}).get(field)

    # -- documents and passages ------------------------------------------------------------------
    def passage(self, row: int) -> Passage:
        return self.store.passage(row)

    def document(self, drow: int) -> Document:
        return self.store.document(drow)

    def document_passage_rows(self, drow: int) -> range:
        """The rows of document ``drow``'s passages (consecutive)."""
        pdr = self.passage_doc_rows
        key = pdr.dtype.type(drow)  # of the array's type: another would make numpy convert the whole array first
        return range(int(np.searchsorted(pdr, key, "left")), int(np.searchsorted(pdr, key, "right")))

    def row_of_pid(self, pid: str) -> int | None:
        """The row of passage ``pid`` in this segment (live or not): a pid capr made ("DOC#sN", "DOC#sN#pK") is looked
        for among its document's passages, one a source assigned in the segment's list of those."""
        m = MADE_PID.match(pid)
        if m is not None and (drow := self.doc_row(m.group(1))) is not None:
            for r in self.document_passage_rows(drow):
                if self.store.record(r)[0] == pid:
                    return r
        return self.sourced.get(pid)

    @cached_property
    def sourced(self) -> dict[str, int]:
        return read_json(self.path / "sourced.json")

    def doc_row(self, doc_id: str) -> int | None:
        """The row of document ``doc_id`` in this segment (live or not), by bisection of its id table."""
        return self.doc_ids.find(doc_id)

    @cached_property
    def pids(self) -> list[str]:
        """Every passage id in row order (reads all passage records: for tests and whole-segment tools)."""
        return [rec[0] for rec in self.store.records()]

    @cached_property
    def pid_rows(self) -> dict[str, int]:
        """pid → passage row of this segment."""
        return {p: i for i, p in enumerate(self.pids)}

    @cached_property
    def passage_doc_rows(self) -> np.ndarray:
        """Each passage's document row."""
        return self.store.passage_doc_rows

    @cached_property
    def total_len(self) -> float:
        """Sum of all rows' lengths (exact: lengths are integers, summed in float64)."""
        if self.meta.total_len is not None:
            return self.meta.total_len
        return float(np.asarray(self.postings.doc_len, dtype=np.float64).sum())

    @cached_property
    def doc_ids(self) -> StringTable:
        """Document ids in row order (memory-mapped: ``doc_ids[i]``, ``find``)."""
        return StringTable(self.path, "doc_ids")

    def adopt(self, builder: Any) -> "Segment":
        """Takes the structures the writer still holds for this segment (columns, id lists) instead of reading them
        back from the files it just wrote: a commit's reader refresh opens fewer files, each of which gives up the
        GIL to searches running in the same process."""
        columns = builder.built
        self.__dict__.update(sourced=builder.sourced,
                             passage_doc_rows=np.frombuffer(builder.pass_doc, dtype=np.int32))
        self._columns.update(columns)
        self._files_ok = True  # written by this process a moment ago, from these very structures
        return self

    def preload(self) -> "Segment":
        """Opens every lazily opened part now. A merge deletes the segments it replaces once no generation names
        them; a reader still serving an older generation (the service, during a write) must then find nothing
        left to open from their files — memory maps and loaded arrays outlive the files, paths do not."""
        self.store, self.postings, self.doc_ids, self.sourced, self.passage_doc_rows, self.total_len
        self.store.passage_bytes
        for f in self.fields:
            self.column(f)
        return self

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
        arrays: dict[str, int | None] = {
            "passages.offsets.npy": n + 1, "documents.offsets.npy": d + 1, "text_offsets.npy": d + 1,
            "passage_bytes.npy": n, "passage_doc_rows.npy": n, "lexical/doc_len.npy": n, "lexical/indptr.npy": None,
            "lexical/first.npy": None, "lexical/width.npy": None, "lexical/at.npy": None, "lexical/tf.npy": None,
            "lexical/terms.offsets.npy": None, "lexical/terms.sorted.npy": None, "doc_ids.offsets.npy": d + 1,
            "doc_ids.sorted.npy": d}
        arrays.update({f"{s}.blocks.npy": None for s in STREAMS})
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
        n_terms = shapes["lexical/indptr.npy"][0] - 1
        for rel in ("lexical/first.npy", "lexical/width.npy", "lexical/at.npy", "lexical/terms.sorted.npy"):
            if shapes[rel] != (n_terms,):
                raise damaged(self.path / rel, f"has shape {shapes[rel]}, indptr.npy has {n_terms} terms")
        postings = int(load_npy(self.path / "lexical/indptr.npy", mmap_mode="r")[-1]) if n_terms >= 0 else 0
        if shapes["lexical/tf.npy"] != (postings,):
            raise damaged(self.path / "lexical/tf.npy", f"has shape {shapes['lexical/tf.npy']}, indptr.npy counts "
                                                        f"{postings} postings")
        self.store  # the block files: their sizes against their block indexes
        for rel in ["sourced.json"] + [f"columns/{f}.values.json" for f in self.fields]:
            _check_json_tail(self.path / rel)
        self._files_ok = True

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
