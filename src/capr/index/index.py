"""capr's index: passages, documents, a lexical term matrix and filter columns in one directory."""

from __future__ import annotations

import array
import difflib
import json
import os
import shutil
import time
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from capr import __version__
from capr.corpus.aspects import ASPECT_SYNONYMS, aspect_terms, infer_aspect, normalize_aspect
from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import IndexError_, QueryError
from capr.index import directory as dirs
from capr.index.analyzer import Analyzer, AnalyzerConfig
from capr.index.atomic import write_json, write_npy
from capr.index.lexical import BM25Params, BM25Scorer, TermMatrix, TfidfScorer
from capr.index.store import Column, RecordStore, write_records
from capr.records import Document, Passage, Query, ScoredPassage

FORMAT_VERSION = 1
_MAX_FILTER_VALUE_LEN = 256
BUILTIN_FIELDS = ("aspect", "doc_id", "heading", "title")
DEFAULT_ASPECT_BOOST = 0.5


class Retriever(str, Enum):
    bm25 = "bm25"
    tfidf = "tfidf"


def query_tokens(analyzer: Analyzer, query: Query | str, expand: bool = True) -> list[str]:
    """Analysed query terms. Free text keeps term repetitions (as bm25s does); an ⟨entity, aspect⟩
    query uses each term once, so a long synonym list cannot outweigh the entity."""
    text = query_text(query, expand)
    tokens = analyzer(text)
    if isinstance(query, Query) and (query.entity or query.aspect):
        tokens = list(dict.fromkeys(tokens))
    return tokens


def query_aspect(query: Query | str) -> str | None:
    """The aspect a query asks about: given explicitly, or read from a question's wording."""
    if isinstance(query, Query) and query.aspect:
        return normalize_aspect(query.aspect)
    text = query if isinstance(query, str) else query.text
    return infer_aspect(text) if text else None


def query_text(query: Query | str, expand: bool = True) -> str:
    """Text a lexical retriever searches for. ⟨entity, aspect⟩ becomes "entity aspect [synonyms]"."""
    if isinstance(query, str):
        if not query.strip():
            raise QueryError("empty query: give a question or an entity/aspect")
        return query
    parts = []
    if query.entity:
        parts.append(query.entity)
    if query.aspect:
        parts.extend(aspect_terms(query.aspect) if expand else [query.aspect])
    if query.text:
        parts.append(query.text)
    text = " ".join(parts)
    if not text.strip():
        raise QueryError(f"query {query.qid!r} is empty")
    return text


class IndexWriter:
    """Streams documents into a new generation; ``commit`` makes it current in one atomic step."""

    def __init__(
        self,
        root: str | Path,
        segmenter: SegmenterConfig | None = None,
        analyzer: AnalyzerConfig | None = None,
        bm25: BM25Params | None = None,
        report: ReadReport | None = None,
    ) -> None:
        self.root = Path(root)
        self.segmenter = segmenter or SegmenterConfig()
        self.analyzer_config = analyzer or AnalyzerConfig()
        self.analyzer = Analyzer(self.analyzer_config)
        self.bm25 = bm25 or BM25Params()
        self.report = report or ReadReport()
        dirs.prepare_root(self.root)
        self._lock = dirs.write_lock(self.root)
        self._lock.__enter__()
        dirs.remove_stale(self.root)
        self.tmp, self.name = dirs.new_generation(self.root)
        self._docs_fh = open(self.tmp / "documents.jsonl", "wb")
        self._pass_fh = open(self.tmp / "passages.jsonl", "wb")
        self._doc_offsets = [0]
        self._pass_offsets = [0]
        self._doc_ids: dict[str, int] = {}
        self._pids: set[str] = set()
        self._vocab: dict[str, int] = {}
        self._cols = array.array("i")
        self._rows = array.array("i")
        self._lens = array.array("f")
        self._fields: dict[str, list[Any]] = {f: [] for f in BUILTIN_FIELDS}
        self._dropped_fields: set[str] = set()
        self.n_passages = 0
        self._closed = False
        self._t0 = time.time()

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def add(self, doc: Document) -> int:
        """Segment, analyse and store one document; returns its number of passages."""
        if doc.doc_id in self._doc_ids:
            self.report.bad(str(doc.metadata.get("path") or doc.doc_id), f"duplicate document id {doc.doc_id!r}", doc.doc_id)
            return 0
        passages = segment(doc, self.segmenter)
        if not passages:
            self.report.empty += 1
            return 0
        for p in passages:
            if p.pid in self._pids:
                self.report.bad(doc.doc_id, f"duplicate passage id {p.pid!r}", p.pid)
                return 0
        drow = len(self._doc_ids)
        self._doc_ids[doc.doc_id] = drow
        self._write(self._docs_fh, self._doc_offsets, doc.to_dict())
        for p in passages:
            self._pids.add(p.pid)
            rec = p.to_dict()
            rec.pop("metadata")
            rec["doc_row"] = drow
            self._write(self._pass_fh, self._pass_offsets, rec)
            text = f"{p.title}\n{p.text}" if self.segmenter.include_title and p.title else p.text
            tokens = self.analyzer(text)
            vocab = self._vocab
            self._cols.extend(vocab.setdefault(t, len(vocab)) for t in tokens)
            self._rows.extend([self.n_passages] * len(tokens))
            self._lens.append(len(tokens))
            self._add_fields(p, doc.metadata)
            self.n_passages += 1
        return len(passages)

    def _write(self, fh, offsets: list[int], rec: dict) -> None:
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
        for k, col in self._fields.items():
            if len(col) < row + 1:
                col.append(None)

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._docs_fh.close()
        self._pass_fh.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._lock.__exit__(None, None, None)

    def commit(self) -> "Index":
        if self._closed:
            raise IndexError_("writer already closed")
        try:
            for fh in (self._docs_fh, self._pass_fh):
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
            write_npy(self.tmp / "documents.offsets.npy", np.asarray(self._doc_offsets, dtype=np.int64))
            write_npy(self.tmp / "passages.offsets.npy", np.asarray(self._pass_offsets, dtype=np.int64))
            matrix = TermMatrix.from_coo(
                np.frombuffer(self._rows, dtype=np.int32),
                np.frombuffer(self._cols, dtype=np.int32),
                np.frombuffer(self._lens, dtype=np.float32),
                self._vocab,
            )
            matrix.save(self.tmp / "lexical")
            coldir = self.tmp / "columns"
            coldir.mkdir()
            for name, raw in self._fields.items():
                Column.build(raw).save(coldir, name)
            manifest = {
                "format_version": FORMAT_VERSION,
                "capr_version": __version__,
                "generation": self.name,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "analyzer": self.analyzer_config.to_dict(),
                "bm25": asdict(self.bm25),
                "segmenter": asdict(self.segmenter),
                "counts": {"documents": len(self._doc_ids), "passages": self.n_passages, "vocabulary": len(self._vocab)},
                "fields": sorted(self._fields),
                "build_seconds": round(time.time() - self._t0, 3),
            }
            write_json(self.tmp / "manifest.json", manifest)
            dirs.commit_generation(self.root, self.tmp, self.name)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self._lock.__exit__(None, None, None)
        return Index.load(self.root)


class Index:
    """A loaded, read-only generation of an index directory (arrays memory-mapped)."""

    def __init__(self, root: Path, gen: Path) -> None:
        self.root = root
        self.gen = gen
        self.manifest = json.loads((gen / "manifest.json").read_text(encoding="utf-8"))
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise IndexError_(
                f"{root}: index format {self.manifest.get('format_version')} is not supported "
                f"(this capr reads format {FORMAT_VERSION}); rebuild it with `capr index`"
            )
        self.analyzer = Analyzer(AnalyzerConfig.from_dict(self.manifest["analyzer"]))
        self.bm25_params = BM25Params(**self.manifest["bm25"])
        self.passages = RecordStore(gen / "passages.jsonl")
        self.documents = RecordStore(gen / "documents.jsonl")
        self.matrix = TermMatrix.load(gen / "lexical")
        self.columns = {name: Column.load(gen / "columns", name) for name in self.manifest["fields"]}
        self._scorers: dict[Retriever, Any] = {}
        self._pid_rows: dict[str, int] | None = None
        self._doc_rows: dict[str, int] | None = None

    @classmethod
    def load(cls, root: str | Path) -> "Index":
        root = Path(root)
        return cls(root, dirs.current_generation(root))

    def close(self) -> None:
        self.passages.close()
        self.documents.close()

    def __len__(self) -> int:
        return len(self.passages)

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.manifest["counts"])

    # -- lookups ----------------------------------------------------------------
    def passage(self, row: int) -> Passage:
        rec = self.passages.get(row)
        doc_meta = self.documents.get(rec.pop("doc_row"))["metadata"]
        p = Passage.from_dict(rec)
        p.metadata = doc_meta
        return p

    def pid_rows(self) -> dict[str, int]:
        if self._pid_rows is None:
            self._pid_rows = {rec["pid"]: i for i, rec in enumerate(self.passages)}
        return self._pid_rows

    def passage_by_pid(self, pid: str) -> Passage:
        row = self.pid_rows().get(pid)
        if row is None:
            raise QueryError(f"no passage with id {pid!r}")
        return self.passage(row)

    def document(self, doc_id: str) -> Document:
        if self._doc_rows is None:
            self._doc_rows = {rec["doc_id"]: i for i, rec in enumerate(self.documents)}
        row = self._doc_rows.get(doc_id)
        if row is None:
            raise QueryError(f"no document with id {doc_id!r}")
        return Document.from_dict(self.documents.get(row))

    def aspects(self) -> list[str]:
        col = self.columns["aspect"]
        return sorted(str(v) for v in col.values if v)

    # -- scoring ----------------------------------------------------------------
    def scorer(self, retriever: Retriever | str):
        r = Retriever(retriever)
        if r not in self._scorers:
            self._scorers[r] = BM25Scorer(self.matrix, self.bm25_params) if r is Retriever.bm25 else TfidfScorer(self.matrix)
        return self._scorers[r]

    def scores(self, query: Query | str, retriever: Retriever | str = Retriever.bm25, expand: bool = True) -> np.ndarray:
        """One score per passage row (0 for passages sharing no term with the query)."""
        scorer = self.scorer(retriever)
        if not (expand and isinstance(query, Query) and query.aspect):
            return scorer.scores(query_tokens(self.analyzer, query, expand))
        # Aspect synonyms are alternatives, not extra evidence: entity (and text) terms plus the
        # best-matching phrasing of the aspect (a disjunction-max), so rare abbreviations such as
        # "FHX" cannot outweigh the entity.
        base_tokens = list(dict.fromkeys(self.analyzer(" ".join(filter(None, [query.entity, query.text])))))
        scores = scorer.scores(base_tokens) if base_tokens else np.zeros(len(self), dtype=np.float32)
        best = None
        for phrase in aspect_terms(query.aspect):
            toks = [t for t in dict.fromkeys(self.analyzer(phrase)) if t not in base_tokens]
            if toks:
                s = scorer.scores(toks)
                best = s if best is None else np.maximum(best, s)
        return scores + best if best is not None else scores

    def aspect_prior(self, query: Query | str, weight: float) -> np.ndarray | None:
        """Multiplier (1 + weight) for passages whose section aspect is the one the query asks about."""
        aspect = query_aspect(query)
        if not weight or not aspect:
            return None
        match = self.columns["aspect"].mask(aspect)
        return np.where(match, 1.0 + weight, 1.0).astype(np.float32) if match.any() else None

    def check_aspect(self, aspect: str) -> None:
        known = set(ASPECT_SYNONYMS) | {s for v in ASPECT_SYNONYMS.values() for s in v} | set(self.aspects())
        if aspect.strip().lower() in known or normalize_aspect(aspect) in known:
            return
        close = difflib.get_close_matches(aspect.lower(), sorted(known), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known aspects include: {', '.join(self.aspects()[:15])}"
        raise QueryError(f"unknown aspect {aspect!r}{hint}")

    def filter_mask(self, filters: dict[str, Any] | None) -> np.ndarray | None:
        if not filters:
            return None
        mask = np.ones(len(self), dtype=bool)
        for field, value in filters.items():
            col = self.columns.get(field)
            if col is None:
                raise QueryError(f"unknown filter field {field!r}; filterable fields: {', '.join(sorted(self.columns))}")
            wanted = normalize_aspect(str(value)) if field == "aspect" else value
            m = col.mask(wanted)
            if not m.any():
                values = [str(v) for v in col.values if v is not None]
                close = difflib.get_close_matches(str(value), values, n=5, cutoff=0.6)
                hint = f" (close: {', '.join(close)})" if close else ""
                raise QueryError(f"no passage has {field}={value!r}{hint}")
            mask &= m
        return mask

    def search(
        self,
        query: Query | str,
        k: int = 10,
        filters: dict[str, Any] | None = None,
        retriever: Retriever | str = Retriever.bm25,
        expand: bool = True,
        aspect_boost: float = DEFAULT_ASPECT_BOOST,
    ) -> list[ScoredPassage]:
        """Top-k passages. ``aspect_boost`` multiplies the score of passages from sections whose
        aspect is the one asked about (explicit, or inferred from the question) by 1 + boost."""
        if k <= 0:
            raise QueryError(f"k must be positive, got {k}")
        if isinstance(query, Query) and query.aspect:
            self.check_aspect(query.aspect)
        scores = self.scores(query, retriever, expand)
        prior = self.aspect_prior(query, aspect_boost)
        if prior is not None:
            scores = scores * prior
        mask = self.filter_mask(filters)
        return self.top_k(scores, k, mask)

    def top_k(self, scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> list[ScoredPassage]:
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        candidates = np.flatnonzero(scores > 0)
        if len(candidates) > k:
            part = np.argpartition(-scores[candidates], k - 1)[:k]
            candidates = candidates[part]
        # ties broken by row order so results are deterministic
        order = candidates[np.lexsort((candidates, -scores[candidates]))]
        return [
            ScoredPassage(pid=(p := self.passage(int(r))).pid, score=float(scores[r]), rank=i + 1, passage=p)
            for i, r in enumerate(order)
        ]


def build_index(
    documents: Iterable[Document],
    root: str | Path,
    segmenter: SegmenterConfig | None = None,
    analyzer: AnalyzerConfig | None = None,
    bm25: BM25Params | None = None,
    report: ReadReport | None = None,
) -> Index:
    """Index ``documents`` into ``root``, atomically replacing any index already there."""
    with IndexWriter(root, segmenter, analyzer, bm25, report) as w:
        for doc in documents:
            w.add(doc)
    return Index.load(root)


def load_index(root: str | Path) -> Index:
    return Index.load(root)

