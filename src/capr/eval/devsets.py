"""Dev sets for choosing settings (fusion weights, the query template, the aspect prior, document aggregation):
built from MedQuAD documents that are *not* in the medquad-cdv test split (nor share a test document's focus
entity), so no choice made on them has seen a test query.

- ``medquad-dev``: medquad-cdv's protocol on other documents — one passage per answer, ⟨focus, question type⟩
  tuples and the MedQuAD questions as queries, the answer (and verbatim copies of it) as gold.
- ``medquad-docs-dev``: free-text questions over whole answers — each answer is a document without a title, cut
  into passages as ``capr index`` cuts any document; gold is the answer document. Ranked at the document level
  (``group_by=doc``), next to bm25s over whole documents.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import numpy as np

from capr.corpus import Format, read_documents
from capr.corpus.segment import SegmenterConfig
from capr.errors import CaprError
from capr.index import AnalyzerConfig
from capr.models.encoder import EncoderConfig
from capr.records import Document, Qrel, Query, Section

DEV_SALT = "capr-medquad-dev-v1"
DEV_DOCUMENTS = 400  # MedQuAD documents in the dev sample (≈1,900 answers)
DEV_QUERIES = 1500


def _dev_rank(doc_id: str) -> float:
    h = int.from_bytes(hashlib.sha1(f"{DEV_SALT}:{doc_id}".encode()).digest()[:8], "big")
    return h / 2**64


def medquad_dev_documents(data_dir: str | Path, n_documents: int = DEV_DOCUMENTS) -> list[Document]:
    """A fixed sample (salted hash of the id, so it never changes) of MedQuAD documents with answers, outside the
    medquad-cdv test split and its focus entities."""
    from capr.corpus.report import ReadReport
    from capr.labels.splits import exclude_test_documents, medquad_test_exclusion

    src = Path(data_dir) / "medquad" / "MedQuAD.tar.gz"
    if not src.exists():
        raise CaprError(f"{src}: MedQuAD not found")
    exclusion = medquad_test_exclusion(data_dir)
    docs = [d for d in exclude_test_documents(read_documents(src, Format.medquad, ReadReport(skip_bad=True)), exclusion,
                                              strict=True)
            if d.sections and not any(exclusion.is_test_text(d.text[s.start:s.end]) for s in d.sections)]
    docs = list({d.doc_id: d for d in docs}.values())
    docs.sort(key=lambda d: _dev_rank(d.doc_id))
    return docs[:n_documents]


def _answers(docs: list[Document]) -> list[tuple[Document, Section, str]]:
    from capr.labels.splits import text_key

    out = []
    for d in docs:
        for s in d.sections or []:
            out.append((d, s, text_key(d.text[s.start:s.end])))
    return out


def load_medquad_dev(data_dir: str | Path, index_dir: str | Path, analyzer: AnalyzerConfig | None = None,
                     dense: EncoderConfig | None = None, progress: Any = None, n_queries: int = DEV_QUERIES,
                     seed: int = 20261123):
    """medquad-cdv's protocol on dev documents: passages are the answers (passage text only, as medquad-cdv);
    a query per ⟨document, question type⟩ that has one answer; gold = that answer and its verbatim copies."""
    from capr.eval.benchmarks import BenchmarkData, _benchmark_index
    from capr.labels.splits import text_key

    docs = medquad_dev_documents(data_dir)
    index = _benchmark_index(index_dir, lambda: docs, analyzer, dense, SegmenterConfig(max_tokens=0, include_title=False),
                             progress)
    rows_of = index.pid_rows()
    answers = _answers(docs)
    same_text: dict[str, list[str]] = {}
    for _, s, key in answers:
        same_text.setdefault(key, []).append(s.section_id)
    queries, qrels = [], []
    for d in docs:
        by_aspect: dict[str, list[Section]] = {}
        for s in d.sections or []:
            by_aspect.setdefault(s.aspect, []).append(s)
        for aspect, secs in by_aspect.items():
            s = secs[0]
            if len(secs) != 1 or s.section_id not in rows_of or not s.heading:
                continue
            qid = f"medquad-dev-q{len(queries)}"
            queries.append(Query(qid, text=s.heading, entity=d.metadata.get("focus") or d.title, aspect=aspect))
            gold = [p for p in same_text[text_key(d.text[s.start:s.end])] if p in rows_of]
            qrels.extend(Qrel(qid, p, 1) for p in dict.fromkeys(gold))
    rng = random.Random(seed)
    if len(queries) > n_queries:
        keep = set(q.qid for q in rng.sample(queries, n_queries))
        queries = [q for q in queries if q.qid in keep]
        qrels = [r for r in qrels if r.qid in keep]
    return BenchmarkData("medquad-dev", index, queries, qrels, {"documents": len(docs)})


def load_medquad_docs_dev(data_dir: str | Path, index_dir: str | Path, analyzer: AnalyzerConfig | None = None,
                          dense: EncoderConfig | None = None, progress: Any = None, n_queries: int = DEV_QUERIES,
                          seed: int = 20261123):
    """Free text over whole documents: every dev answer is a document without a title, segmented as `capr index`
    segments (≤ 200-word passages); queries are the MedQuAD questions; gold = the answer document(s) with that
    text. ``extra["documents"]`` keeps the whole documents (for bm25s over whole documents)."""
    from capr.eval.benchmarks import BenchmarkData, _benchmark_index

    docs = medquad_dev_documents(data_dir)
    answers = _answers(docs)
    whole: dict[str, Document] = {}
    first_of: dict[str, str] = {}
    for d, s, key in answers:
        if key in first_of:
            continue  # a verbatim copy: one document per distinct answer
        first_of[key] = s.section_id
        whole[s.section_id] = Document(doc_id=s.section_id, title="", text=d.text[s.start:s.end])
    index = _benchmark_index(index_dir, lambda: list(whole.values()), analyzer, dense, SegmenterConfig(include_title=False),
                             progress)
    queries, qrels, seen = [], [], set()
    for d, s, key in answers:
        if not s.heading or s.heading in seen:
            continue
        seen.add(s.heading)
        qid = f"medquad-docs-dev-q{len(queries)}"
        queries.append(Query(qid, text=s.heading))
        qrels.append(Qrel(qid, first_of[key], 1))
    rng = random.Random(seed)
    if len(queries) > n_queries:
        keep = set(q.qid for q in rng.sample(queries, n_queries))
        queries = [q for q in queries if q.qid in keep]
        qrels = [r for r in qrels if r.qid in keep]
    return BenchmarkData("medquad-docs-dev", index, queries, qrels,
                         {"documents": list(whole.values()), "document_level": True})


def document_run(hits_by_query: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """qid → ranked document ids as the {doc: score} run evaluate() reads."""
    return {qid: {d: float(len(docs) - i) for i, d in enumerate(docs)} for qid, docs in hits_by_query.items()}


def bm25s_whole_documents(documents: list[Document], queries: list[Query], k: int = 100) -> dict[str, list[str]]:
    """bm25s over whole documents (English stopwords, Snowball stemmer): the whole-document baseline."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    corpus = [f"{d.title} {d.text}".strip() for d in documents]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize([q.text or "" for q in queries], stopwords="en", stemmer=stemmer, show_progress=False)
    ids, _ = retriever.retrieve(tokens, k=min(k, len(documents)), show_progress=False)
    return {q.qid: [documents[int(i)].doc_id for i in row] for q, row in zip(queries, np.asarray(ids))}


__all__ = ["bm25s_whole_documents", "document_run", "load_medquad_dev", "load_medquad_docs_dev", "medquad_dev_documents"]
