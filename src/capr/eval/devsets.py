"""Dev sets for choosing settings (fusion weights, the query template, the aspect prior, document aggregation):
built from MedQuAD documents that are *not* in the medquad-cdv test split (nor share a test document's focus
entity), so no choice made on them has seen a test query.

- ``medquad-dev``: medquad-cdv's protocol on other documents — one passage per answer, ⟨focus, question type⟩
  tuples and the MedQuAD questions as queries, the answer (and verbatim copies of it) as gold.
- ``consumer-dev``: real consumer health questions (the RQE AMIA 2016 and MEDIQA 2019 RQE test pairs marked
  "entailed") over whole MedQuAD answers without titles: an FAQ such as "How is lupus treated?" names the
  ⟨entity, question type⟩ whose MedQuAD answers are gold; the dev sample's answers are the distractors.
  ``consumer-dev-titled`` gives every answer its document's focus as title.
- ``medquad-docs-dev``: free-text questions over whole answers — each answer is a document without a title, cut
  into passages as ``capr index`` cuts any document; gold is the answer document. Ranked at the document level
  (``group_by=doc``), next to bm25s over whole documents.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from capr.corpus import Format, read_documents
from capr.corpus.segment import SegmenterConfig
from capr.index import AnalyzerConfig
from capr.labels.questions import RQE_FILES, consumer_questions, faq_targets, target_names
from capr.labels.splits import DEV_DOCUMENTS, medquad_dev_documents
from capr.models.encoder import EncoderConfig
from capr.records import Document, Qrel, Query, Section

DEV_QUERIES = 1500


def _answers(docs: list[Document]) -> list[tuple[Document, Section, str]]:
    from capr.labels.splits import text_key

    out = []
    for d in docs:
        for s in d.sections or []:
            out.append((d, s, text_key(d.text[s.start:s.end])))
    return out


def load_medquad_dev(data_dir: str | Path, index_dir: str | Path, analyzer: AnalyzerConfig | None = None,
                     dense: EncoderConfig | None = None, progress: Any = None, n_queries: int = DEV_QUERIES,
                     seed: int = 20261123, titled: bool = False):
    """medquad-cdv's protocol on dev documents: passages are the answers (passage text only, as medquad-cdv, or
    with the title in front when ``titled``); a query per ⟨document, question type⟩ that has one answer; gold =
    that answer and its verbatim copies."""
    from capr.eval.benchmarks import BenchmarkData, _benchmark_index, untitled_pool_index
    from capr.labels.splits import text_key

    docs = medquad_dev_documents(data_dir)
    segmenter = SegmenterConfig(max_tokens=0, include_title=titled)
    index = _benchmark_index(index_dir, lambda: docs, analyzer, dense, segmenter, progress)
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
    extra: dict[str, Any] = {"documents": len(docs)}
    if titled:
        extra["pool_index"] = untitled_pool_index(index_dir, lambda: docs, analyzer, segmenter)
    return BenchmarkData("medquad-dev", index, queries, qrels, extra)


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


def load_consumer_dev(data_dir: str | Path, index_dir: str | Path, analyzer: AnalyzerConfig | None = None,
                      dense: EncoderConfig | None = None, progress: Any = None, titled: bool = False,
                      sections: bool = False):
    """Consumer questions over whole MedQuAD answers (documents; ranked and judged at the document level). Gold
    answers come from any MedQuAD document outside the medquad-cdv test split whose focus is the FAQ's entity and
    whose question type is the FAQ's; distractors are the dev sample's answers. ``sections``: the answers stay in
    their MedQuAD documents (titled with the focus, one section per answer, headed by its question, as a health
    article has headings); each answer is still judged on its own (a passage counts for its section's answer)."""
    from capr.corpus.report import ReadReport
    from capr.eval.beir import BEIR_METRICS
    from capr.eval.benchmarks import BenchmarkData, _benchmark_index, document_of_rows
    from capr.labels.gazetteer import normalize_name
    from capr.labels.splits import exclude_test_documents, medquad_test_exclusion, text_key

    exclusion = medquad_test_exclusion(data_dir)
    src = Path(data_dir) / "medquad" / "MedQuAD.tar.gz"
    docs = [d for d in exclude_test_documents(read_documents(src, Format.medquad, ReadReport(skip_bad=True)), exclusion)
            if d.sections]
    by_target: dict[tuple[str, str], list[tuple[Document, Section]]] = {}
    for d in docs:
        focus = normalize_name(d.metadata.get("focus") or d.title)
        for s in d.sections or []:
            by_target.setdefault((focus, s.aspect), []).append((d, s))
    whole: dict[str, Document] = {}
    first_of: dict[str, str] = {}
    answer_of: dict[str, str] = {}  # sections: each section's answer (its text's first section)

    def add(d: Document, s: Section) -> str:
        key = text_key(d.text[s.start:s.end])
        if key not in first_of:  # one document per distinct answer text
            first_of[key] = s.section_id
            if not sections:
                whole[s.section_id] = Document(doc_id=s.section_id, text=d.text[s.start:s.end],
                                               title=(d.metadata.get("focus") or d.title) if titled else "")
        if sections and d.doc_id not in whole:
            whole[d.doc_id] = d
            for other in d.sections or []:
                answer_of[other.section_id] = first_of.setdefault(text_key(d.text[other.start:other.end]), other.section_id)
        return first_of[key]

    queries, qrels = [], []
    for chq, faq in consumer_questions(data_dir):
        gold: set[str] = set()
        for entity, aspect in faq_targets(faq):
            for name in target_names(entity):
                found = by_target.get((normalize_name(name), aspect))
                if found:
                    gold.update(add(d, s) for d, s in found)
                    break
        if gold and chq not in {q.text for q in queries}:
            qid = f"consumer-dev-q{len(queries)}"
            queries.append(Query(qid, text=chq))
            qrels.extend(Qrel(qid, g, 1) for g in sorted(gold))
    for d, s, _ in _answers(medquad_dev_documents(data_dir)):
        add(d, s)
    index = _benchmark_index(index_dir, lambda: list(whole.values()), analyzer, dense, SegmenterConfig(include_title=titled),
                             progress)
    judged = document_of_rows(index)
    if sections:  # a passage is judged as its section's answer
        judged = [answer_of.get(index.passage(row).pid.split("#p")[0], "") for row in range(len(index))]
    name = "consumer-dev-sections" if sections else "consumer-dev-titled" if titled else "consumer-dev"
    return BenchmarkData(name, index, queries, qrels, {"documents": list(whole.values()), "document_level": True,
                                                       "document_of_row": judged, "metrics": BEIR_METRICS})


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


__all__ = ["DEV_DOCUMENTS", "RQE_FILES", "bm25s_whole_documents", "consumer_questions", "document_run", "faq_targets", "load_consumer_dev", "load_medquad_dev", "load_medquad_docs_dev", "medquad_dev_documents"]
