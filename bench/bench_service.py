#!/usr/bin/env python3
"""Load test of `capr serve`: concurrent clients searching a 200k-passage BM25 index over loopback
while one writer adds and deletes documents; then a schemathesis run over the OpenAPI spec.

    .venv/bin/python -m bench.bench_service                       # 200,000 passages, 50 clients, 60 s
    .venv/bin/python -m bench.bench_service --passages 5000 --clients 10 --duration 10

The corpus is bench_bm25.py's (same cache under bench/out/); the index is built once and kept in
bench/out/ (rebuilt when the corpus or capr's index code changes). The server runs as a separate
process (`python -m capr serve`), the clients in this one (httpx, asyncio). Traffic goes to
127.0.0.1 only, and every loop is bounded by --duration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (DEFAULT_DATA, DEFAULT_OUT, busy_cpu_seconds, capr_fingerprint, log, machine_info,
                          read_jsonl_gz)
from bench.corpus import prepare_data


# ---------------------------------------------------------------------------------------------
# Index
# ---------------------------------------------------------------------------------------------
def build_or_reuse_index(ppath: Path, out: Path, n: int, seed: int) -> tuple[Path, dict[str, Any]]:
    from capr.corpus.segment import SegmenterConfig
    from capr.index import AnalyzerConfig, Index, IndexWriter
    from capr.records import Document, Section

    root = out / f"service_index_{n}_seed{seed}"
    meta_path = out / f"service_index_{n}_seed{seed}.json"
    with open(ppath, "rb") as fh:
        import gzip

        corpus_meta = json.loads(gzip.open(fh, "rt").readline())["meta"]
    meta = {"corpus": corpus_meta, "capr_index_code": capr_fingerprint(("index", "corpus"))}
    if root.is_dir() and meta_path.is_file() and json.loads(meta_path.read_text()).get("meta") == meta:
        idx = Index.load(root)
        info = {"built_now": False, "passages": idx.counts["passages"], "generation": idx.manifest["generation"]}
        idx.close()
        log(f"index: reusing {root} ({info['passages']:,} passages)")
        return root, info
    shutil.rmtree(root, ignore_errors=True)
    passages = read_jsonl_gz(ppath)
    log(f"index: building {len(passages):,} passages into {root} ...")
    t0 = time.perf_counter()
    # as bench_bm25.py's capr build: one document per passage, no title, no re-segmentation
    with IndexWriter(root, segmenter=SegmenterConfig(max_tokens=0, include_title=False), analyzer=AnalyzerConfig()) as w:
        for i, t in enumerate(passages):
            w.add(Document(doc_id=f"p{i}", title="", text=t, sections=[Section(heading="", aspect="", start=0, end=len(t))]))
    build_s = time.perf_counter() - t0
    meta_path.write_text(json.dumps({"meta": meta, "build_s": build_s}))
    log(f"index: built in {build_s:.0f} s")
    return root, {"built_now": True, "build_s": round(build_s, 1), "passages": len(passages)}


# ---------------------------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, index_dir: Path, workers: int, token: str, log_path: Path, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_fh = open(log_path, "w")
        env = {**os.environ, "CAPR_API_TOKENS": token}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "capr", "serve", "--index", str(index_dir), "--port", str(self.port),
             "--workers", str(workers), "--log-level", "warning", *extra],
            env=env, stdout=self.log_fh, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float = 180) -> float:
        import httpx

        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"bench_service: server exited with {self.proc.returncode}; see {self.log_fh.name}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit("bench_service: server did not become healthy")

    def cpu_seconds(self) -> float:
        import psutil

        try:
            p = psutil.Process(self.proc.pid)
            procs = [p, *p.children(recursive=True)]
            return sum(sum(q.cpu_times()[:2]) for q in procs)
        except psutil.Error:
            return float("nan")

    def rss_mb(self) -> float:
        import psutil

        try:
            p = psutil.Process(self.proc.pid)
            return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20
        except psutil.Error:
            return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: uvicorn and any workers
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log_fh.close()


# ---------------------------------------------------------------------------------------------
# Load
# ---------------------------------------------------------------------------------------------
async def search_client(client: Any, i: int, queries: list[str], k: int, evidence: bool, deadline: float,
                        lat: list[float], errors: list[str], label: str = "") -> None:
    """One search client: POST /search with the queries in turn until ``deadline``, appending each latency (as the
    client sees it) to ``lat`` and each failure to ``errors`` (prefixed with ``label``)."""
    import httpx

    j = i * 7919  # each client walks the query list from its own offset
    while time.perf_counter() < deadline:
        q = queries[j % len(queries)]
        j += 1
        t0 = time.perf_counter()
        try:
            r = await client.post("/search", json={"text": q, "k": k, "evidence": evidence})
            if r.status_code != 200:
                errors.append(f"{label}{r.status_code}: {r.text[:200]}")
            else:
                r.json()
                lat.append(time.perf_counter() - t0)
        except httpx.HTTPError as e:
            errors.append(f"{label}{type(e).__name__}: {e}")


async def run_load(url: str, token: str, queries: list[str], clients: int, duration: float, k: int,
                   evidence: bool, write_every: float) -> dict[str, Any]:
    import httpx

    lat: list[float] = []
    errors: list[str] = []
    writes: list[tuple[str, int, float]] = []
    deadline = time.perf_counter() + duration
    # Idle pooled connections expire on the client before uvicorn's 5 s keep-alive timeout closes them:
    # with equal timeouts a request can go out on a connection the server is closing (a ReadError
    # that is the client's race, not a server failure).
    limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2, keepalive_expiry=2.0)

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        def searcher(i: int):
            return search_client(client, i, queries, k, evidence, deadline, lat, errors)

        async def writer() -> None:
            # searches keep running while documents are added and deleted
            headers = {"Authorization": f"Bearer {token}"}
            n = 0
            while time.perf_counter() + write_every < deadline:
                await asyncio.sleep(write_every / 2)
                n += 1
                doc = {"doc_id": f"bench-write-{n}", "title": "Bench write",
                       "text": f"PLAN: bench document {n} about xylocardiac syndrome and its treatment."}
                for method, path, body in (("POST", "/documents", doc), ("DELETE", f"/documents/bench-write-{n}", None)):
                    t0 = time.perf_counter()
                    try:
                        r = await client.request(method, path, json=body, headers=headers)
                        writes.append((method, r.status_code, time.perf_counter() - t0))
                        if r.status_code not in (200, 201):
                            errors.append(f"write {method} {r.status_code}: {r.text[:200]}")
                    except httpx.HTTPError as e:
                        errors.append(f"write {method} {type(e).__name__}: {e}")
                    if method == "POST":
                        await asyncio.sleep(write_every / 2)

        t_start = time.perf_counter()
        tasks = [asyncio.create_task(searcher(i)) for i in range(clients)]
        if write_every > 0:
            tasks.append(asyncio.create_task(writer()))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t_start
    return {"latencies": lat, "errors": errors, "writes": writes, "wall_s": wall}


def pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q)) * 1e3 if values else float("nan")


# ---------------------------------------------------------------------------------------------
# Schemathesis
# ---------------------------------------------------------------------------------------------
def run_schemathesis(out: Path, max_examples: int, token: str) -> dict[str, Any]:
    """All phases (examples, coverage, fuzzing, stateful) and all checks against a server on a copy of
    the demo index (the stateful phase adds and deletes documents, slow on a 200k-passage index)."""
    from capr.demo import demo_corpus_dir
    from capr.corpus import Format, read_documents
    from capr.index import build_index

    tmp = Path(tempfile.mkdtemp(prefix="capr-st-"))
    try:
        build_index(read_documents(demo_corpus_dir(), Format.text), tmp / "idx").close()
        server = Server(tmp / "idx", 1, token, out / "schemathesis_server.log")
        try:
            server.wait()
            exe = Path(sys.executable).with_name("schemathesis")
            cmd = [str(exe), "run", f"{server.url}/openapi.json", "-H", f"Authorization: Bearer {token}",
                   "--checks", "all", "--max-examples", str(max_examples), "--workers", "1", "--seed", "1"]
            t0 = time.perf_counter()
            # cwd: schemathesis keeps a cache folder in its working directory
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=out)
            secs = time.perf_counter() - t0
        finally:
            server.stop()
        report = out / "schemathesis_report.txt"
        report.write_text(proc.stdout + proc.stderr)
        text = proc.stdout
        import re

        generated = re.search(r"(\d+) generated", text)
        failures = dict(re.findall(r"❌ (ST\d+ [^:]+): (\d+)", text))
        server_errors = int(failures.get("ST101 Server error", 0))
        server_log = (out / "schemathesis_server.log").read_text()
        return {"cases": int(generated.group(1)) if generated else None, "seconds": round(secs, 1),
                "server_errors_5xx": server_errors, "other_failures": {k: int(v) for k, v in failures.items() if not k.startswith("ST101")},
                "server_logged_unhandled": server_log.count("unhandled "), "report": str(report),
                "command": " ".join(cmd[1:]).replace(token, "$TOKEN")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--clients", type=int, default=50, help="concurrent search clients")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--no-evidence", action="store_true", help="searches without per-sentence evidence scores")
    ap.add_argument("--write-every", type=float, default=5.0, help="one add + one delete every this many seconds (0: no writes)")
    ap.add_argument("--schemathesis-examples", type=int, default=50, help="max examples per operation (0: skip schemathesis)")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA))
    ap.add_argument("--out-dir", default=str(DEFAULT_OUT))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rebuild-corpus", action="store_true")
    args = ap.parse_args(argv)

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    ppath, qpath, corpus = prepare_data(args)
    index_dir, index_info = build_or_reuse_index(ppath, out, args.passages, args.seed)
    queries = [q["text"] for q in read_jsonl_gz(qpath)]
    token = secrets.token_urlsafe(24)

    server = Server(index_dir, args.workers, token, out / "service_server.log")
    try:
        startup = server.wait()
        import httpx

        for q in queries[:20]:  # warm-up: lazy structures, first-request costs
            httpx.post(server.url + "/search", json={"text": q, "k": args.k}, timeout=60)
        rss_before = server.rss_mb()
        busy0, srv0, t0 = busy_cpu_seconds(), server.cpu_seconds(), time.perf_counter()
        self0 = sum(os.times()[:2])
        log(f"load: {args.clients} clients for {args.duration:.0f} s against {server.url} ({args.workers} worker(s)) ...")
        res = asyncio.run(run_load(server.url, token, queries, args.clients, args.duration, args.k,
                                   not args.no_evidence, args.write_every))
        wall = time.perf_counter() - t0
        busy = busy_cpu_seconds() - busy0
        srv = server.cpu_seconds() - srv0
        own = sum(os.times()[:2]) - self0
        rss_after = server.rss_mb()
        server_log_tail = (out / "service_server.log").read_text()[-2000:]
    finally:
        server.stop()

    lat = res["latencies"]
    n_req = len(lat) + sum(1 for e in res["errors"] if not e.startswith("write"))
    writes = res["writes"]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine, "corpus": corpus, "index": index_info,
        "clients": args.clients, "duration_s": args.duration, "workers": args.workers, "k": args.k,
        "evidence": not args.no_evidence, "server_startup_s": round(startup, 2),
        "requests": n_req, "ok": len(lat), "errors": len(res["errors"]), "error_samples": res["errors"][:10],
        "req_per_s": len(lat) / res["wall_s"], "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90), "p99_ms": pct(lat, 99),
        "max_ms": max(lat) * 1e3 if lat else float("nan"),
        "writes": {"count": len(writes), "ok": sum(1 for _, s, _ in writes if s in (200, 201)),
                   "p50_ms": pct([t for _, _, t in writes], 50), "max_ms": max((t for _, _, t in writes), default=0) * 1e3},
        "cpu": {"server_cores": srv / wall, "client_cores": own / wall,
                "other_processes_cores": max(0.0, (busy - srv - own) / wall)},
        "server_rss_mb": {"before": rss_before, "after": rss_after},
    }
    if args.schemathesis_examples > 0:
        log(f"schemathesis: all phases, all checks, {args.schemathesis_examples} examples per operation ...")
        result["schemathesis"] = run_schemathesis(out, args.schemathesis_examples, token)
    (out / f"service_{args.passages}.json").write_text(json.dumps(result, indent=1, default=str))

    m = machine
    lines = [
        f"capr serve load test: {corpus['passages']:,} passages (BM25), {args.clients} concurrent clients on loopback for "
        f"{args.duration:.0f} s, {args.workers} uvicorn worker(s), POST /search k={args.k} free-text queries "
        f"(bench_bm25's {len(queries)} queries), evidence {'on' if not args.no_evidence else 'off'}, one add + one delete "
        f"every {args.write_every:g} s during the load",
        "",
        "| requests | errors | req/s | p50 ms | p90 ms | p99 ms | max ms | writes (ok/all) | write p50 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {n_req:,} | {len(res['errors'])} | {result['req_per_s']:.1f} | {result['p50_ms']:.0f} | {result['p90_ms']:.0f} | "
        f"{result['p99_ms']:.0f} | {result['max_ms']:.0f} | {result['writes']['ok']}/{result['writes']['count']} | "
        f"{result['writes']['p50_ms']:.0f} |",
        "",
        f"Machine: {m['cpu']}, {m['logical_cores']} logical cores, {m['memory_gb']} GB RAM; Python {m['python']}; "
        f"capr sources {m['capr_source_sha1']}. CPU during the load: server {result['cpu']['server_cores']:.2f} cores, "
        f"clients {result['cpu']['client_cores']:.2f} cores, other processes {result['cpu']['other_processes_cores']:.2f} cores. "
        f"Server RSS {rss_before:,.0f} → {rss_after:,.0f} MB; startup {startup:.1f} s.",
    ]
    if res["errors"]:
        lines += ["", "error samples:"] + [f"  {e}" for e in res["errors"][:10]]
    st = result.get("schemathesis")
    if st:
        lines += ["", f"schemathesis ({st['command']}): {st['cases']} generated cases in {st['seconds']} s; "
                      f"5xx responses: {st['server_errors_5xx']}; unhandled exceptions in the server log: "
                      f"{st['server_logged_unhandled']}; other check failures: {st['other_failures'] or 'none'} "
                      f"(full report: {st['report']})"]
    print("\n".join(lines))
    if server_log_tail.strip():
        log("server log tail:\n" + server_log_tail)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
