"""The benchmark corpus: passages and queries built from the real texts in the shared data folder (MedQuAD,
MTSamples, PubMedQA when present), topped up with synthetic passages of real sentences, cached under bench/out/ and
keyed to capr's reader and segmenter code (bench/README.md)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import DEFAULT_DATA, capr_fingerprint, log

CORPUS_VERSION = 1  # bump when the way passages or queries are built changes (invalidates caches)
FALLBACK_ASPECTS = ("symptoms", "causes", "treatment", "diagnosis", "prevention", "outlook")


def _sources(data_dir: Path) -> list[tuple[str, Path]]:
    out = [
        ("medquad", data_dir / "medquad" / "MedQuAD.tar.gz"),
        ("mtsamples", data_dir / "mtsamples" / "mtsamples.csv.gz"),
    ]
    missing = [str(p) for _, p in out if not p.is_file()]
    if missing:
        sys.exit(f"bench_bm25: data file(s) not found: {', '.join(missing)}\n"
                 f"  pass --data-dir pointing at the shared data folder (default {DEFAULT_DATA})")
    pubmedqa = data_dir / "pubmedqa_labeled_test" / "test_set.json.gz"
    if pubmedqa.is_file():
        out.append(("pubmedqa", pubmedqa))
    return out


def _read_pubmedqa(path: Path):
    """PubMedQA PQA-L abstracts as capr Documents (capr has no reader for this one JSON object):
    one document per PMID, one section per structured-abstract part (LABELS[i] / CONTEXTS[i])."""
    from capr.records import Document, Section

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    for pmid, rec in data.items():
        chunks, sections, pos = [], [], 0
        for label, ctx in zip(rec.get("LABELS") or [], rec.get("CONTEXTS") or []):
            ctx = (ctx or "").strip()
            if not ctx:
                continue
            if chunks:
                chunks.append("\n\n")
                pos += 2
            chunks.append(ctx)
            sections.append(Section(heading=label, aspect=(label or "").lower(), start=pos, end=pos + len(ctx)))
            pos += len(ctx)
        if sections:
            yield Document(doc_id=f"pubmedqa-{pmid}", title="", text="".join(chunks), sections=sections)


def _load_sources(data_dir: Path) -> dict[str, Any]:
    """Real passages (capr's segmenter, default settings), the sentence pool, and query pools."""
    from tqdm import tqdm

    from capr.corpus import ReadReport, read_documents
    from capr.corpus.segment import segment, split_sentences

    real: list[str] = []
    sentences: list[str] = []
    questions: list[str] = []
    entity_aspects: list[tuple[str, list[str]]] = []
    counts: dict[str, dict[str, int]] = {}
    for name, path in _sources(data_dir):
        report = ReadReport(skip_bad=True)
        docs = _read_pubmedqa(path) if name == "pubmedqa" else read_documents(path, report=report)
        n_docs = n_pass = n_sent = 0
        for doc in tqdm(docs, desc=f"reading {name}", unit=" docs", file=sys.stderr, mininterval=1.0):
            n_docs += 1
            passages = segment(doc)
            for p in passages:
                if p.text.strip():
                    real.append(p.text)
                    n_pass += 1
            for a, b in split_sentences(doc.text):
                s = " ".join(doc.text[a:b].split())
                if sum(c.isalnum() for c in s) >= 3:
                    sentences.append(s)
                    n_sent += 1
            if name == "medquad":
                questions.extend(s.heading for s in doc.sections or [] if s.heading.strip())
            if name in ("medquad", "mtsamples") and doc.title.strip():
                aspects = sorted({p.aspect for p in passages if p.aspect and p.aspect != "information"})
                entity_aspects.append((" ".join(doc.title.split()), aspects))
        counts[name] = {"documents": n_docs, "passages": n_pass, "sentences": n_sent, "skipped": len(report.skipped)}
        log(f"  {name}: {n_docs} documents, {n_pass} passages, {n_sent} sentences ({report.summary()})")
    return {"real": real, "sentences": sentences, "questions": list(dict.fromkeys(questions)),
            "entity_aspects": entity_aspects, "counts": counts}


def _build_passages(src: dict[str, Any], n: int, seed: int) -> list[str]:
    from tqdm import tqdm

    rng = random.Random(seed)
    real = src["real"]
    if n <= len(real):
        return [real[i] for i in sorted(rng.sample(range(len(real)), n))]
    out = list(real)
    pool = src["sentences"]
    for _ in tqdm(range(n - len(real)), desc="synthetic passages", unit=" passages", file=sys.stderr, mininterval=0.5):
        out.append(" ".join(rng.choices(pool, k=rng.randint(3, 8))))
    return out


def _build_queries(src: dict[str, Any], n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed + 1)
    n_q = (n + 1) // 2
    questions = rng.sample(src["questions"], min(n_q, len(src["questions"])))
    ea = []
    for title, aspects in rng.sample(src["entity_aspects"], min(n - len(questions), len(src["entity_aspects"]))):
        ea.append(f"{title} {rng.choice(aspects or FALLBACK_ASPECTS)}")
    queries = [{"kind": "question", "text": q} for q in questions] + [{"kind": "entity+aspect", "text": q} for q in ea]
    rng.shuffle(queries)  # so that any prefix (rank_bm25 times only the first few) mixes both kinds
    for i, q in enumerate(queries):
        q["qid"] = f"q{i}"
    return queries


def _read_cache(path: Path, meta: dict[str, Any]) -> tuple[list[Any] | None, dict[str, Any]]:
    """Records of a cache file whose first line (meta) matches; (None, {}) otherwise."""
    if not path.is_file():
        return None, {}
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            head = json.loads(fh.readline())
            if head.get("meta") != meta:
                return None, {}
            return [json.loads(line) for line in fh], head.get("info", {})
    except (OSError, ValueError, EOFError):
        return None, {}


def _write_cache(path: Path, meta: dict[str, Any], records: list[Any], info: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=5) as fh:
        fh.write(json.dumps({"meta": meta, "info": info}) + "\n")
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def prepare_data(args: argparse.Namespace) -> tuple[Path, Path, dict[str, Any]]:
    data_dir = Path(args.data_dir).resolve()
    if not data_dir.is_dir():
        sys.exit(f"bench_bm25: data directory {data_dir} not found.\n"
                 f"  It should hold medquad/MedQuAD.tar.gz and mtsamples/mtsamples.csv.gz; pass --data-dir.")
    _sources(data_dir)  # exits with a clear message if a required file is missing
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the corpus depends on capr's readers and segmenter: a change there rebuilds it
    base = {"version": CORPUS_VERSION, "seed": args.seed, "data_dir": str(data_dir),
            "capr_corpus_code": capr_fingerprint(("corpus",))}
    pmeta = {**base, "passages": args.passages}
    qmeta = {**base, "queries": args.queries}
    ppath = out / f"corpus_{args.passages}_seed{args.seed}.jsonl.gz"
    qpath = out / f"queries_{args.queries}_seed{args.seed}.jsonl.gz"
    info: dict[str, Any] = {"corpus_cache": str(ppath), "queries_cache": str(qpath)}
    passages, pinfo = (None, {}) if args.rebuild_corpus else _read_cache(ppath, pmeta)
    queries, _ = (None, {}) if args.rebuild_corpus else _read_cache(qpath, qmeta)
    if passages is not None and queries is not None:
        log(f"corpus: cached {ppath.name} ({len(passages):,} passages), {qpath.name} ({len(queries)} queries)")
        info["built_now"] = False
    else:
        t0 = time.perf_counter()
        log(f"building corpus from {data_dir} (seed {args.seed}) ...")
        src = _load_sources(data_dir)
        pinfo = {"sources": src["counts"], "real_passages_available": len(src["real"]),
                 "sentence_pool": len(src["sentences"])}
        if passages is None:
            passages = _build_passages(src, args.passages, args.seed)
            pinfo.update(real_passages=min(len(src["real"]), len(passages)),
                         synthetic_passages=max(0, len(passages) - len(src["real"])))
            _write_cache(ppath, pmeta, passages, pinfo)
        else:
            pinfo = _read_cache(ppath, pmeta)[1]
        if queries is None:
            queries = _build_queries(src, args.queries, args.seed)
            _write_cache(qpath, qmeta, queries, {})
        info.update(built_now=True, build_seconds=round(time.perf_counter() - t0, 1))
        log(f"corpus built in {info['build_seconds']} s: {len(passages):,} passages "
            f"({pinfo.get('real_passages', '?'):,} real, {pinfo.get('synthetic_passages', 0):,} synthetic "
            f"from a pool of {len(src['sentences']):,} sentences), {len(queries)} queries")
    info.update(pinfo)
    info.update(passages=len(passages), queries=len(queries),
                queries_by_kind={k: sum(q["kind"] == k for q in queries) for k in ("question", "entity+aspect")},
                mean_passage_words=round(sum(len(p.split()) for p in passages) / max(1, len(passages)), 1))
    return ppath, qpath, info
