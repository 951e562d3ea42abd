"""capr's index: passages, documents, a lexical term matrix, filter columns and dense vectors in one directory."""

from __future__ import annotations

import difflib
import json
import shutil
import time
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from capr import __version__
from capr.corpus.aspects import ASPECT_SYNONYMS, aspect_terms, infer_aspect, normalize_aspect
from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig, segment
from capr.errors import CaprError, IndexError_, QueryError
from capr.filters import Filters, ValueTable, as_clauses, column_mask
from capr.index import directory as dirs
from capr.index.analyzer import Analyzer, AnalyzerConfig
from capr.index.atomic import write_json, write_npy
from capr.index.lexical import BM25Params, BM25Scorer, TfidfScorer
from capr.index.merge import merge_columns, merge_matrices
from capr.index.segment import SEGMENTS, Segment, SegmentBuilder
from capr.records import Document, Passage, Query, ScoredPassage
from capr.retrieve.fusion import FusionConfig, fuse

if TYPE_CHECKING:
    from capr.models.encoder import EncoderConfig

FORMAT_VERSION = 2
DEFAULT_ASPECT_BOOST = 0.5
DEFAULT_HNSW_THRESHOLD = 50_000  # segments with at least this many passages get an HNSW graph


class Retriever(str, Enum):
    bm25 = "bm25"
    tfidf = "tfidf"
    dense = "dense"
    hybrid = "hybrid"


LEXICAL = (Retriever.bm25, Retriever.tfidf)


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


# How an ⟨entity, aspect⟩ question becomes text for a dense encoder (compared in docs/RESULTS.md).
TEMPLATES = {
    "plain": "{entity} {aspect}",
    "of": "{aspect} of {entity}",
    "question": "What are the {aspect} of {entity}?",
}
DEFAULT_TEMPLATE = "plain"


def dense_query_text(query: Query | str, template: str = DEFAULT_TEMPLATE) -> str:
    fmt = TEMPLATES.get(template)
    if fmt is None:
        raise QueryError(f"unknown query template {template!r}; choose one of {sorted(TEMPLATES)}")
    if isinstance(query, str):
        return query_text(query)
    if query.text and not (query.entity or query.aspect):
        return query.text
    text = fmt.format(entity=query.entity or "", aspect=query.aspect or "").strip()
    return f"{text} {query.text}" if query.text else text


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


def _encoder(config: dict[str, Any] | None):
    if not config:
        return None
    from capr.models.encoder import Encoder, EncoderConfig

    return Encoder(EncoderConfig.from_dict(config["encoder"]))


def check_aspect(aspect: str, corpus_aspects: list[str]) -> None:
    """An aspect is known when the synonym table or the corpus has it; otherwise a QueryError with close matches
    (shared by every index backend)."""
    known = set(ASPECT_SYNONYMS) | {s for v in ASPECT_SYNONYMS.values() for s in v} | set(corpus_aspects)
    if aspect.strip().lower() in known or normalize_aspect(aspect) in known:
        return
    close = difflib.get_close_matches(aspect.lower(), sorted(known), n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known aspects include: {', '.join(corpus_aspects[:15])}"
    raise QueryError(f"unknown aspect {aspect!r}{hint}")


class IndexWriter:
    """Creates an index (``mode="create"``, replacing whatever ``root`` held) or updates one
    (``mode="update"``: add and delete documents). ``commit`` makes the change current in one
    atomic step; until then, and if the process dies, readers see the previous generation."""

    def __init__(
        self,
        root: str | Path,
        segmenter: SegmenterConfig | None = None,
        analyzer: AnalyzerConfig | None = None,
        bm25: BM25Params | None = None,
        report: ReadReport | None = None,
        dense: "EncoderConfig | None" = None,
        mode: str = "create",
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        progress: Any = None,
    ) -> None:
        if mode not in ("create", "update"):
            raise ValueError(f"mode must be 'create' or 'update', not {mode!r}")
        self.root = Path(root)
        self.mode = mode
        self.report = report or ReadReport()
        self.progress = progress
        if mode == "update":
            dirs.current_generation(self.root)  # clear error when there is no index to update
        else:
            dirs.prepare_root(self.root)
        # Lock before reading the base generation: a concurrent writer's commit must not be lost.
        self._lock = dirs.write_lock(self.root)
        self._lock.__enter__()
        self._closed = False
        try:
            self._configure(mode, segmenter, analyzer, bm25, dense, hnsw_threshold)
            dirs.remove_stale(self.root)
            self.builder = SegmentBuilder(self.root, self.segmenter, self.analyzer)
            self._dense_encoder = _encoder(self.dense_info)
            self.builder.keep_texts = self._dense_encoder is not None
            if self._dense_encoder is not None:
                # a model trained with document context reads each passage with its title (and heading)
                self.builder.dense_text = self._dense_encoder.passage_text
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        self._new_ids: set[str] = set()
        self._new_pids: set[str] = set()
        self._delete: set[str] = set()  # documents of earlier segments to tombstone
        self._t0 = time.time()

    def _configure(self, mode, segmenter, analyzer, bm25, dense, hnsw_threshold) -> None:
        if mode == "update":
            self.base: Index | None = Index.load(self.root)
            m = self.base.manifest
            self.segmenter = SegmenterConfig(**m["segmenter"])
            self.analyzer_config = AnalyzerConfig.from_dict(m["analyzer"])
            self.bm25 = BM25Params(**m["bm25"])
            self.dense_info = m.get("dense")
            self.hnsw_threshold = m.get("hnsw_threshold", hnsw_threshold)
        else:
            self.base = None
            self.segmenter = segmenter or SegmenterConfig()
            self.analyzer_config = analyzer or AnalyzerConfig()
            self.bm25 = bm25 or BM25Params()
            self.dense_info = {"encoder": dense.to_dict()} if dense is not None else None
            self.hnsw_threshold = hnsw_threshold
        self.analyzer = Analyzer(self.analyzer_config)

    @property
    def n_passages(self) -> int:
        return self.builder.n_passages

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def add(self, doc: Document) -> int:
        """Segment, analyse and store one document (replacing an indexed one with the same id)."""
        if doc.doc_id in self._new_ids:
            self.report.bad(str(doc.metadata.get("path") or doc.doc_id), f"duplicate document id {doc.doc_id!r}", doc.doc_id)
            return 0
        passages = segment(doc, self.segmenter)
        if not passages:
            self.report.empty += 1
            return 0
        pids = [p.pid for p in passages]
        if len(set(pids)) != len(pids) or self._new_pids.intersection(pids):
            self.report.bad(doc.doc_id, "duplicate passage ids", doc.doc_id)
            return 0
        if self.base is not None and self.base.has_document(doc.doc_id):
            self._delete.add(doc.doc_id)
        self._new_ids.add(doc.doc_id)
        self._new_pids.update(pids)
        self.builder.add(doc, passages)
        return len(passages)

    def delete(self, doc_id: str) -> None:
        if doc_id in self._new_ids:
            raise CaprError(f"document {doc_id!r} was added in this same update; delete it in a later one")
        if self.base is None or not self.base.has_document(doc_id):
            raise QueryError(f"no document with id {doc_id!r}")
        self._delete.add(doc_id)

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.builder.abort()
        self._lock.__exit__(None, None, None)

    def _note(self, what: str) -> None:
        if self.progress:
            self.progress(what)

    def commit(self) -> "Index":
        if self._closed:
            raise IndexError_("writer already closed")
        gen_tmp = None
        try:
            vectors = None
            if self.dense_info and self.builder.n_passages:
                encoder = self._dense_encoder
                self._note(f"encoding {self.builder.n_passages} passages")
                vectors = encoder.encode_passages(self.builder.texts, progress=getattr(self.progress, "advance_encoding", None))
                self.dense_info = {**self.dense_info, "dim": int(vectors.shape[1])}
            new_segment = self.builder.finish(vectors, self.hnsw_threshold, self._note) if self.builder.n_passages else None
            if new_segment is None:
                self.builder.abort()
            gen_tmp, name = dirs.new_generation(self.root)
            (gen_tmp / "live").mkdir()
            segments: list[str] = []
            live_docs = live_passages = 0
            vocab: set[str] = set()
            if self.base is not None:
                for seg, plive, dlive in zip(self.base.segments, self.base.seg_live, self.base.seg_doc_live):
                    if self._delete:
                        col = seg.columns["doc_id"]
                        gone = [code for code, v in enumerate(col.values) if v in self._delete]
                        plive = plive & ~np.isin(np.asarray(col.codes), gone)
                        dlive = dlive & ~np.fromiter((d in self._delete for d in seg.doc_ids), dtype=bool, count=len(seg.doc_ids))
                    if not plive.any():
                        continue  # fully deleted segments are dropped, and collected after commit
                    write_npy(gen_tmp / "live" / f"{seg.name}.npy", plive)
                    write_npy(gen_tmp / "live" / f"{seg.name}.docs.npy", dlive)
                    segments.append(seg.name)
                    live_passages += int(plive.sum())
                    live_docs += int(dlive.sum())
                    vocab.update(seg.matrix.vocab)
            if new_segment is not None:
                write_npy(gen_tmp / "live" / f"{new_segment}.npy", np.ones(self.builder.n_passages, dtype=bool))
                write_npy(gen_tmp / "live" / f"{new_segment}.docs.npy", np.ones(len(self.builder.doc_ids), dtype=bool))
                segments.append(new_segment)
                live_passages += self.builder.n_passages
                live_docs += len(self.builder.doc_ids)
                vocab.update(self.builder.terms)
            fields = self.builder.field_names | (set(self.base.columns) if self.base else set())
            manifest = {
                "format_version": FORMAT_VERSION,
                "capr_version": __version__,
                "generation": name,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "analyzer": self.analyzer_config.to_dict(),
                "bm25": asdict(self.bm25),
                "segmenter": asdict(self.segmenter),
                "dense": self.dense_info,
                "hnsw_threshold": self.hnsw_threshold,
                "segments": segments,
                "counts": {"documents": live_docs, "passages": live_passages, "terms_in_segments": len(vocab)},
                "fields": sorted(fields),
                "write_seconds": round(time.time() - self._t0, 3),
            }
            write_json(gen_tmp / "manifest.json", manifest)
            dirs.commit_generation(self.root, gen_tmp, name)
        except BaseException:
            if gen_tmp is not None:
                shutil.rmtree(gen_tmp, ignore_errors=True)
            self.abort()
            raise
        self._closed = True
        self._lock.__exit__(None, None, None)
        return Index.load(self.root)


class Index:
    """A loaded generation of an index directory: a consistent, read-only snapshot."""

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
        self.segments = [Segment(root / SEGMENTS / name) for name in self.manifest["segments"]]
        self.seg_live = [np.array(np.load(gen / "live" / f"{s.name}.npy")) for s in self.segments]
        self.seg_doc_live = [np.array(np.load(gen / "live" / f"{s.name}.docs.npy")) for s in self.segments]
        sizes = [s.n_passages for s in self.segments]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.live = np.concatenate(self.seg_live) if self.segments else np.zeros(0, dtype=bool)
        self.matrix = merge_matrices([s.matrix for s in self.segments], self.live) if self.segments else None
        self.columns = {f: merge_columns([s.columns.get(f) for s in self.segments], sizes) for f in self.manifest["fields"]}
        self._scorers: dict[Retriever, Any] = {}
        self._pid_rows: dict[str, int] | None = None
        self._doc_rows: dict[str, tuple[int, int]] | None = None
        self._vectors: list | None = None
        self._encoder = None

    @classmethod
    def load(cls, root: str | Path) -> "Index":
        root = Path(root)
        return cls(root, dirs.current_generation(root))

    def close(self) -> None:
        for s in self.segments:
            s.close()

    def __len__(self) -> int:
        """Rows, including deleted passages still present in segments (see ``live``)."""
        return int(self.offsets[-1])

    @property
    def counts(self) -> dict[str, int]:
        """Live documents and passages, and the vocabulary of live passages."""
        c = self.manifest["counts"]
        vocab = int((self.matrix.document_frequency() > 0).sum()) if self.matrix is not None else 0
        return {"documents": c["documents"], "passages": c["passages"], "vocabulary": vocab}

    @property
    def has_dense(self) -> bool:
        return bool(self.manifest.get("dense"))

    # -- lookups ----------------------------------------------------------------
    def _locate(self, row: int) -> tuple[Segment, int]:
        i = int(np.searchsorted(self.offsets, row, side="right")) - 1
        return self.segments[i], row - int(self.offsets[i])

    def passage(self, row: int) -> Passage:
        seg, local = self._locate(row)
        rec = seg.passages.get(local)
        doc_meta = seg.documents.get(rec.pop("doc_row"))["metadata"]
        p = Passage.from_dict(rec)
        p.metadata = doc_meta
        return p

    def pid_rows(self) -> dict[str, int]:
        """pid → row of its live passage."""
        if self._pid_rows is None:
            rows: dict[str, int] = {}
            for seg, off, live in zip(self.segments, self.offsets, self.seg_live):
                for i in np.flatnonzero(live):
                    rows[seg.pids[i]] = int(off + i)
            self._pid_rows = rows
        return self._pid_rows

    def passage_by_pid(self, pid: str) -> Passage:
        row = self.pid_rows().get(pid)
        if row is None:
            raise QueryError(f"no passage with id {pid!r}")
        return self.passage(row)

    def _doc_index(self) -> dict[str, tuple[int, int]]:
        if self._doc_rows is None:
            rows: dict[str, tuple[int, int]] = {}
            for si, (seg, dlive) in enumerate(zip(self.segments, self.seg_doc_live)):
                for i in np.flatnonzero(dlive):
                    rows[seg.doc_ids[i]] = (si, int(i))
            self._doc_rows = rows
        return self._doc_rows

    def has_document(self, doc_id: str) -> bool:
        return doc_id in self._doc_index()

    def document_ids(self) -> list[str]:
        return list(self._doc_index())

    def document(self, doc_id: str) -> Document:
        loc = self._doc_index().get(doc_id)
        if loc is None:
            raise QueryError(f"no document with id {doc_id!r}")
        return Document.from_dict(self.segments[loc[0]].documents.get(loc[1]))

    def aspects(self) -> list[str]:
        col = self.columns["aspect"]
        present = set(np.unique(np.asarray(col.codes)[self.live]).tolist())
        return sorted(str(v) for i, v in enumerate(col.values) if v and i in present)

    # -- scoring ----------------------------------------------------------------
    def scorer(self, retriever: Retriever | str):
        r = Retriever(retriever)
        if r not in LEXICAL:
            raise QueryError(f"{r.value} is not a lexical retriever")
        if r not in self._scorers:
            self._scorers[r] = BM25Scorer(self.matrix, self.bm25_params) if r is Retriever.bm25 else TfidfScorer(self.matrix)
        return self._scorers[r]

    def scores(self, query: Query | str, retriever: Retriever | str = Retriever.bm25, expand: bool = True) -> np.ndarray:
        """One lexical score per row (0 for rows sharing no term with the query, and for deleted rows)."""
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

    # -- dense ------------------------------------------------------------------
    def encoder(self):
        if not self.has_dense:
            raise QueryError(f"{self.root}: index has no vectors; build it with `capr index --dense`")
        if self._encoder is None:
            self._encoder = _encoder(self.manifest["dense"])
        return self._encoder

    def vectors(self) -> list:
        if self._vectors is None:
            self._vectors = [s.vectors() for s in self.segments]
        return self._vectors

    def encode_query(self, query: Query | str, template: str = DEFAULT_TEMPLATE) -> np.ndarray:
        return self.encoder().encode_queries([dense_query_text(query, template)])[0]

    def dense_candidate_scores(self, qvec: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Cosine of the query with each given row (exact, for re-ranking a candidate pool)."""
        out = np.empty(len(rows), dtype=np.float32)
        seg_idx = np.searchsorted(self.offsets, rows, side="right") - 1
        for si in np.unique(seg_idx):
            sel = seg_idx == si
            vecs = self.vectors()[si].vectors
            out[sel] = np.asarray(vecs[rows[sel] - self.offsets[si]]) @ qvec
        return out

    def dense_search(self, qvec: np.ndarray, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Global top-k (rows, cosine) over live rows passing ``mask``: per segment, then merged."""
        allowed = self.live if mask is None else (self.live & mask)
        rows, scores = [], []
        for si, sv in enumerate(self.vectors()):
            lo, hi = int(self.offsets[si]), int(self.offsets[si + 1])
            r, s = sv.search(qvec, k, allowed[lo:hi])
            rows.append(r + lo)
            scores.append(s)
        rows_a = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        scores_a = np.concatenate(scores) if scores else np.zeros(0, dtype=np.float32)
        order = np.lexsort((rows_a, -scores_a))[:k]
        return rows_a[order], scores_a[order]

    # -- search -----------------------------------------------------------------
    def check_aspect(self, aspect: str) -> None:
        check_aspect(aspect, self.aspects())

    def filter_mask(self, filters: "Filters") -> np.ndarray | None:
        """Rows passing every clause: a {field: value} dict (equality) or clauses/clause strings
        with ranges and sets (see capr.filters). An equality or set no passage has is an error
        (most often a typo); an empty range is a legitimate empty answer."""
        clauses = as_clauses(filters)
        if not clauses:
            return None
        mask = self.live.copy()
        tables = self.__dict__.setdefault("_filter_tables", {})  # per column, built on its first range filter
        for c in clauses:
            col = self.columns.get(c.field)
            if col is None:
                raise QueryError(f"unknown filter field {c.field!r}; filterable fields: {', '.join(sorted(self.columns))}")
            norm = (lambda v: normalize_aspect(str(v))) if c.field == "aspect" else None

            def table(f=c.field, col=col):
                return tables[f] if f in tables else tables.setdefault(f, ValueTable(col.values))

            m = column_mask(c, col.values, col.codes, norm, col._lookup, table) & self.live
            if not m.any() and c.op in ("=", "in"):
                values = [str(v) for v in col.values if v is not None]
                close = difflib.get_close_matches(str(c.values[0]), values, n=5, cutoff=0.6)
                hint = f" (close: {', '.join(close)})" if close else ""
                shown = f"{c.field}={c.value!r}" if c.op == "=" else str(c)
                raise QueryError(f"no passage has {shown}{hint}")
            mask &= m
        return mask

    def aspect_prior(self, query: Query | str, weight: float) -> np.ndarray | None:
        """Multiplier (1 + weight) for passages whose section aspect is the one the query asks about."""
        aspect = query_aspect(query)
        if not weight or not aspect:
            return None
        match = self.columns["aspect"].mask(aspect)
        return np.where(match, 1.0 + weight, 1.0).astype(np.float32) if match.any() else None

    def search(
        self,
        query: Query | str,
        k: int = 10,
        filters: "Filters" = None,
        retriever: Retriever | str = Retriever.bm25,
        expand: bool = True,
        aspect_boost: float = DEFAULT_ASPECT_BOOST,
        fusion: FusionConfig | None = None,
        template: str = DEFAULT_TEMPLATE,
    ) -> list[ScoredPassage]:
        """Top-k passages. ``aspect_boost`` multiplies the score of passages from sections whose
        aspect is the one asked about (explicit, or inferred from the question) by 1 + boost."""
        if k <= 0:
            raise QueryError(f"k must be positive, got {k}")
        retriever = Retriever(retriever)
        if isinstance(query, Query) and query.aspect:
            self.check_aspect(query.aspect)
        query_text(query)  # rejects empty queries before any work
        mask = self.filter_mask(filters)
        allowed = self.live if mask is None else mask
        prior = self.aspect_prior(query, aspect_boost)
        depth = max(k, 100) if prior is not None or retriever is Retriever.hybrid else k
        if retriever in LEXICAL:
            scores = self.scores(query, retriever, expand)
            rows, vals = self._top(scores, depth, allowed)
        elif retriever is Retriever.dense:
            rows, vals = self.dense_search(self.encode_query(query, template), depth, allowed)
        else:
            cfg = fusion or FusionConfig()
            lex = self.scores(query, Retriever.bm25, expand)
            lrows, lvals = self._top(lex, cfg.depth, allowed)
            drows, dvals = self.dense_search(self.encode_query(query, template), cfg.depth, allowed)
            rows, vals = fuse([(lrows, lvals), (drows, dvals)], cfg)
        if prior is not None and len(rows):
            vals = vals * prior[rows]
        order = np.lexsort((rows, -vals))[:k]
        return [
            ScoredPassage(pid=(p := self.passage(int(r))).pid, score=float(v), rank=i + 1, passage=p)
            for i, (r, v) in enumerate(zip(rows[order], vals[order]))
        ]

    def _top(self, scores: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = np.where(allowed, scores, 0.0)
        candidates = np.flatnonzero(scores > 0)
        if len(candidates) > k:
            candidates = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
        return candidates.astype(np.int64), scores[candidates].astype(np.float32)


def build_index(
    documents: Iterable[Document],
    root: str | Path,
    segmenter: SegmenterConfig | None = None,
    analyzer: AnalyzerConfig | None = None,
    bm25: BM25Params | None = None,
    report: ReadReport | None = None,
    dense: "EncoderConfig | None" = None,
) -> Index:
    """Index ``documents`` into ``root``, atomically replacing any index already there."""
    with IndexWriter(root, segmenter, analyzer, bm25, report, dense=dense) as w:
        for doc in documents:
            w.add(doc)
    return Index.load(root)


def load_index(root: str | Path) -> Index:
    return Index.load(root)
