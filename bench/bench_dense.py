#!/usr/bin/env python3
"""Dense retrieval benchmark: encoder throughput per backend (Part A) and capr's dense and hybrid
query latency at scale against raw faiss and bm25s references (Part B).

    .venv/bin/python -m bench.bench_dense                              # Part A + Part B at 200,000 passages
    .venv/bin/python -m bench.bench_dense --passages 5000 --queries 50 # quick check
    .venv/bin/python -m bench.bench_dense --skip-b                     # encoders only

Part A encodes the first 2,000 passages of ../shared/data/medquad_cdv_test/passages.jsonl.gz with
every encoder backend (torch fp32, onnx fp32, onnx-int8, static) and compares speed and vectors with
torch fp32. Part B builds a capr index with static-model vectors on the cached corpus of bench_bm25.py
and times bm25, dense and hybrid queries one at a time, next to faiss HNSW / flat search on the same
vectors and bm25s. Each measured system runs in its own child process (same interpreter).
Models are exported / distilled once into bench/out/capr_cache (CAPR_CACHE); those one-time costs
are reported separately. See bench/README.md for what exactly is measured.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench import common
from bench.bench_bm25 import run_bm25s
from bench.common import DEFAULT_DATA, DEFAULT_OUT, log
from bench.corpus import prepare_data

K = 10
BACKENDS = ("torch", "onnx", "onnx-int8", "static")
BACKEND_LABEL = {"torch": "torch fp32", "onnx": "onnx fp32", "onnx-int8": "onnx-int8", "static": "static (model2vec)"}
RETRIEVERS = ("bm25", "dense", "hybrid")
SHORT_QUERY = "symptoms of type 2 diabetes"
BUSY_PATTERN = "capr eval|pytest"  # other benchmark-disturbing work on this machine
HYBRID_GOAL_MS = 20.0
from capr.index.vectors import HNSW_EF_CONSTRUCTION as FAISS_EF_CONSTRUCTION, HNSW_EF_SEARCH as FAISS_EF_SEARCH, HNSW_M as FAISS_M  # noqa: E402  same settings as capr
WORKERS = ("encode", "prepare-static", "capr", "faiss", "bm25s")
TIMED = {"wall_s": 0.0, "other_cpu_s": 0.0}  # summed over the child processes (waits for a quiet machine excluded)



# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def corpus_id(pid: str) -> int:
    """Row of the passage in the cached corpus: documents are added as "p<i>" (one passage each)."""
    return int(pid.split("#", 1)[0][1:])


def read_a_texts(path: Path, n: int) -> list[str]:
    """The first ``n`` passage texts of a gzip JSONL file with a "text" field."""
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if len(out) >= n:
                break
            t = json.loads(line).get("text") or ""
            if t.strip():
                out.append(t)
    return out


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()


class Ticker:
    """An elapsed-seconds bar for a step that reports no progress of its own (faiss HNSW build)."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self._stop = threading.Event()

    def _run(self) -> None:
        from tqdm import tqdm

        with tqdm(desc=self.desc, unit=" s", file=sys.stderr, bar_format="{desc}: {n} s elapsed") as bar:
            while not self._stop.wait(1.0):
                bar.update(1)

    def __enter__(self) -> "Ticker":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _thread_info() -> dict[str, Any]:
    info: dict[str, Any] = {}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except Exception:  # noqa: BLE001
        pass
    try:
        import faiss

        info["faiss_omp_threads"] = faiss.omp_get_max_threads()
    except Exception:  # noqa: BLE001
        pass
    return info


# ---------------------------------------------------------------------------------------------
# Part A: encoder throughput (child process per backend)
# ---------------------------------------------------------------------------------------------
def run_encode(backend: str, texts: list[str], out_npy: Path, query_reps: int) -> dict[str, Any]:
    import numpy as np
    from tqdm import tqdm

    from capr.models import Encoder, EncoderConfig

    models_dir = Path(os.environ["CAPR_CACHE"]) / "models"
    before = _files(models_dir)
    rss0 = common.rss()
    t0 = time.perf_counter()
    enc = Encoder(EncoderConfig(backend=backend), cache=False)
    enc.encode_queries(["warm up"])  # loads the model; the first time also exports / quantizes / distils it
    first_load = time.perf_counter() - t0
    created = sorted(_files(models_dir) - before)
    res: dict[str, Any] = {"backend": backend, "first_load_s": first_load, "created_files": created,
                           "model_rss_mb": (common.rss() - rss0) / 2**20, "batch_size": enc.config.batch_size,
                           "max_length": enc.config.max_length, **_thread_info()}
    log(f"[{backend}] model ready in {first_load:.1f} s" + (f" (created {len(created)} file(s) in the model cache)" if created else ""))

    t0 = time.perf_counter()
    enc.encode_passages(texts[: enc.config.batch_size])  # warm-up batch
    res["warmup_batch_s"] = time.perf_counter() - t0
    with tqdm(total=len(texts), desc=f"[{backend}] encoding", unit=" passages", file=sys.stderr, mininterval=0.5) as bar:
        t0 = time.perf_counter()
        vecs = enc.encode_passages(texts, progress=bar.update)
        secs = time.perf_counter() - t0
    np.save(out_npy, vecs)
    res.update(passages=len(texts), encode_s=secs, passages_per_s=len(texts) / secs, dim=int(vecs.shape[1]))

    for _ in range(3):
        enc.encode_queries([SHORT_QUERY])
    lat = []
    for _ in range(query_reps):
        t0 = time.perf_counter()
        enc.encode_queries([SHORT_QUERY])
        lat.append(time.perf_counter() - t0)
    res.update(query_p50_ms=common.percentile(lat, 50) * 1e3, query_p95_ms=common.percentile(lat, 95) * 1e3,
               query_reps=query_reps)
    log(f"[{backend}] {res['passages_per_s']:,.1f} passages/s, single query p50 {res['query_p50_ms']:.2f} ms")
    return res


def run_prepare_static() -> dict[str, Any]:
    """Makes sure the static model exists in the model cache (Part B must not time its distillation)."""
    from capr.models import Encoder, EncoderConfig

    models_dir = Path(os.environ["CAPR_CACHE"]) / "models"
    before = _files(models_dir)
    t0 = time.perf_counter()
    Encoder(EncoderConfig(backend="static"), cache=False).encode_queries(["warm up"])
    return {"backend": "static", "first_load_s": time.perf_counter() - t0, "created_files": sorted(_files(models_dir) - before)}


def a_agreement(work: Path, backends: list[str]) -> dict[str, dict[str, float]]:
    """Per backend vs torch fp32: cosine of the same passage's two vectors (same dimension only),
    and the overlap of each passage's 10 nearest neighbours among the Part A passages."""
    import numpy as np

    ref_path = work / "dense_a_torch.npy"
    if not ref_path.is_file():
        return {}
    ref = np.load(ref_path)

    def knn(v: np.ndarray) -> np.ndarray:
        s = v @ v.T
        np.fill_diagonal(s, -np.inf)
        return np.argpartition(-s, K - 1, axis=1)[:, :K]

    ref_nn = knn(ref)
    out: dict[str, dict[str, float]] = {}
    for b in backends:
        p = work / f"dense_a_{b.replace('-', '_')}.npy"
        if not p.is_file():
            continue
        v = np.load(p)
        r: dict[str, float] = {}
        if v.shape == ref.shape:
            cos = np.sum(v.astype(np.float64) * ref, axis=1)
            r.update(cosine_mean=float(cos.mean()), cosine_min=float(cos.min()))
        nn = knn(v)
        r["knn10_overlap"] = float(np.mean([len(set(a) & set(c)) / K for a, c in zip(nn, ref_nn)]))
        out[b] = r
    return out


# ---------------------------------------------------------------------------------------------
# Part B: capr index (child process)
# ---------------------------------------------------------------------------------------------
class BuildPhases:
    """IndexWriter's ``progress``: timestamps the steps of ``commit`` and shows progress bars."""

    LABELS = {"encoding": "encode passages (static model, embedding-cache writes) + fsync stores",
              "term matrix": "term matrix + filter columns",
              "vector index": "vectors.npy + HNSW graph + segment files + commit/reload"}

    def __init__(self, n: int) -> None:
        self.n = n
        self.marks: list[tuple[str, float]] = []
        self.bar = None
        self.ticker: Ticker | None = None

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.ticker is not None:
            self.ticker.__exit__(None, None, None)
            self.ticker = None

    def start(self) -> None:
        self.marks.append(("add passages (segment, analyse, write JSONL stores)", time.perf_counter()))

    def __call__(self, what: str) -> None:
        from tqdm import tqdm

        now = time.perf_counter()
        self._close()
        key = next((k for k in self.LABELS if what.startswith(k)), what)
        self.marks.append((self.LABELS.get(key, what), now))
        if key == "encoding":
            self.bar = tqdm(total=self.n, desc="[capr] encoding (static)", unit=" passages", file=sys.stderr, mininterval=1.0)
        elif key == "vector index":
            self.ticker = Ticker("[capr] vectors + HNSW graph + commit").__enter__()
        else:
            log(f"[capr] {what} ...")

    def advance_encoding(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def durations(self, end: float) -> dict[str, float]:
        self._close()
        ends = [t for _, t in self.marks[1:]] + [end]
        return {label: e - t for (label, t), e in zip(self.marks, ends)}


def run_capr(passages: list[str], queries: list[str], root: Path, hnsw_threshold: int) -> dict[str, Any]:
    from tqdm import tqdm

    from capr.corpus.segment import SegmenterConfig
    from capr.index import IndexWriter, load_index
    from capr.search import search
    from capr.models import EncoderConfig
    from capr.records import Document, Section

    res: dict[str, Any] = {**_thread_info()}
    phases = BuildPhases(len(passages))
    log(f"[capr] building index of {len(passages):,} passages with static-model vectors in {root} ...")
    with common.PeakRSS() as mem:
        t0 = time.perf_counter()
        phases.start()
        with IndexWriter(root, segmenter=SegmenterConfig(max_tokens=0, include_title=False),
                         dense=EncoderConfig(backend="static"), hnsw_threshold=hnsw_threshold, progress=phases) as w:
            for i, t in enumerate(tqdm(passages, desc="[capr] adding passages", unit=" passages", file=sys.stderr,
                                       mininterval=1.0)):
                w.add(Document(doc_id=f"p{i}", title="", text=t,
                               sections=[Section(heading="", aspect="", start=0, end=len(t))]))
        end = time.perf_counter()
        build = end - t0
    n_indexed = w.n_passages
    del w
    gc.collect()
    manifest_segs = json.loads((root / (root / "CURRENT").read_text().strip() / "manifest.json").read_text())["segments"]
    seg_dirs = [root / "segments" / s for s in manifest_segs]
    phase_s = phases.durations(end)
    if not all((d / "hnsw.faiss").exists() for d in seg_dirs):
        phase_s = {k.replace(" + HNSW graph", " (no HNSW graph)"): v for k, v in phase_s.items()}
    res.update(build_s=build, build_phases_s=phase_s, peak_rss_mb=mem.delta_mb,
               peak_rss_abs_mb=mem.peak / 2**20, indexed=n_indexed, skipped_passages=len(passages) - n_indexed,
               index_mb=common.dir_mb(root), segments=manifest_segs,
               vectors_mb=sum((d / "vectors.npy").stat().st_size for d in seg_dirs) / 2**20,
               hnsw_mb=sum((d / "hnsw.faiss").stat().st_size for d in seg_dirs if (d / "hnsw.faiss").exists()) / 2**20,
               hnsw_used=all((d / "hnsw.faiss").exists() for d in seg_dirs), hnsw_threshold=hnsw_threshold)
    emb = Path(os.environ["CAPR_CACHE"]) / "embeddings.sqlite"
    res["embedding_cache_mb"] = sum(p.stat().st_size for p in emb.parent.glob("embeddings.sqlite*")) / 2**20 if emb.exists() else 0.0
    log(f"[capr] build {build:.1f} s, peak RSS +{mem.delta_mb:,.0f} MB, "
        f"dense search: {'HNSW' if res['hnsw_used'] else 'exact (segment below hnsw_threshold)'}")

    t0 = time.perf_counter()
    idx = load_index(root)
    res["load_s"] = time.perf_counter() - t0

    for r in RETRIEVERS:
        t0 = time.perf_counter()
        search(idx, queries[0], k=K, retriever=r, aspect_boost=0.0, highlights=False)  # warm-up (dense: loads the encoder, maps vectors)
        first = (time.perf_counter() - t0) * 1e3
        lat: list[float] = []
        top: list[list[int]] = []
        for q in tqdm(queries, desc=f"[capr] {r} queries", unit=" queries", file=sys.stderr, mininterval=1.0):
            t0 = time.perf_counter()
            hits = search(idx, q, k=K, retriever=r, aspect_boost=0.0, highlights=False)
            lat.append(time.perf_counter() - t0)
            top.append([corpus_id(h.pid) for h in hits])
        res[r] = {**common.latency_stats(lat), "first_query_ms": first}
        if r == "dense":
            res["dense_top"] = top
        log(f"[capr] {r}: p50 {res[r]['p50_ms']:.2f} ms, p95 {res[r]['p95_ms']:.2f} ms, {res[r]['qps']:.1f} queries/s")

    # where a dense query's time goes: query encoding, then the vector search itself (no passage records)
    enc_lat, search_lat = [], []
    for q in queries:
        t0 = time.perf_counter()
        qv = idx.encoder().encode_queries([q])[0]
        t1 = time.perf_counter()
        idx.dense_top(qv, K)
        t2 = time.perf_counter()
        enc_lat.append(t1 - t0)
        search_lat.append(t2 - t1)
    res["dense_breakdown"] = {"encode_query_p50_ms": common.percentile(enc_lat, 50) * 1e3,
                              "dense_search_p50_ms": common.percentile(search_lat, 50) * 1e3,
                              "encode_query_p95_ms": common.percentile(enc_lat, 95) * 1e3,
                              "dense_search_p95_ms": common.percentile(search_lat, 95) * 1e3}
    res["rss_after_queries_mb"] = common.rss() / 2**20
    idx.close()
    return res


# ---------------------------------------------------------------------------------------------
# Part B: raw faiss on capr's vectors (child process)
# ---------------------------------------------------------------------------------------------
def run_faiss(root: Path, queries: list[str], tmp_root: str | None) -> dict[str, Any]:
    import faiss
    import numpy as np
    from tqdm import tqdm

    from capr.models import Encoder, EncoderConfig

    res: dict[str, Any] = {**_thread_info()}
    segs = json.loads((root / (root / "CURRENT").read_text().strip() / "manifest.json").read_text())["segments"]
    t0 = time.perf_counter()
    parts, ids = [], []
    for s in segs:
        parts.append(np.load(root / "segments" / s / "vectors.npy"))
        ids.extend(corpus_id(p) for p in json.loads((root / "segments" / s / "pids.json").read_text()))
    vecs = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
    del parts
    row_ids = np.asarray(ids, dtype=np.int64)
    res["vectors_load_s"] = time.perf_counter() - t0
    n, d = vecs.shape
    res.update(vectors=n, dim=d)

    # query vectors with the same static model (not part of the search timings below)
    enc = Encoder(EncoderConfig(backend="static"), cache=False)
    enc.encode_queries(["warm up"])
    qlat, qvecs = [], []
    for q in queries:
        t0 = time.perf_counter()
        qvecs.append(enc.encode_queries([q])[0])
        qlat.append(time.perf_counter() - t0)
    qv = np.ascontiguousarray(np.stack(qvecs), dtype=np.float32)
    res["encode_query_p50_ms"] = common.percentile(qlat, 50) * 1e3

    def timed_search(index, desc: str) -> tuple[dict[str, Any], list[list[int]]]:
        t0 = time.perf_counter()
        index.search(qv[:1], K)
        first = (time.perf_counter() - t0) * 1e3
        lat, top = [], []
        for i in tqdm(range(len(qv)), desc=desc, unit=" queries", file=sys.stderr, mininterval=1.0):
            t0 = time.perf_counter()
            _, rows = index.search(qv[i : i + 1], K)
            lat.append(time.perf_counter() - t0)
            top.append([int(row_ids[r]) for r in rows[0] if r >= 0])
        return {**common.latency_stats(lat), "first_query_ms": first}, top

    log(f"[faiss] IndexHNSWFlat(M={FAISS_M}, efConstruction={FAISS_EF_CONSTRUCTION}, inner product) on {n:,} x {d} ...")
    with common.PeakRSS() as mem, Ticker("[faiss] HNSW build"):
        t0 = time.perf_counter()
        hnsw = faiss.IndexHNSWFlat(d, FAISS_M, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = FAISS_EF_CONSTRUCTION
        hnsw.add(vecs)
        build = time.perf_counter() - t0
    res["hnsw"] = {"build_s": build, "peak_rss_mb": mem.delta_mb}
    tmp = Path(tempfile.mkdtemp(prefix="faiss-bench-", dir=tmp_root))
    try:
        t0 = time.perf_counter()
        faiss.write_index(hnsw, str(tmp / "hnsw.faiss"))
        res["hnsw"]["save_s"] = time.perf_counter() - t0
        res["hnsw"]["file_mb"] = (tmp / "hnsw.faiss").stat().st_size / 2**20
        del hnsw
        gc.collect()
        t0 = time.perf_counter()
        hnsw = faiss.read_index(str(tmp / "hnsw.faiss"))
        res["hnsw"]["load_s"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    hnsw.hnsw.efSearch = FAISS_EF_SEARCH
    stats, hnsw_top = timed_search(hnsw, "[faiss] HNSW queries")
    res["hnsw"].update(stats)
    del hnsw
    gc.collect()
    log(f"[faiss] HNSW build {build:.1f} s, p50 {stats['p50_ms']:.3f} ms")

    with common.PeakRSS() as mem:
        t0 = time.perf_counter()
        flat = faiss.IndexFlatIP(d)
        flat.add(vecs)
        build = time.perf_counter() - t0
    res["flat"] = {"build_s": build, "peak_rss_mb": mem.delta_mb}
    stats, flat_top = timed_search(flat, "[faiss] flat (exact) queries")
    res["flat"].update(stats)
    log(f"[faiss] flat p50 {stats['p50_ms']:.2f} ms")
    res["hnsw_top"] = hnsw_top
    res["flat_top"] = flat_top
    res["rss_after_queries_mb"] = common.rss() / 2**20
    return res


def recall(a_top: list[list[int]], exact_top: list[list[int]]) -> dict[str, float]:
    """|A ∩ exact| / |exact| per query (exact = flat search top-10), summarised."""
    import numpy as np

    r = [len(set(a) & set(e)) / len(e) if e else 1.0 for a, e in zip(a_top, exact_top)]
    return {"queries": len(r), "mean": float(np.mean(r)) if r else float("nan"),
            "min": float(np.min(r)) if r else float("nan"),
            "share_perfect": float(np.mean([x == 1.0 for x in r])) if r else float("nan")}


# ---------------------------------------------------------------------------------------------
# Worker entry, waiting for a quiet machine, machine info, report
# ---------------------------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> None:
    if args.worker == "encode":
        texts = read_a_texts(Path(args.a_data), args.a_passages)
        res = run_encode(args.backend, texts, Path(args.worker_npy), args.query_reps)
    elif args.worker == "prepare-static":
        res = run_prepare_static()
    else:
        queries = [q["text"] for q in common.read_jsonl_gz(Path(args.worker_queries))]
        if args.worker == "capr":
            passages = common.read_jsonl_gz(Path(args.worker_corpus))
            gc.collect()
            res = run_capr(passages, queries, Path(args.worker_index), args.hnsw_threshold)
        elif args.worker == "faiss":
            res = run_faiss(Path(args.worker_index), queries, args.tmp_dir)
        else:
            passages = common.read_jsonl_gz(Path(args.worker_corpus))
            gc.collect()
            res = run_bm25s(passages, queries, args.tmp_dir, None, False)
            res.pop("top", None)
    Path(args.worker_result).write_text(json.dumps(res))


def busy_processes() -> list[str]:
    """Other processes matching BUSY_PATTERN (``pgrep -af``; psutil when pgrep is missing)."""
    me = os.getpid()
    try:
        out = subprocess.run(["pgrep", "-af", BUSY_PATTERN], capture_output=True, text=True).stdout
        lines = [ln for ln in out.splitlines() if ln.strip()]
    except FileNotFoundError:
        import psutil

        rx = re.compile(BUSY_PATTERN)
        lines = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(p.info.get("cmdline") or [])
            if rx.search(cmd):
                lines.append(f"{p.info['pid']} {cmd}")
    return [ln for ln in lines if int(ln.split()[0]) != me]


class QuietGate:
    """Waits (polling every ``interval`` s) until no `capr eval` / pytest process runs; at most
    ``budget`` seconds over the whole run, after which timing goes on with a warning."""

    def __init__(self, budget: float, interval: float = 10.0) -> None:
        self.budget = budget
        self.interval = interval
        self.waited = 0.0
        self.seen: list[str] = []
        self.gave_up: list[str] = []

    def wait(self, before: str) -> None:
        while True:
            busy = busy_processes()
            if not busy:
                return
            for b in busy:
                if b not in self.seen:
                    self.seen.append(b)
            if self.waited >= self.budget:
                log(f"WARNING: still {len(busy)} `{BUSY_PATTERN}` process(es) after waiting {self.waited:.0f} s; "
                    f"timing {before} anyway")
                self.gave_up.extend(b for b in busy if b not in self.gave_up)
                return
            log(f"waiting before {before}: {len(busy)} other process(es) running "
                f"({'; '.join(b[:100] for b in busy[:3])}) — waited {self.waited:.0f}/{self.budget:.0f} s")
            time.sleep(self.interval)
            self.waited += self.interval


def machine_info() -> dict[str, Any]:
    m = common.machine_info()
    versions = {}
    for pkg in ("capr", "numpy", "faiss-cpu", "torch", "onnxruntime", "model2vec", "sentence-transformers",
                "transformers", "tokenizers", "bm25s", "PyStemmer"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    m["versions"] = versions
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    m["cpu_flags"] = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    return m


def run_child(name: str, cmd: list[str], rpath: Path, gate: QuietGate, env: dict[str, str] | None = None) -> dict[str, Any] | None:
    gate.wait(name)
    rpath.unlink(missing_ok=True)
    busy0, own0 = common.busy_cpu_seconds(), common.own_cpu_seconds()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=sys.stderr, env=env)  # children's chatter (faiss, HF) stays off stdout
    wall = time.perf_counter() - t0
    other = max(0.0, (common.busy_cpu_seconds() - busy0) - (common.own_cpu_seconds() - own0))
    if proc.returncode != 0 or not rpath.is_file():
        log(f"bench_dense: {name} failed (exit status {proc.returncode}); leaving it out")
        return None
    TIMED["wall_s"] += wall
    TIMED["other_cpu_s"] += other
    res = json.loads(rpath.read_text())
    res["process_wall_s"] = wall
    res["other_processes_cores"] = other / wall if wall else 0.0
    return res


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def part_a_table(a: dict[str, Any], agree: dict[str, Any]) -> list[str]:
    rows = ["| backend | dim | passages/s | × torch fp32 | cosine vs torch, mean | cosine vs torch, min | "
            "10-NN overlap vs torch | query p50 ms | model load s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ref = a.get("torch", {}).get("passages_per_s")
    for b in BACKENDS:
        r = a.get(b)
        if not r:
            continue
        g = agree.get(b, {})
        cos_mean = "n/a" if "cosine_mean" not in g else f"{g['cosine_mean']:.5f}"
        cos_min = "n/a" if "cosine_min" not in g else f"{g['cosine_min']:.5f}"
        knn = _fmt(g.get("knn10_overlap"), ".3f")
        if b == "torch":
            cos_mean = cos_min = knn = "reference"
        elif "cosine_mean" not in g and g:
            cos_mean = cos_min = f"n/a ({r['dim']}-d)"
        load = f"{r['first_load_s']:.1f}" + (" *" if r.get("created_files") else "")
        rows.append(f"| {BACKEND_LABEL[b]} | {r['dim']} | {r['passages_per_s']:,.1f} | "
                    f"{_fmt(r['passages_per_s'] / ref if ref else None, '.2f')} | {cos_mean} | {cos_min} | "
                    f"{knn} | {r['query_p50_ms']:.2f} | {load} |")
    return rows


def part_b_table(b: dict[str, Any]) -> list[str]:
    rows = ["| system | build s | load s | p50 ms | p95 ms | queries/s | peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    c = b.get("capr")
    if c:
        graph = "HNSW graph" if c["hnsw_used"] else "no HNSW graph: exact search"
        rows.append(f"| capr index: BM25 + static vectors + {graph} (build, load) | {c['build_s']:.1f} | "
                    f"{c['load_s']:.2f} | — | — | — | {c['peak_rss_mb']:,.0f} |")
        label = {"bm25": "capr `bm25`", "dense": "capr `dense` (static query encoding + " +
                 ("HNSW" if c["hnsw_used"] else "exact") + " search)",
                 "hybrid": "capr `hybrid` (RRF of BM25 top-100 + dense top-100)"}
        for r in RETRIEVERS:
            s = c[r]
            rows.append(f"| {label[r]} | — | — | {s['p50_ms']:.2f} | {s['p95_ms']:.2f} | {s['qps']:.1f} | — |")
    f = b.get("faiss")
    if f:
        h, fl = f["hnsw"], f["flat"]
        rows.append(f"| faiss IndexHNSWFlat M={FAISS_M} efC={FAISS_EF_CONSTRUCTION} efS={FAISS_EF_SEARCH} "
                    f"(search only) | {h['build_s']:.1f} | {h['load_s']:.2f} | {h['p50_ms']:.3f} | {h['p95_ms']:.3f} | "
                    f"{h['qps']:,.0f} | {h['peak_rss_mb']:,.0f} |")
        rows.append(f"| faiss IndexFlatIP, exact (search only) | {fl['build_s']:.2f} | — | {fl['p50_ms']:.2f} | "
                    f"{fl['p95_ms']:.2f} | {fl['qps']:,.1f} | {fl['peak_rss_mb']:,.0f} |")
    m = b.get("bm25s")
    if m:
        s = m["single"]
        rows.append(f"| bm25s lucene, one query at a time | {m['build_s']:.1f} | {m['load_s']:.2f} | {s['p50_ms']:.2f} | "
                    f"{s['p95_ms']:.2f} | {s['qps']:.1f} | {m['peak_rss_mb']:,.0f} |")
    return rows


def one_time_costs(costs_path: Path, a: dict[str, Any], prep: dict[str, Any] | None) -> dict[str, Any]:
    """Records the first load that created model files (export / quantization / distillation) and
    returns every recorded one, so later runs with a warm model cache still report them."""
    costs = json.loads(costs_path.read_text()) if costs_path.is_file() else {}
    what = {"onnx": "ONNX export (fp32)", "onnx-int8": "int8 quantization (+ export if missing)",
            "static": "model2vec distillation (256-d PCA)"}
    for r in list(a.values()) + ([prep] if prep else []):
        if r and r.get("created_files") and r["backend"] in what:
            costs[r["backend"]] = {"what": what[r["backend"]], "first_load_s": r["first_load_s"],
                                   "created_files": r["created_files"], "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                   "this_run": True}
    costs_path.parent.mkdir(parents=True, exist_ok=True)
    costs_path.write_text(json.dumps({k: {**v, "this_run": False} for k, v in costs.items()}, indent=2))
    return costs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--passages", type=int, default=200_000, help="Part B corpus size (bench_bm25's cached corpus)")
    ap.add_argument("--queries", type=int, default=500, help="Part B number of queries")
    ap.add_argument("--skip-a", action="store_true", help="leave out Part A (encoder throughput)")
    ap.add_argument("--skip-b", action="store_true", help="leave out Part B (index and query latency)")
    ap.add_argument("--a-passages", type=int, default=2000, help="Part A: first N passages of --a-data")
    ap.add_argument("--a-data", default=str(DEFAULT_DATA / "medquad_cdv_test" / "passages.jsonl.gz"),
                    help="Part A passages (gzip JSONL with a 'text' field)")
    ap.add_argument("--query-reps", type=int, default=100, help="Part A: timed encodings of the single short query")
    ap.add_argument("--hnsw-threshold", type=int, default=None,
                    help="capr's hnsw_threshold for the Part B index (default: capr's own, 50,000)")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA), help="shared data folder (corpus sources for bench_bm25)")
    ap.add_argument("--out-dir", default=str(DEFAULT_OUT), help="caches and results (gitignored)")
    ap.add_argument("--model-cache", default=None, help="CAPR_CACHE for the models (default: <out-dir>/capr_cache)")
    ap.add_argument("--tmp-dir", default=None, help="where the Part B index is written (default: system temp dir)")
    ap.add_argument("--keep-index", action="store_true", help="keep the Part B capr index (path is printed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rebuild-corpus", action="store_true", help="ignore the cached corpus and queries")
    ap.add_argument("--max-wait", type=float, default=900.0,
                    help=f"seconds to wait in all for running `{BUSY_PATTERN}` processes before timing anyway")
    # internal: run one system in this (child) process
    ap.add_argument("--worker", choices=WORKERS, help=argparse.SUPPRESS)
    ap.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)
    ap.add_argument("--worker-npy", help=argparse.SUPPRESS)
    ap.add_argument("--worker-corpus", help=argparse.SUPPRESS)
    ap.add_argument("--worker-queries", help=argparse.SUPPRESS)
    ap.add_argument("--worker-index", help=argparse.SUPPRESS)
    ap.add_argument("--worker-result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    out = Path(args.out_dir).resolve()
    if not (args.worker and os.environ.get("CAPR_CACHE")):  # a worker keeps the CAPR_CACHE its parent gave it
        os.environ["CAPR_CACHE"] = str(Path(args.model_cache).resolve() if args.model_cache else out / "capr_cache")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.worker:
        worker(args)
        return 0
    if args.skip_a and args.skip_b:
        ap.error("nothing to do: both --skip-a and --skip-b given")
    if args.passages < K or args.queries < 1 or args.a_passages < 1:
        ap.error(f"need --passages >= {K}, --queries >= 1 and --a-passages >= 1")
    from capr.index.writer import DEFAULT_HNSW_THRESHOLD

    hnsw_threshold = DEFAULT_HNSW_THRESHOLD if args.hnsw_threshold is None else args.hnsw_threshold
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    model_cache = Path(os.environ["CAPR_CACHE"])
    (model_cache / "models").mkdir(parents=True, exist_ok=True)
    me = [sys.executable, "-m", "bench.bench_dense"]

    gate = QuietGate(args.max_wait)
    gate.wait("the benchmark")
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    busy0, own0 = common.busy_cpu_seconds(), common.own_cpu_seconds()
    machine = machine_info()

    # ---- Part A ----
    a: dict[str, Any] = {}
    agree: dict[str, Any] = {}
    a_info: dict[str, Any] = {}
    if not args.skip_a:
        a_data = Path(args.a_data).resolve()
        if not a_data.is_file():
            sys.exit(f"bench_dense: Part A data {a_data} not found; pass --a-data or --skip-a")
        texts = read_a_texts(a_data, args.a_passages)
        a_info = {"file": str(a_data), "passages": len(texts),
                  "mean_words": round(sum(len(t.split()) for t in texts) / max(1, len(texts)), 1)}
        log(f"Part A: {len(texts):,} passages from {a_data} (mean {a_info['mean_words']} words)")
        for b in BACKENDS:
            npy = work / f"dense_a_{b.replace('-', '_')}.npy"
            npy.unlink(missing_ok=True)
            r = run_child(f"encoder {b}", me + ["--worker", "encode", "--backend", b, "--a-data", str(a_data),
                                               "--a-passages", str(args.a_passages), "--query-reps", str(args.query_reps),
                                               "--worker-npy", str(npy), "--worker-result", str(work / f"dense_a_{b}.json")],
                          work / f"dense_a_{b}.json", gate)
            if r:
                a[b] = r
        agree = a_agreement(work, list(a))

    # ---- Part B ----
    b_res: dict[str, Any] = {}
    corpus_info: dict[str, Any] = {}
    prep = None
    recalls: dict[str, Any] = {}
    root = None
    if not args.skip_b:
        ns = SimpleNamespace(data_dir=args.data_dir, out_dir=str(out), seed=args.seed, passages=args.passages,
                             queries=args.queries, rebuild_corpus=args.rebuild_corpus)
        ppath, qpath, corpus_info = prepare_data(ns)
        if not any((model_cache / "models").glob("static-*/config.json")):
            log("Part B: distilling the static model first (one-time, not timed as part of the build) ...")
            prep = run_child("static model preparation", me + ["--worker", "prepare-static", "--worker-result",
                                                               str(work / "dense_prepare.json")],
                             work / "dense_prepare.json", gate)
        tmp = Path(tempfile.mkdtemp(prefix="capr-dense-bench-", dir=args.tmp_dir))
        root = tmp / "index"
        # the build gets its own CAPR_CACHE with a fresh embedding cache (so no run is served vectors cached by
        # an earlier one) and the shared, already prepared models
        build_cache = tmp / "capr_cache"
        build_cache.mkdir()
        (build_cache / "models").symlink_to(model_cache / "models", target_is_directory=True)
        env = {**os.environ, "CAPR_CACHE": str(build_cache)}
        worker_args = ["--worker-corpus", str(ppath), "--worker-queries", str(qpath), "--worker-index", str(root)]
        if args.tmp_dir:
            worker_args += ["--tmp-dir", args.tmp_dir]
        try:
            for system in ("capr", "faiss", "bm25s"):
                if system == "faiss" and "capr" not in b_res:
                    log("bench_dense: no capr index, so no faiss reference")
                    continue
                rpath = work / f"dense_{system}_{args.passages}.json"
                r = run_child(system, me + ["--worker", system, "--worker-result", str(rpath),
                                            "--hnsw-threshold", str(hnsw_threshold)] + worker_args, rpath, gate, env)
                if r:
                    b_res[system] = r
        finally:
            if args.keep_index:
                log(f"capr index kept at {root}")
                shutil.rmtree(build_cache, ignore_errors=True)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        if "faiss" in b_res:
            f = b_res["faiss"]
            recalls["faiss_hnsw_vs_exact"] = recall(f["hnsw_top"], f["flat_top"])
            if "capr" in b_res:
                recalls["capr_dense_vs_exact"] = recall(b_res["capr"]["dense_top"], f["flat_top"])
                recalls["capr_dense_vs_faiss_hnsw"] = recall(b_res["capr"]["dense_top"], f["hnsw_top"])

    costs = one_time_costs(model_cache / "one_time_costs.json", a, prep)
    load_after = os.getloadavg()
    wall = time.perf_counter() - t_start
    other_cpu_run = max(0.0, (common.busy_cpu_seconds() - busy0) - (common.own_cpu_seconds() - own0))
    # what matters is the load while systems ran, not while the script waited for a quiet machine
    other_cpu = TIMED["other_cpu_s"]
    other_cores = other_cpu / TIMED["wall_s"] if TIMED["wall_s"] else 0.0

    # ---- report ----
    lines: list[str] = []
    if a:
        lines += [f"Part A: encoding the first {a_info['passages']:,} passages of {Path(a_info['file']).parent.name}/"
                  f"{Path(a_info['file']).name} (real MedQuAD answers, mean {a_info['mean_words']} words), model 'minilm' "
                  f"(all-MiniLM-L6-v2), max_length {next(iter(a.values()))['max_length']}, capr's batch sizes, "
                  "no embedding cache", ""]
        lines += part_a_table(a, agree)
        notes = ["passages/s: `Encoder(EncoderConfig(backend=...), cache=False).encode_passages(texts)` after one "
                 "warm-up batch; query p50: one `encode_queries([q])` call for the short query "
                 f"\"{SHORT_QUERY}\" ({args.query_reps} timed calls after 3 warm-up calls)",
                 "cosine vs torch: cosine of each passage's vector with its torch fp32 vector (the static model is a "
                 "different, 256-d vector space, so n/a); 10-NN overlap: for each passage, the share of its 10 nearest "
                 "neighbours among the Part A passages that torch fp32 also finds"]
        load_note = "model load s: first `encode_queries` call in a fresh process (imports and model load"
        if any(r.get("created_files") for r in a.values()):
            load_note += "; * = this includes creating the model files, a one-time cost"
        notes.append(load_note + ")")
        if costs:
            parts = []
            for k in BACKENDS:
                if k in costs:
                    c = costs[k]
                    when = "this run" if c.get("this_run") else f"recorded {c['date'][:10]}"
                    parts.append(f"{k}: {c['what']}, first load {c['first_load_s']:.1f} s ({when})")
            notes.append("one-time model preparation into CAPR_CACHE, excluded from the numbers above: " + "; ".join(parts))
        th = next(iter(a.values()))
        notes.append(f"threads: torch {th.get('torch_threads', '?')}, onnxruntime default (one per physical core)")
        lines += [""] + [f"- {n}" for n in notes] + [""]
    if b_res:
        ci = corpus_info
        lines += [f"Part B: {ci['passages']:,} passages (mean {ci['mean_passage_words']} words; bench_bm25's cached corpus), "
                  f"{ci['queries']} queries ({ci['queries_by_kind']['question']} MedQuAD questions, "
                  f"{ci['queries_by_kind']['entity+aspect']} entity+aspect), top-{K}, one query at a time", ""]
        lines += part_b_table(b_res)
        notes = []
        c = b_res.get("capr")
        if c:
            h = c["hybrid"]["p50_ms"]
            notes.append(f"goal hybrid p50 <= {HYBRID_GOAL_MS:.0f} ms: {'MET' if h <= HYBRID_GOAL_MS else 'NOT MET'} "
                         f"({h:.2f} ms)")
            ph = "; ".join(f"{k} {v:.1f} s" for k, v in c["build_phases_s"].items())
            notes.append(f"capr build = IndexWriter.add for every passage + commit, embedding cache empty at the start: {ph}")
            dbk = c["dense_breakdown"]
            notes.append(f"capr queries use `capr.search.search(idx, q, k={K}, retriever=..., aspect_boost=0.0)` and return passage "
                         f"records; dense split: query encoding p50 {dbk['encode_query_p50_ms']:.3f} ms + "
                         f"`dense_top` p50 {dbk['dense_search_p50_ms']:.3f} ms; first (cold) query: "
                         + ", ".join(f"{r} {c[r]['first_query_ms']:.1f} ms" for r in RETRIEVERS)
                         + " (dense loads the static model)")
            notes.append(f"index on disk {c['index_mb']:,.0f} MB (vectors {c['vectors_mb']:,.0f} MB, HNSW graph "
                         f"{c['hnsw_mb']:,.0f} MB); embedding cache written during the build {c['embedding_cache_mb']:,.0f} MB; "
                         f"load s = `load_index` (memory-mapped; vectors and graph are mapped at the first dense query)")
            if c.get("skipped_passages"):
                notes.append(f"capr indexed {c['indexed']:,} passages; {c['skipped_passages']} had no sentence and were skipped")
        f = b_res.get("faiss")
        if f:
            notes.append(f"faiss rows time `index.search` of one pre-encoded query vector (static query encoding p50 "
                         f"{f['encode_query_p50_ms']:.3f} ms, not included) on the vectors taken from capr's index "
                         f"({f['vectors']:,} x {f['dim']}); HNSW load s = `faiss.read_index` of the saved graph; flat "
                         f"build s = `IndexFlatIP.add`; faiss threads {f.get('faiss_omp_threads', '?')}")
        if recalls:
            parts = []
            for key, label in (("capr_dense_vs_exact", "capr dense"), ("faiss_hnsw_vs_exact", "faiss HNSW")):
                if key in recalls:
                    r = recalls[key]
                    parts.append(f"{label} {r['mean']:.4f} (min {r['min']:.1f}, {r['share_perfect']:.1%} of queries 10/10)")
            line = f"recall@{K} vs exact flat search over {next(iter(recalls.values()))['queries']} queries: " + "; ".join(parts)
            if "capr_dense_vs_faiss_hnsw" in recalls:
                line += f"; capr dense vs faiss HNSW overlap {recalls['capr_dense_vs_faiss_hnsw']['mean']:.4f}"
            notes.append(line)
        if "bm25s" in b_res:
            notes.append("bm25s: tokenize(stopwords='en', PyStemmer english) + BM25(k1=1.2, b=0.75, method='lucene'), "
                         "one `tokenize([q])` + `retrieve(k=10, n_threads=0)` per query, as in bench_bm25.py")
        notes.append("peak RSS MB = peak resident memory during the build minus RSS before it, each system in its own "
                     "process")
        lines += [""] + [f"- {n}" for n in notes] + [""]

    v = machine["versions"]
    lines.append(f"Machine: {machine['cpu']}, {machine['logical_cores']} logical cores "
                 f"({machine['physical_cores']} physical; {', '.join(machine['cpu_flags']) or 'no AVX flags'}), "
                 f"{machine['memory_gb']} GB RAM, no GPU used; Python {machine['python']}; "
                 + ", ".join(f"{k} {val}" for k, val in v.items() if val)
                 + f" (capr sources {machine['capr_source_sha1']}); "
                 f"other processes used {other_cores:.2f} cores on average while the systems ran "
                 f"(load average {load_before[0]:.2f} at start, {load_after[0]:.2f} at end)")
    warns = []
    if gate.waited:
        warns.append(f"waited {gate.waited:.0f} s for other `{BUSY_PATTERN}` processes before timing")
    if gate.gave_up:
        warns.append(f"WARNING: timed while other `{BUSY_PATTERN}` processes ran: "
                     + "; ".join(g[:120] for g in gate.gave_up))
    if other_cores > 0.2:
        warns.append(f"WARNING: other processes kept {other_cores:.2f} of {os.cpu_count()} cores busy while the systems "
                     "ran; timings may be noisy")
    noisy = [f"{k} {r['other_processes_cores']:.2f}" for k, r in list(a.items()) + list(b_res.items())
             if r.get("other_processes_cores", 0) > 0.2]
    if noisy:
        warns.append("WARNING: other processes' cores while single systems ran: " + ", ".join(noisy))
    if common.capr_fingerprint() != machine["capr_source_sha1"]:
        warns.append("WARNING: capr's source files changed while the benchmark ran; rerun for numbers that belong "
                     "to one version of the code")
    lines += [f"- {w}" for w in warns]
    text = "\n".join(lines)
    print(text, flush=True)
    log(f"\ntotal wall time {wall:.0f} s")

    for r in b_res.values():
        for key in ("dense_top", "hnsw_top", "flat_top"):
            r.pop(key, None)
    report = {"config": {"passages": args.passages, "queries": args.queries, "seed": args.seed, "k": K,
                         "a_passages": args.a_passages, "query_reps": args.query_reps, "short_query": SHORT_QUERY,
                         "hnsw_threshold": hnsw_threshold, "skip_a": args.skip_a, "skip_b": args.skip_b,
                         "faiss": {"M": FAISS_M, "efConstruction": FAISS_EF_CONSTRUCTION, "efSearch": FAISS_EF_SEARCH},
                         "capr_cache": str(model_cache), "data_dir": str(Path(args.data_dir).resolve())},
              "part_a": {"data": a_info, "results": a, "agreement_vs_torch": agree},
              "part_b": {"corpus": corpus_info, "results": b_res, "recall": recalls},
              "one_time_costs": costs, "machine": machine,
              "wait": {"waited_s": gate.waited, "seen": gate.seen, "timed_anyway_with": gate.gave_up},
              "loadavg_start": load_before, "loadavg_end": load_after, "other_processes_cpu_s": other_cpu,
              "other_processes_cores": other_cores, "timed_children_wall_s": TIMED["wall_s"],
              "other_processes_cpu_s_whole_run": other_cpu_run, "wall_s": wall, "markdown": text,
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    jpath = out / f"dense_{args.passages}.json"
    jpath.write_text(json.dumps(report, indent=2))
    log(f"results written to {jpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
