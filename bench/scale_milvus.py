"""bench.scale's "past one machine" step: the generated notes encoded with Ray and served by a Milvus 2.3.5
standalone server (as the tests start it), against capr's embedded index with the same static vectors.

    python -m bench.scale_milvus NOTES.jsonl QUERIES.jsonl --result OUT.json --tmp DIR [--ray-actors 2]

1. Encoding (static model2vec, 256-d): the passages as capr cuts them, once in this process (`embed_texts`,
   LocalRunner; this also fills a private embedding cache) and once on a local Ray cluster (`RayRunner`, an actor
   pool, the cluster's start timed apart); the two must give the same vectors.
2. Ingest: the embedded index (`IndexWriter(hnsw_threshold=0)`: exact dense search, the vectors read back from the
   embedding cache) and Milvus (`store.add(docs, vectors_of=<the Ray vectors>)`, FLAT, 500-row inserts).
3. Queries, one at a time, top 10, dense (Milvus 2.3.5 has no BM25): free text and ⟨entity, aspect⟩, each alone
   and scoped to one patient; on each store the engine's own dense top 10 of the same query vector
   (`store.dense_top`, the patient filter compiled by the store) and capr's whole pipeline (`search`, retriever
   dense, entity scope "passage", Milvus' only one). Reported: the share of queries whose top 10 is the same list
   on both, as a set, the mean overlap, and p50/p95 latency.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import latency_stats, log, rss
from bench.scale_run import worker_main

MILVUS_PYTHON = Path("/work/main/.venv-milvus/bin/python")


def private_cache(tmp: Path) -> None:
    """A fresh CAPR_CACHE whose models/ is the shared one: no run is served embeddings cached by an earlier one."""
    from capr.models.encoder import cache_root

    shared = cache_root() / "models"
    cache = tmp / "capr-cache"
    cache.mkdir(parents=True, exist_ok=True)
    if shared.is_dir() and not (cache / "models").exists():
        (cache / "models").symlink_to(shared)
    os.environ["CAPR_CACHE"] = str(cache)


def passages_and_texts(notes: Path) -> tuple[list[Any], list[Any], list[str]]:
    from capr.corpus import read_documents
    from capr.corpus.segment import SegmenterConfig, segment
    from capr.index.segment import passage_index_text
    from capr.models.encoder import Encoder, EncoderConfig

    seg = SegmenterConfig()
    docs = list(read_documents(notes, "jsonl"))
    passages = [p for d in docs for p in segment(d, seg)]
    enc = Encoder(EncoderConfig(backend="static"), cache=False)
    texts = [enc.passage_text(p, passage_index_text(p, seg.include_title)) for p in passages]
    return docs, passages, texts


def encode(texts: list[str], actors: int) -> tuple[dict[str, Any], Any]:
    import numpy as np

    from capr.eval.batch import RayRunner, embed_texts
    from capr.models.encoder import EncoderConfig

    enc = EncoderConfig(backend="static")
    res: dict[str, Any] = {"passages": len(texts)}
    t0 = time.perf_counter()
    local = embed_texts(texts, enc, cache=True)
    res["local_s"] = round(time.perf_counter() - t0, 2)
    env = {k: v for k, v in os.environ.items() if k in ("CAPR_CACHE", "HF_HUB_OFFLINE", "PYTHONPATH", "OMP_NUM_THREADS")}
    runner = RayRunner(address="local", actors=actors, init_kwargs=dict(
        num_cpus=actors, include_dashboard=False, log_to_driver=False, configure_logging=False,
        runtime_env={"env_vars": env}))
    t0 = time.perf_counter()
    embed_texts(texts[:actors * 256], enc, runner=runner, cache=False)  # starts the cluster and the actors' models
    res["ray_start_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    ray_vecs = embed_texts(texts, enc, runner=runner, cache=False)
    res["ray_s"] = round(time.perf_counter() - t0, 2)
    res["ray_actors"] = actors
    res["max_abs_diff_ray_vs_local"] = float(np.max(np.abs(ray_vecs - local))) if len(texts) else 0.0
    import ray

    ray.shutdown()
    return res, ray_vecs


def ingest(docs: list[Any], passages: list[Any], vectors: Any, tmp: Path) -> tuple[dict[str, Any], Any, Any, Any]:
    from capr import load_index
    from capr.corpus.segment import SegmenterConfig
    from capr.index import IndexWriter
    from capr.models.encoder import EncoderConfig
    from capr.store import as_store, create_store
    from capr.store.local_servers import milvus_python, start_server

    enc, seg = EncoderConfig(backend="static"), SegmenterConfig()
    res: dict[str, Any] = {}
    t0 = time.perf_counter()
    with IndexWriter(tmp / "embedded", segmenter=seg, dense=enc, hnsw_threshold=0) as w:
        for d in docs:
            w.add(d)
    res["embedded_ingest_s"] = round(time.perf_counter() - t0, 2)
    embedded = as_store(load_index(tmp / "embedded"))
    py = milvus_python() or MILVUS_PYTHON
    t0 = time.perf_counter()
    server = start_server("standalone", tmp / "milvus", python=py, timeout=300)
    res["milvus_start_s"] = round(time.perf_counter() - t0, 2)
    by_pid = {p.pid: i for i, p in enumerate(passages)}
    t0 = time.perf_counter()
    milvus = create_store("scale_bench", "milvus", uri=server.uri, segmenter=seg, dense=enc)
    n = milvus.add(docs, vectors_of=lambda ps: vectors[[by_pid[p.pid] for p in ps]])
    counted = milvus.counts()["passages"]  # Strong consistency: waits until every insert is visible
    res["milvus_ingest_s"] = round(time.perf_counter() - t0, 2)
    res.update(passages=len(passages), milvus_passages=counted, milvus_added=n, milvus_rss_mb=server_rss_mb(server))
    return res, embedded, milvus, server


def server_rss_mb(server: Any) -> float:
    """The Milvus server's resident memory, its child processes included."""
    import psutil

    try:
        p = psutil.Process(server.proc.pid)
        return round(sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20)
    except psutil.Error:
        return float("nan")


def _agreement(a: list[list[str]], b: list[list[str]]) -> dict[str, float]:
    pairs = list(zip(a, b))
    return {"same_top10": round(sum(x == y for x, y in pairs) / len(pairs), 4),
            "same_top10_set": round(sum(set(x) == set(y) for x, y in pairs) / len(pairs), 4),
            "mean_overlap": round(sum(len(set(x) & set(y)) / max(1, len(x)) for x, y in pairs) / len(pairs), 4)}


def _timed(fn: Any, items: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    fn(items[0])  # warm-up
    out, lat = [], []
    for item in items:
        t0 = time.perf_counter()
        out.append(fn(item))
        lat.append(time.perf_counter() - t0)
    return out, latency_stats(lat)


def _has_passages(store: Any, filters: dict[str, Any] | None) -> bool:
    """Whether any passage passes ``filters`` (the generator draws patients at random: a few have no note)."""
    from capr.errors import QueryError

    if not filters:
        return True
    try:
        store.compile_filter(filters)
    except QueryError:
        return False
    return True


def compare(embedded: Any, milvus: Any, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per query kind: the engines' own dense top 10 (`store.dense_top` of the same query vector, the filter
    compiled by each store) and capr's whole pipeline on each store (`search`, retriever dense)."""
    import numpy as np

    from capr import Query
    from capr.search import EntityScope, search

    qvecs = embedded.encoder().encode_queries([q.get("text") or f"{q['entity']} {q['aspect']}" for q in queries])
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(q["kind"] for q in queries):
        items = [(Query(f"q{i}", text=q.get("text") or "", entity=q.get("entity"), aspect=q.get("aspect")),
                  q.get("filters") or None, np.asarray(qvecs[i], dtype=np.float32))
                 for i, q in enumerate(queries) if q["kind"] == kind]
        row: dict[str, Any] = {}
        tops: dict[str, dict[str, list[list[str]]]] = {}
        for name, store in (("embedded", embedded), ("milvus", milvus)):
            none = None if name == "embedded" else ""

            def engine(item: Any, store: Any = store, none: Any = none) -> list[str]:
                keys, _ = store.dense_top(item[2], 10, store.compile_filter(item[1]) if item[1] else none)
                return [p.pid for p in store.passages(keys)]

            def pipeline(item: Any, store: Any = store) -> list[str]:
                return [h.pid for h in search(store, item[0], k=10, retriever="dense", filters=item[1],
                                              entity_scope=EntityScope.passage, highlights=False)]

            e_top, row[f"{name}_engine"] = _timed(engine, items)
            p_top, row[f"{name}_pipeline"] = _timed(pipeline, items)
            tops[name] = {"engine": e_top, "pipeline": p_top}
        row["engine_agreement"] = _agreement(tops["embedded"]["engine"], tops["milvus"]["engine"])
        row["pipeline_agreement"] = _agreement(tops["embedded"]["pipeline"], tops["milvus"]["pipeline"])
        out[kind] = row
        log(f"[milvus] {kind}: {json.dumps(row)}")
    return out


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tmp", type=Path, required=True)
    ap.add_argument("--queries", dest="n_queries", type=int, default=100)
    ap.add_argument("--ray-actors", type=int, default=2)


def run(args: argparse.Namespace, queries: list[dict[str, Any]]) -> dict[str, Any]:
    shutil.rmtree(args.tmp, ignore_errors=True)
    args.tmp.mkdir(parents=True)
    private_cache(args.tmp)
    server = None
    try:
        t0 = time.perf_counter()
        docs, passages, texts = passages_and_texts(args.notes)
        res: dict[str, Any] = {"read_and_segment_s": round(time.perf_counter() - t0, 2)}
        log(f"[milvus] {len(docs):,} notes, {len(passages):,} passages; encoding ...")
        res["encode"], vectors = encode(texts, args.ray_actors)
        log(f"[milvus] {json.dumps(res['encode'])}; ingesting ...")
        res["ingest"], embedded, milvus, server = ingest(docs, passages, vectors, args.tmp)
        log(f"[milvus] {json.dumps(res['ingest'])}")
        asked = queries[: 4 * args.n_queries]
        kept = [q for q in asked if _has_passages(embedded, q.get("filters"))]
        res["queries_without_passages"] = len(asked) - len(kept)  # a generated patient may have no note
        res["queries"] = compare(embedded, milvus, kept)
        res["milvus_rss_after_queries_mb"] = server_rss_mb(server)
        res["rss_after_queries_mb"] = round(rss() / 2**20)  # this process: the embedded index, both clients
        milvus.close()
        return res
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(args.tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    return worker_main(__doc__, argv, _arguments, run)


if __name__ == "__main__":
    raise SystemExit(main())
