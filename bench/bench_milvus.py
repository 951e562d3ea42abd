#!/usr/bin/env python3
"""Index backends at scale: ingest throughput and query latency, capr's embedded index vs a Milvus 2.3.5
standalone server on loopback (and, with --lite, a Milvus Lite 2.5.1 server for BM25 on Milvus).

    .venv/bin/python -m bench.bench_milvus                       # 200,000 passages, 200 queries
    .venv/bin/python -m bench.bench_milvus --passages 20000      # quicker

Corpus and queries: the cached files of bench_bm25.py (bench/out/corpus_N_seed0.jsonl.gz, built from
../shared/data by `bench/bench_bm25.py --passages N` when missing). Each passage is one document with one
section, so every system holds exactly N passages. Vectors: the `static` encoder (model2vec distilled from
MiniLM, 256-d), encoded once before timing into capr's embedding cache; both backends then read them from
that cache, so "ingest" measures writing passages + vectors (+ capr's analysis), not encoding.
Milvus: FLAT index (exact, same results as the embedded index), Strong consistency, 500-row inserts.
Latency: one query at a time, top 10, after 5 warm-up queries; the wall clock of the client call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DEFAULT_OUT as OUT, read_jsonl_gz

os.environ.setdefault("CAPR_CACHE", str(OUT / "capr_cache"))  # the static model is distilled there once

from capr.corpus.segment import SegmenterConfig  # noqa: E402
from capr.models.encoder import Encoder, EncoderConfig  # noqa: E402
from capr.records import Document, Query, Section  # noqa: E402
from capr.search import search  # noqa: E402
from capr.store import create_store  # noqa: E402
from capr.store.local_servers import start_server  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def read_cache(path: Path) -> list:
    if not path.is_file():
        sys.exit(f"{path} not found: build it with `.venv/bin/python -m bench.bench_bm25 --passages N` first")
    return read_jsonl_gz(path)


def documents(passages: list[str]) -> list[Document]:
    return [Document(doc_id=f"d{i}", title="", text=t, sections=[Section("", None, 0, len(t))])
            for i, t in enumerate(passages)]


def latency(fn, queries: list[Query]) -> dict:
    for q in queries[:5]:
        fn(q)
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        lat.append((time.perf_counter() - t0) * 1e3)
    lat.sort()
    return {"p50_ms": round(statistics.median(lat), 2), "p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 2),
            "qps": round(1e3 * len(lat) / sum(lat), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--lite", action="store_true", help="also a Milvus Lite 2.5.1 server (BM25 on Milvus)")
    ap.add_argument("--tmp-dir", default=None)
    args = ap.parse_args()

    corpus = OUT / f"corpus_{200_000 if args.passages <= 200_000 else args.passages}_seed0.jsonl.gz"
    passages = read_cache(corpus)[: args.passages]
    queries = [Query(q["qid"], text=q["text"]) for q in read_cache(OUT / "queries_500_seed0.jsonl.gz")][: args.queries]
    docs = documents(passages)
    enc = EncoderConfig(backend="static")
    segmenter = SegmenterConfig(max_tokens=0, include_title=False)
    t0 = time.perf_counter()
    Encoder(enc).encode_passages(passages)  # into the embedding cache: not part of any system's ingest time
    log(f"{len(passages):,} passages, {len(queries)} queries; vectors encoded/cached in {time.perf_counter() - t0:.1f} s")

    tmp = Path(tempfile.mkdtemp(prefix="capr-bench-milvus-", dir=args.tmp_dir))
    results: dict[str, dict] = {}
    servers = []
    try:
        systems = [("embedded", None), ("milvus 2.3.5 standalone", "standalone")]
        if args.lite:
            systems.append(("milvus-lite 2.5.1 server", "lite"))
        for label, kind in systems:
            uri = None
            if kind:
                t0 = time.perf_counter()
                srv = start_server(kind, tmp / kind)
                servers.append(srv)
                uri = srv.uri
                log(f"{label} up at {uri} in {time.perf_counter() - t0:.1f} s")
            t0 = time.perf_counter()
            if kind:
                store = create_store("bench", "milvus", uri=uri, segmenter=segmenter, dense=enc)
            else:
                store = create_store(tmp / "embedded", segmenter=segmenter, dense=enc)
            n = store.add(docs)
            if kind:  # Strong consistency: the count waits until every insert is visible
                assert store.counts()["passages"] == n
            ingest = time.perf_counter() - t0
            r = {"passages": n, "ingest_s": round(ingest, 1), "passages_per_s": round(n / ingest)}
            log(f"{label}: ingested {n:,} passages in {ingest:.1f} s")
            r["dense"] = latency(lambda q: search(store, q, k=10, retriever="dense", aspect_boost=0, highlights=False), queries)
            if getattr(store, "has_lexical", True):
                r["bm25"] = latency(lambda q: search(store, q, k=10, retriever="bm25", aspect_boost=0, highlights=False), queries)
                r["hybrid"] = latency(lambda q: search(store, q, k=10, retriever="hybrid", aspect_boost=0, highlights=False), queries)
            results[label] = r
            log(f"{label}: {json.dumps(r)}")
            store.close()
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    load = os.getloadavg()
    lines = [f"bench_milvus: {len(passages):,} passages, {len(queries)} free-text queries, top 10, static 256-d vectors, "
             f"Milvus FLAT (exact), embedded faiss HNSW (its default at >= 50k passages); {os.cpu_count()} CPUs; "
             f"load average at the end {load[0]:.1f}",
             "", "| system | ingest s | passages/s | dense p50 ms | dense p95 ms | bm25 p50 ms | bm25 p95 ms | hybrid p50 ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r in results.items():
        def cell(ret: str, key: str) -> str:
            return str(r[ret][key]) if ret in r else "n/a"
        lines.append(f"| {label} | {r['ingest_s']} | {r['passages_per_s']:,} | {cell('dense', 'p50_ms')} | "
                     f"{cell('dense', 'p95_ms')} | {cell('bm25', 'p50_ms')} | {cell('bm25', 'p95_ms')} | {cell('hybrid', 'p50_ms')} |")
    print("\n".join(lines))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"milvus_{len(passages)}.json").write_text(json.dumps({"results": results, "table": lines,
                                                                 "date": time.strftime("%Y-%m-%d %H:%M")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
