"""Benchmarks. medquad-cdv reproduces the CDV/CAPR evaluation on the MedQuAD test split.

Protocols
- ``rerank64`` (CDV/CAPR exactly): BM25 top-64 over all test passages; gold passages
  missing from the 64 overwrite the lowest-ranked non-relevant candidates; candidates
  are shuffled with a fixed seed; the retriever under test orders them (ties keep
  the shuffled order).
- ``full``: the retriever ranks the whole collection.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from capr.corpus import Format, read_documents
from capr.corpus.medquad import read_medquad_cdv_queries
from capr.corpus.report import ReadReport
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError, QueryError
from capr.eval.metrics import METRICS, evaluate
from capr.eval.runs import falling_scores
from capr.index import AnalyzerConfig, Index, IndexWriter
from capr.models.encoder import EncoderConfig
from capr.records import Retriever
from capr.search.fusion import FusionConfig, fuse_aligned
from capr.records import Document, Qrel, Query, Run, ScoredPassage, qrels_as_dict
from capr.search import Searcher

POOL_DEPTH = 64
SHUFFLE_SEED = 1234
FULL_DEPTH = 1000


class Protocol(str, Enum):
    rerank64 = "rerank64"
    full = "full"


class QueryField(str, Enum):
    tuple = "tuple"  # entity + aspect heading, e.g. "IgA nephropathy symptoms and presentation"
    question = "question"  # the natural-language MedQuAD question


# A scorer turns (query, candidate rows) into one score per candidate row.
CandidateScorer = Callable[[Query, np.ndarray], np.ndarray]


@dataclass
class BenchmarkData:
    name: str
    index: Index
    queries: list[Query]
    qrels: list[Qrel]
    extra: dict = field(default_factory=dict)


def medquad_cdv_dir(data_dir: str | Path) -> Path:
    path = Path(data_dir) / "medquad_cdv_test"
    if not (path / "passages.jsonl.gz").exists():
        raise CaprError(f"{path}: medquad_cdv_test not found (expected passages.jsonl.gz and queries.jsonl.gz)")
    return path


def load_medquad_cdv(
    data_dir: str | Path,
    index_dir: str | Path,
    analyzer: AnalyzerConfig | None = None,
    dense: EncoderConfig | None = None,
    progress: Any = None,
    titled: bool = False,
) -> BenchmarkData:
    """Index the 3,762 test passages exactly as given (no re-segmentation): passage text only, as the papers'
    protocol reads them, or (``titled``) with the document title in front, as ``capr index`` reads documents."""
    src = medquad_cdv_dir(data_dir)
    documents = lambda: read_documents(src, Format.medquad_cdv)  # noqa: E731
    index = _benchmark_index(index_dir, documents, analyzer, dense, SegmenterConfig(max_tokens=0, include_title=titled),
                             progress)
    queries, qrels, raw = read_medquad_cdv_queries(src)
    extra: dict[str, Any] = {"raw": raw}
    if titled:
        extra["pool_index"] = untitled_pool_index(index_dir, documents, analyzer, SegmenterConfig(max_tokens=0))
    return BenchmarkData("medquad-cdv", index, queries, qrels, extra)


def untitled_pool_index(index_dir: str | Path, documents: Callable[[], Iterable[Document]], analyzer: AnalyzerConfig | None,
                        segmenter: SegmenterConfig) -> Callable[[], Index]:
    """The lexical index, without titles, that the rerank64 protocol draws its BM25 pools from, kept beside a
    titled benchmark index: the candidates stay the protocol's whatever the index under test reads. Built (or
    loaded) on first use only: `--protocol full` never reads it."""
    return functools.cache(lambda: _benchmark_index(Path(f"{index_dir}.untitled-pools"), documents, analyzer, None,
                                                    replace(segmenter, include_title=False), None))


def _benchmark_index(index_dir: str | Path, documents: Callable[[], Iterable[Document]], analyzer: AnalyzerConfig | None,
                     dense: EncoderConfig | None, segmenter: SegmenterConfig, progress: Any,
                     report: ReadReport | None = None) -> Index:
    """The benchmark's index from `index_dir` when it was built with the same settings, else built there now."""
    index_dir = Path(index_dir)
    analyzer = analyzer or AnalyzerConfig()
    index = _cached_index(index_dir, analyzer, dense, segmenter)
    if index is None:
        # ``report``: the one the documents' reader fills, so a refused document is named by its file and line
        with IndexWriter(index_dir, segmenter=segmenter, analyzer=analyzer, dense=dense, progress=progress,
                         report=report) as w:
            for doc in documents():
                w.add(doc)
        index = Index.load(index_dir)
    return index


def _cached_index(index_dir: Path, analyzer: AnalyzerConfig, dense: EncoderConfig | None,
                  segmenter: SegmenterConfig) -> Index | None:
    try:
        idx = Index.load(index_dir)
    except CaprError:
        return None
    seg = idx.manifest.get("segmenter", {})
    have_dense = (idx.manifest.get("dense") or {}).get("encoder")
    want_dense = dense.to_dict() if dense else None
    if (
        idx.manifest["analyzer"] != analyzer.to_dict()
        or seg.get("max_tokens") != segmenter.max_tokens
        or bool(seg.get("include_title")) != segmenter.include_title
        or (want_dense is not None and have_dense != want_dense)
    ):
        idx.close()
        return None
    return idx


MTS_QUERIES = 2000
MTS_SEED = 20261122


def mtsamples_capr_dir(data_dir: str | Path) -> Path:
    path = Path(data_dir) / "mtsamples" / "mtsamples.csv.gz"
    if not path.exists():
        raise CaprError(f"{path}: MTSamples not found")
    return path


def load_mtsamples_capr(
    data_dir: str | Path,
    index_dir: str | Path,
    analyzer: AnalyzerConfig | None = None,
    dense: EncoderConfig | None = None,
    progress: Any = None,
    n_queries: int = MTS_QUERIES,
    seed: int = MTS_SEED,
    split: str = "test",
    max_notes: int | None = None,
    name: str = "mtsamples-capr",
    titled: bool = False,
) -> BenchmarkData:
    """The CAPR paper's MIMIC-III protocol rebuilt on open notes: the held-out 25% of deduplicated MTSamples
    notes (capr.labels.splits.mtsamples_split), ⟨entity, aspect⟩ queries from their self-supervised labels,
    gold = every held-out passage carrying the pair, 63 random held-out passages as the other candidates.
    ``titled``: the lexical text has each note's title in front, as ``capr index`` has it."""
    from capr.labels import LabelGenerator
    from capr.labels.gazetteer import normalize_name
    from capr.labels.splits import select_split

    src = mtsamples_capr_dir(data_dir)
    docs = list(select_split(read_documents(src, Format.mtsamples), split))
    if max_notes is not None:  # a dev sample of the training notes: the first max_notes in a fixed hash order
        from capr.labels.splits import mtsamples_split_rank

        docs = sorted(docs, key=lambda d: mtsamples_split_rank(d.doc_id, "dev"))[:max_notes]
    index = _benchmark_index(index_dir, lambda: docs, analyzer, dense, SegmenterConfig(include_title=titled), progress)
    labels = list(LabelGenerator()(docs))
    carriers: dict[tuple[str, str], list[str]] = {}
    for lp in labels:
        for e in lp.entities:
            carriers.setdefault((normalize_name(e), lp.aspect), []).append(lp.pid)
    rng = random.Random(seed)
    order = list(range(len(labels)))
    rng.shuffle(order)
    queries, qrels, seen = [], [], set()
    rows_of = index.pid_rows()
    for k in order:
        lp = labels[k]
        entity = rng.choice(lp.entities)
        key = (normalize_name(entity), lp.aspect)
        if key in seen or lp.pid not in rows_of:
            continue
        seen.add(key)
        qid = f"mts-capr-q{len(queries)}"
        queries.append(Query(qid, entity=entity, aspect=lp.aspect))
        qrels.extend(Qrel(qid, pid, 1) for pid in dict.fromkeys(carriers[key]) if pid in rows_of)
        if len(queries) >= n_queries:
            break
    all_rows = list(range(len(index)))
    pools, rels = {}, qrels_as_dict(qrels)
    for q in queries:
        gold = [rows_of[p] for p in rels[q.qid]]
        gold_set = set(gold)
        others = [r for r in rng.sample(all_rows, min(len(all_rows), POOL_DEPTH + len(gold))) if r not in gold_set]
        pool = gold[:POOL_DEPTH] + others[: max(0, POOL_DEPTH - len(gold))]
        rng.shuffle(pool)
        pools[q.qid] = np.asarray(pool, dtype=np.int64)
    return BenchmarkData(name, index, queries, qrels, {"pools": pools, "notes": len(docs)})


def load_mediqa2019(
    data_dir: str | Path,
    index_dir: str | Path,
    analyzer: AnalyzerConfig | None = None,
    dense: EncoderConfig | None = None,
    progress: Any = None,
    name: str = "mediqa2019",
    titled: bool = False,
    path: str | Path | None = None,
) -> BenchmarkData:
    """MEDIQA 2019 Task 3 validation set (`mediqa2019`: 25 consumer health questions) or training set 2
    (`mediqa2019-train`: 104; a dev set for choices such as the merge weight, which must not see the validation
    set), each question re-ranking its own judged answers (relevant = ReferenceScore 3 or 4, as in the shared
    task). Free-text questions only. The answers have no titles, so ``titled`` changes nothing but the index
    folder's settings. ``path``: any MEDIQA 2019 Task 3 file with ``ReferenceScore`` judgements instead (``.xml`` or
    ``.xml.gz``; `capr eval --benchmark mediqa:PATH`)."""
    from capr.corpus.mediqa import read_task3, task3_path
    from capr.records import Section

    path = Path(path) if path is not None else task3_path(data_dir, name)
    if not path.exists():
        raise CaprError(f"{path}: MEDIQA 2019 {name} set not found")
    queries, qrels, pools_pids, docs = [], [], {}, []
    for ans in read_task3(path):
        if ans.qid not in pools_pids:
            queries.append(Query(ans.qid, text=ans.question.strip()))
            pools_pids[ans.qid] = []
        docs.append(Document(doc_id=ans.aid, title="", text=ans.text,
                             sections=[Section(heading="", aspect=None, start=0, end=len(ans.text), section_id=ans.aid)]))
        pools_pids[ans.qid].append(ans.aid)
        qrels.append(Qrel(ans.qid, ans.aid, int(ans.relevant)))
    if not any(q.relevance > 0 for q in qrels):
        raise CaprError(f"{path}: no answer is judged relevant (ReferenceScore 3 or 4): a MEDIQA file without "
                        "judgements cannot be a benchmark")
    index = _benchmark_index(index_dir, lambda: docs, analyzer, dense, SegmenterConfig(max_tokens=0, include_title=titled),
                             progress)
    rows_of = index.pid_rows()
    pools = {qid: np.asarray([rows_of[p] for p in pids if p in rows_of], dtype=np.int64) for qid, pids in pools_pids.items()}
    return BenchmarkData(name, index, queries, qrels, {"pools": pools, "precision_at_1": True})


def as_query(q: Query, field: QueryField) -> Query:
    if field is QueryField.question:
        return Query(q.qid, text=q.text)
    return Query(q.qid, entity=q.entity, aspect=q.aspect)


class BenchmarkSearcher:
    """The benchmark's queries through the one Searcher, on the embedded index or any other store holding the
    same passages. Candidate rows are the embedded index's; a store with other keys is mapped through pids."""

    def __init__(self, data: BenchmarkData, field: QueryField, store: Any = None, reranker: Any = None) -> None:
        self.data = data
        self.field = field
        self.searcher = Searcher(store if store is not None else data.index, reranker=reranker)
        if store is None:
            self.key_of_row = None
        else:
            pid_of = [""] * len(data.index)
            for pid, r in data.index.pid_rows().items():
                pid_of[r] = pid
            self.key_of_row = store.keys_of(pid_of)
        # The benchmark's tuple query is the literal "entity aspect-heading": no synonym expansion.
        self.parsed = {q.qid: self.searcher.parse(as_query(q, field), expand=False, validate=False) for q in data.queries}
        self._vectors: dict[str, np.ndarray] = {}

    def keys(self, rows: np.ndarray) -> np.ndarray:
        return rows if self.key_of_row is None else self.key_of_row[rows]

    def query_vectors(self, template: str, progress: Any = None) -> dict[str, np.ndarray]:
        """All queries encoded up front, in batches."""
        if template not in self._vectors:
            pqs = list(self.parsed.values())
            vecs = self.searcher.encode(pqs, template, progress=progress)
            self._vectors[template] = {pq.qid: v for pq, v in zip(pqs, vecs)}
        return self._vectors[template]

    def lexical(self, retriever: Retriever = Retriever.bm25) -> "CandidateScorer":
        def score(q: Query, rows: np.ndarray) -> np.ndarray:
            return self.searcher.lexical_scores(self.parsed[q.qid], self.keys(rows), retriever)

        return score

    def dense(self, template: str, progress: Any = None) -> "CandidateScorer":
        vecs = self.query_vectors(template, progress)

        def score(q: Query, rows: np.ndarray) -> np.ndarray:
            return self.searcher.store.dense_scores(vecs[q.qid], self.keys(rows))

        return score

    def scorer(self, retriever: Retriever, template: str, fusion: FusionConfig, progress: Any = None) -> "CandidateScorer":
        if retriever in (Retriever.bm25, Retriever.tfidf):
            return self.lexical(retriever)
        dense = self.dense(template, progress)
        return dense if retriever is Retriever.dense else hybrid_scorer(self.lexical(Retriever.bm25), dense, fusion)


def default_scorer(data: BenchmarkData, field: QueryField, store: Any = None, options: Any = None, reranker: Any = None,
                   rerank_depth: int | None = None) -> CandidateScorer:
    """What `capr search` with its default options returns, on the candidates: the same Searcher and
    SearchOptions() (the best retriever the index supports, synonym expansion, aspect prior, entity-first ranking),
    restricted to the pool, or over the whole index (its top 1,000) for ``full``. A candidate's score is its hit's
    (ties split in rank order); candidates not returned rank last. ``options``: other SearchOptions (the dev grid of experiments/default_dev.py);
    ``reranker``: a loaded second stage on the top ``rerank_depth`` (`capr search --reranker`)."""
    from dataclasses import replace

    from capr.search import SearchOptions

    bench = BenchmarkSearcher(data, field, store, reranker=reranker)
    searcher = bench.searcher
    options = replace(options or SearchOptions(), highlights=False)
    if rerank_depth:
        options = replace(options, rerank_depth=rerank_depth)
    parsed = {q.qid: searcher.parse(as_query(q, field), expand=options.expand, validate=False) for q in data.queries}
    unsearchable: dict[str, str] = {}
    data.extra["unsearchable"] = unsearchable
    row_of = data.index.pid_rows()
    every = len(data.index)

    def score(q: Query, rows: np.ndarray) -> np.ndarray:
        whole = len(rows) == every
        k = FULL_DEPTH if whole else len(rows)
        within = None if whole else bench.keys(rows)
        # (a second stage re-orders the top rerank_depth; the rest of the k keep the first stage's order)
        try:
            hits = [(h.pid, h.score) for h in searcher.search(parsed[q.qid], replace(options, k=k), within=within).hits]
        except QueryError as e:
            # a question `capr search` refuses (only stopwords, no letters): it returns nothing, and the evaluation
            # of the others goes on and names it (one such query among hundreds must not cost the whole run)
            unsearchable[q.qid] = str(e)
            return np.full(len(rows), -np.inf)
        position = {int(r): i for i, r in enumerate(rows)}
        out = np.full(len(rows), -np.inf)
        # the hits' own scores, a tie split in rank order: sorting by score gives back the search's ranking
        for (pid, _), score in zip(hits, falling_scores([score for _, score in hits])):
            out[position[row_of[pid]]] = score
        return out

    return score


def lexical_scorer(index: Index, retriever: Retriever, field: QueryField = None) -> CandidateScorer:
    """Lexical candidate scores of the benchmark's queries (tuple queries without synonym expansion)."""
    searcher = Searcher(index)

    def score(q: Query, rows: np.ndarray) -> np.ndarray:
        return searcher.lexical_scores(searcher.parse(q, expand=False, validate=False), rows, retriever)

    return score


def hybrid_scorer(lexical: CandidateScorer, dense: CandidateScorer, fusion: FusionConfig) -> CandidateScorer:
    """Fusion of the two retrievers' scores over the same candidates (the pool, or every passage)."""

    def score(q: Query, rows: np.ndarray) -> np.ndarray:
        return fuse_aligned([lexical(q, rows), dense(q, rows)], fusion)

    return score


def rerank_scorer(data: BenchmarkData, first: CandidateScorer, reranker, depth: int) -> CandidateScorer:
    """The first stage's top `depth` candidates re-ordered by a second-stage model (cross/poly/bi/an ensemble)."""
    from capr.search.query import dense_query_text
    from capr.search.second_stage import rerank_scores, score_passages

    def score(q: Query, rows: np.ndarray) -> np.ndarray:
        base = first(q, rows)
        text = dense_query_text(q, "plain")
        return rerank_scores(base, lambda top: score_passages(reranker, text, [data.index.passage(int(rows[i])) for i in top]),
                             depth)

    return score


def rerank64_pools(data: BenchmarkData, field: QueryField, seed: int = SHUFFLE_SEED) -> dict[str, np.ndarray]:
    """Candidate rows per query: BM25 top-64, gold forced in, shuffled. BM25 reads passage text without titles
    (``extra["pool_index"]()`` when the index under test has them), so the pools are the protocol's either way."""
    rows_of = data.index.pid_rows()
    rels = qrels_as_dict(data.qrels)
    rng = random.Random(seed)
    pools = {}
    pool_index = data.extra["pool_index"]() if "pool_index" in data.extra else data.index
    bm25 = lexical_scorer(pool_index, Retriever.bm25)
    every_row = to_row = np.arange(len(pool_index))
    if pool_index is not data.index:
        to_row = np.full(len(pool_index), -1, dtype=np.int64)
        for pid, r in pool_index.pid_rows().items():
            to_row[r] = rows_of[pid]
    for q in data.queries:
        scores = bm25(as_query(q, field), every_row)
        top = [int(to_row[r]) for r in np.argsort(-scores, kind="stable")[:POOL_DEPTH]]
        gold = [rows_of[p] for p in rels.get(q.qid, {}) if p in rows_of]
        missing = [g for g in gold if g not in top]
        # overwrite the lowest-ranked false candidates, from the bottom up
        pos = len(top) - 1
        for g in missing:
            while top[pos] in gold:
                pos -= 1
            top[pos] = g
            pos -= 1
        rng.shuffle(top)
        pools[q.qid] = np.asarray(top, dtype=np.int64)
    return pools


def run_benchmark(
    data: BenchmarkData,
    scorer: CandidateScorer,
    protocol: Protocol,
    field: QueryField,
    progress: Callable[[Sequence[Query]], Sequence[Query]] | None = None,
) -> tuple[dict[str, float], Run]:
    index = data.index
    if protocol is Protocol.rerank64:
        pools = data.extra.get("pools") or rerank64_pools(data, field)
    else:
        pools = None
    all_rows = np.arange(len(index))
    run = Run(name=f"capr-{protocol.value}")
    queries = progress(data.queries) if progress else data.queries
    pid_of = [None] * len(index)
    for pid, r in index.pid_rows().items():
        pid_of[r] = pid
    document_of_row = data.extra.get("document_of_row")
    for q in queries:
        rows = pools[q.qid] if pools is not None else all_rows
        s = np.asarray(scorer(as_query(q, field), rows), dtype=np.float64)
        order = np.argsort(-s, kind="stable")  # stable: ties keep the (shuffled) pool order
        if len(s) and np.isneginf(s).all():
            order = order[:0]  # the pipeline returned nothing: an empty ranking, as trec_eval scores it
        if document_of_row is not None:  # a document ranks, and scores, as its best passage
            ranked = list(best_passage_documents([(document_of_row[rows[i]], s[i]) for i in order]))
        else:
            ranked = [(pid_of[rows[i]], s[i]) for i in order]
        if pools is None:
            ranked = ranked[:FULL_DEPTH]
        # the pipeline's own scores (the run file keeps ties in this order: capr.eval.runs.falling_scores)
        scores = falling_scores([score for _, score in ranked])
        run.results[q.qid] = [ScoredPassage(pid=pid, score=score, rank=rank + 1)
                              for rank, ((pid, _), score) in enumerate(zip(ranked, scores))]
    metrics = evaluate(run.as_scores(), qrels_as_dict(data.qrels), data.extra.get("metrics", METRICS))
    if data.extra.get("precision_at_1"):
        rel = qrels_as_dict(data.qrels)
        hits = [rel.get(qid, {}).get(res[0].pid, 0) > 0 for qid, res in run.results.items() if res]
        metrics["P@1"] = round(100 * sum(hits) / max(1, len(hits)), 2)
    return metrics, run


def document_of_rows(index: Index) -> list[str]:
    """The document id of every row: a benchmark judged by document ranks each document at its best passage."""
    return [index.passage(row).doc_id for row in range(len(index))]


def best_passage_documents(ranked: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Each document once, where (and as) its best passage ranks (``ranked``: the document and score of each ranked
    passage, best first)."""
    out: dict[str, float] = {}
    for doc, score in ranked:
        out.setdefault(doc, score)
    return list(out.items())


def cdv_query_vectors(data: BenchmarkData, store) -> dict[str, np.ndarray]:
    """Every query entity and aspect, embedded once."""
    texts = sorted({t for q in data.queries for t in (q.entity, q.aspect) if t})
    return dict(zip(texts, store.model.label_vectors(texts)))


def cdv_scorer(data: BenchmarkData, store, field: QueryField, vec: dict[str, np.ndarray] | None = None) -> CandidateScorer:
    """CDV passage scores (mean sentence score over the passage, decoded in its whole document's context)."""
    if field is not QueryField.tuple:
        raise CaprError("CDV ranks ⟨entity, aspect⟩ queries; use --query-field tuple")
    vec = vec if vec is not None else cdv_query_vectors(data, store)
    pid_of = {r: p for p, r in data.index.pid_rows().items()}

    def score(q: Query, rows: np.ndarray) -> np.ndarray:
        return store.passage_scores(vec.get(q.entity or ""), vec.get(q.aspect or ""), [pid_of[int(r)] for r in rows])

    return score


def boundary_eval(data: BenchmarkData, store, field: QueryField, config=None,
                  progress: Callable[[Sequence[Query]], Sequence[Query]] | None = None) -> dict[str, float]:
    """Character-overlap F1 of the top answer with the gold passage, over the rerank64 candidates: the top CDV
    passage as the index cut it (fixed) vs the free span grown around that passage's best sentence (free).
    A top answer from another document scores 0; with several gold passages the best-matching one counts."""
    from capr.cdv.spans import BoundaryConfig, char_f1, grow_span

    config = config or BoundaryConfig()
    pools = data.extra.get("pools") or rerank64_pools(data, field)
    vec = cdv_query_vectors(data, store)
    scorer = cdv_scorer(data, store, field, vec)
    rels = qrels_as_dict(data.qrels)
    index = data.index
    fixed_f1, free_f1, free_len, fixed_len = [], [], [], []
    for q in (progress(data.queries) if progress else data.queries):
        gold = [index.passage_by_pid(p) for p, g in rels.get(q.qid, {}).items() if g > 0 and p in store.row_of]
        if not gold:
            continue
        rows = pools[q.qid]
        top = index.passage(int(rows[int(np.argmax(scorer(q, rows)))]))
        fixed_f1.append(max((char_f1((top.start, top.end), (g.start, g.end)) for g in gold if g.doc_id == top.doc_id),
                            default=0.0))
        fixed_len.append(top.end - top.start)
        doc_id, j = store.pid_doc[top.pid]
        dv = store.docs[doc_id]
        comb = dv.scores(vec.get(q.entity or ""), vec.get(q.aspect or ""))["combined"]
        own = np.flatnonzero(dv.passage_of == j)
        sp = grow_span(comb, int(own[np.argmax(comb[own])]), config)
        a, b = int(dv.sent_start[sp.first]), int(dv.sent_end[sp.end - 1])
        free_f1.append(max((char_f1((a, b), (g.start, g.end)) for g in gold if g.doc_id == doc_id), default=0.0))
        free_len.append(b - a)
    return {"queries": len(fixed_f1), "fixed_F1": round(100 * float(np.mean(fixed_f1)), 2),
            "free_F1": round(100 * float(np.mean(free_f1)), 2),
            "fixed_chars": round(float(np.mean(fixed_len)), 1), "free_chars": round(float(np.mean(free_len)), 1),
            "theta_open": config.open, "theta_close": config.close, "relative": config.relative}

# ------------------------------------------------------------------------------ through an index backend
def benchmark_store(data: BenchmarkData, uri: str, collection: str, token: str | None = None, progress: Any = None,
                    **options: Any):
    """The benchmark's passages in a Milvus collection: the same documents, segmenter, analyzer and encoder
    as the benchmark's embedded index (so the same pids and vectors). Reused when it holds them already."""
    from capr.store.milvus_backend import MilvusStore

    m = data.index.manifest
    dense = EncoderConfig.from_dict(m["dense"]["encoder"]) if m.get("dense") else None
    want = {"analyzer": m["analyzer"], "segmenter": m["segmenter"], "bm25": m["bm25"],
            "dense": dense.to_dict() if dense else None}
    try:
        store = MilvusStore.open(uri, collection, token=token, **options)
        have = {"analyzer": store.meta["analyzer"], "segmenter": store.meta["segmenter"], "bm25": store.meta["bm25"],
                "dense": (store.meta.get("dense") or {}).get("encoder")}
        if have == want and store.counts()["passages"] == data.index.counts["passages"]:
            return store
        store.close()
    except CaprError as e:
        if "no capr collection" not in str(e):
            raise
    store = MilvusStore.create(uri, collection, token=token, segmenter=SegmenterConfig(**m["segmenter"]),
                               analyzer=AnalyzerConfig.from_dict(m["analyzer"]), dense=dense, **options)
    rows = data.index.pid_rows() if dense is not None else {}

    def own_vectors(passages: list) -> np.ndarray:
        # the embedded index's own vectors: both backends search the very same numbers
        r = np.asarray([rows[p.pid] for p in passages], dtype=np.int64)
        return data.index.row_vectors(r)

    store.add((data.index.document(d) for d in data.index.document_ids()), progress=progress,
              vectors_of=own_vectors if dense is not None else None)
    return store


def store_scorer(data: BenchmarkData, store: Any, retriever: Retriever, field: QueryField, template: str,
                 protocol: Protocol, fusion: FusionConfig | None = None) -> CandidateScorer:
    """The retriever's scores computed by another backend through the same Searcher: for a re-ranking pool,
    the backend's scores of the pool's passages; for ``full`` on a backend that only returns top lists, its
    top 1,000 (the rest never ranks)."""
    bench = BenchmarkSearcher(data, field, store)
    from capr.store.protocol import Capability

    if protocol is Protocol.rerank64 or Capability.exhaustive in store.capabilities:
        return bench.scorer(retriever, template, fusion or FusionConfig())
    vecs = bench.query_vectors(template) if retriever in (Retriever.dense, Retriever.hybrid) else {}
    row_of_key = {int(k): r for r, k in enumerate(bench.key_of_row)}

    def one(q: Query, rows: np.ndarray, r: Retriever) -> np.ndarray:
        pq = bench.parsed[q.qid]
        if r is Retriever.bm25:
            keys, vals = store.lexical_top(pq.terms, FULL_DEPTH, "", r)
            fill = 0.0
        else:
            keys, vals = store.dense_top(vecs[q.qid], FULL_DEPTH, "")
            fill = -np.inf  # cosines can be negative: passages outside the top list rank below all of them
        out = np.full(len(data.index), fill, dtype=np.float64)
        for key, v in zip(keys.tolist(), vals.tolist()):
            out[row_of_key[key]] = v
        return out[rows]

    def score(q: Query, rows: np.ndarray) -> np.ndarray:
        if retriever is Retriever.hybrid:
            return fuse_aligned([one(q, rows, Retriever.bm25), one(q, rows, Retriever.dense)], fusion)
        return one(q, rows, retriever)

    return score
