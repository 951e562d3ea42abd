#!/usr/bin/env python3
"""Near-real-time writes (issue 19): one-document add / replace / delete through `capr serve` on a 200k-passage
lexical index, alone and during a 50-client search load, and the search latency with and without those writes.
Optionally (--random-ops) the library check: N single-document adds, replaces and deletes in random order with
the merge policy on, then every query's results against a fresh rebuild, and the segment count after each commit.

    .venv/bin/python -m bench.bench_nrt                              # 200,000 passages, 50 clients
    .venv/bin/python -m bench.bench_nrt --passages 5000 --clients 10 --duration 10 --writes 10
    .venv/bin/python -m bench.bench_nrt --random-ops 1000 --skip-service
    PYTHONPATH=/old/capr/src .venv/bin/python -m bench.bench_nrt --server-src /old/capr/src   # another capr's server

The corpus is bench_bm25.py's (cached under bench/out/); the index is built once per code version with
IndexWriter(..., dense=None) exactly as bench_service.py builds it (one document per passage) and copied before
each run, so every run starts from the same single-segment index. Writes are sequential HTTP requests from one
client (the latency a client sees, queueing in the server included); search clients are bench_service.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_service import Server, build_or_reuse_index, pct, search_client
from bench.common import DEFAULT_DATA, DEFAULT_OUT, busy_cpu_seconds, log, machine_info, read_jsonl_gz
from bench.corpus import prepare_data

WRITE_KINDS = ("add", "replace", "delete")


def _doc(n: int, version: int) -> dict[str, str]:
    return {"doc_id": f"nrt-{n}", "title": "NRT write",
            "text": f"PLAN: bench document {n} (version {version}) about xylocardiac syndrome and its treatment."}


async def _write_once(client, token: str, n: int, kind: str) -> tuple[int, float]:
    headers = {"Authorization": f"Bearer {token}"}
    t0 = time.perf_counter()
    if kind == "delete":
        r = await client.delete(f"/documents/nrt-{n}", headers=headers)
    else:
        r = await client.post("/documents", json=_doc(n, 1 if kind == "add" else 2), headers=headers)
    return r.status_code, time.perf_counter() - t0


async def writes_alone(url: str, token: str, n: int) -> dict[str, list[float]]:
    import httpx

    lat: dict[str, list[float]] = {k: [] for k in WRITE_KINDS}
    errors: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for i in range(n):
            for kind in WRITE_KINDS:
                status, secs = await _write_once(client, token, 10_000_000 + i, kind)
                if status in (200, 201):
                    lat[kind].append(secs)
                else:
                    errors.append(f"{kind} {status}")
    return {"lat": lat, "errors": errors}


async def load(url: str, token: str, queries: list[str], clients: int, duration: float, k: int, evidence: bool,
               write_pause: float | None) -> dict[str, Any]:
    """``clients`` searchers for ``duration`` s; with ``write_pause``, one writer doing add, replace, delete of
    a new document in turn, pausing that long between writes."""
    import httpx

    lat: list[float] = []
    errors: list[str] = []
    wlat: dict[str, list[float]] = {k: [] for k in WRITE_KINDS}
    deadline = time.perf_counter() + duration
    limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        def searcher(i: int):
            return search_client(client, i, queries, k, evidence, deadline, lat, errors, label="search ")

        async def writer() -> None:
            n = 0
            while time.perf_counter() + 2 * write_pause < deadline:
                n += 1
                for kind in WRITE_KINDS:
                    await asyncio.sleep(write_pause)
                    try:
                        status, secs = await _write_once(client, token, n, kind)
                        if status in (200, 201):
                            wlat[kind].append(secs)
                        else:
                            errors.append(f"write {kind} {status}")
                    except httpx.HTTPError as e:
                        errors.append(f"write {kind} {type(e).__name__}: {e}")

        t0 = time.perf_counter()
        tasks = [asyncio.create_task(searcher(i)) for i in range(clients)]
        if write_pause is not None:
            tasks.append(asyncio.create_task(writer()))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    return {"lat": lat, "errors": errors, "wlat": wlat, "wall_s": wall}


def run_service(args: argparse.Namespace, index_dir: Path, queries: list[str], out: Path) -> dict[str, Any]:
    import httpx

    work = Path(tempfile.mkdtemp(prefix="capr-nrt-", dir=args.tmp_dir))
    try:
        idx = work / "idx"
        shutil.copytree(index_dir, idx)
        token = secrets.token_urlsafe(24)
        env_src = args.server_src
        old = os.environ.get("PYTHONPATH")
        if env_src:
            os.environ["PYTHONPATH"] = env_src
        try:
            server = Server(idx, 1, token, out / "nrt_server.log", tuple(args.serve_args.split()))
        finally:
            if env_src:
                if old is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = old
        res: dict[str, Any] = {}
        try:
            res["startup_s"] = server.wait()
            for q in queries[:20]:
                httpx.post(server.url + "/search", json={"text": q, "k": args.k, "evidence": True}, timeout=120)
            log(f"writes alone: {args.writes} × add, replace, delete ...")
            res["alone"] = asyncio.run(writes_alone(server.url, token, args.writes))
            log(f"search load without writes: {args.clients} clients, {args.duration:.0f} s ...")
            busy0, t0 = busy_cpu_seconds(), time.perf_counter()
            res["no_writes"] = asyncio.run(load(server.url, token, queries, args.clients, args.duration, args.k, True, None))
            res["no_writes"]["other_cores"] = (busy_cpu_seconds() - busy0) / (time.perf_counter() - t0)
            log(f"search load with writes (one every {args.write_pause:g} s) ...")
            busy0, t0 = busy_cpu_seconds(), time.perf_counter()
            res["with_writes"] = asyncio.run(load(server.url, token, queries, args.clients, args.duration, args.k, True,
                                                  args.write_pause))
            res["with_writes"]["other_cores"] = (busy_cpu_seconds() - busy0) / (time.perf_counter() - t0)
            gen = httpx.get(server.url + "/health", timeout=10).json()
            res["health_after"] = gen
        finally:
            server.stop()
        segs = json.loads((idx / (idx / "CURRENT").read_text().strip() / "manifest.json").read_text())["segments"]
        res["segments_after"] = len(segs)
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_random_ops(args: argparse.Namespace, index_dir: Path, queries: list[str], passages: list[str]) -> dict[str, Any]:
    """N single-document commits in random order through the library (as the service writes), then results
    against a fresh rebuild of the live documents."""
    import numpy as np

    from capr.corpus.segment import SegmenterConfig
    from capr.index import AnalyzerConfig, Index, IndexWriter, MergePolicy
    from capr.records import Document, Section
    from capr.search import SearchOptions, Searcher

    def doc(doc_id: str, text: str) -> Document:
        return Document(doc_id=doc_id, title="", text=text, sections=[Section(heading="", aspect="", start=0, end=len(text))])

    work = Path(tempfile.mkdtemp(prefix="capr-nrt-ops-", dir=args.tmp_dir))
    try:
        root = work / "inc"
        shutil.copytree(index_dir, root)
        rng = random.Random(args.seed)
        index = Index.load(root)
        n0 = len(passages)
        live_new: list[str] = []
        texts: dict[str, str] = {}
        deleted: set[str] = set()
        seg_counts: list[tuple[int, int]] = []
        kinds = {"add": 0, "replace": 0, "delete": 0}
        lat: dict[str, list[float]] = {k: [] for k in kinds}
        policy = MergePolicy()
        for op in range(args.random_ops):
            r = rng.random()
            t0 = time.perf_counter()
            with IndexWriter(root, mode="update", base=index) as w:
                if r < 0.3:  # delete a live document: an original passage or one added here
                    if live_new and rng.random() < 0.5:
                        d = live_new.pop(rng.randrange(len(live_new)))
                    else:
                        while (d := f"p{rng.randrange(n0)}") in deleted:
                            pass
                    w.delete(d)
                    deleted.add(d)
                    texts.pop(d, None)
                    kind = "delete"
                elif r < 0.5:  # replace: new text for a live document
                    while (d := f"p{rng.randrange(n0)}") in deleted:
                        pass
                    texts[d] = passages[rng.randrange(n0)] + f" revision {op}"
                    w.add(doc(d, texts[d]))
                    kind = "replace"
                else:
                    d = f"new-{op}"
                    texts[d] = passages[rng.randrange(n0)]
                    w.add(doc(d, texts[d]))
                    live_new.append(d)
                    kind = "add"
            index = Index.load(root, previous=index)
            lat[kind].append(time.perf_counter() - t0)
            kinds[kind] += 1
            seg_counts.append((len(index.segments), index.live_count()))  # counts would also count the vocabulary
        log(f"random ops done: {kinds}; segments now {len(index.segments)}; rebuilding ...")
        fresh_root = work / "fresh"
        t0 = time.perf_counter()
        with IndexWriter(fresh_root, segmenter=SegmenterConfig(max_tokens=0, include_title=False), analyzer=AnalyzerConfig()) as w:
            for si, seg in enumerate(index.segments):  # the live documents in their current order
                for i in np.flatnonzero(index.seg_doc_live[si]):
                    d = seg.doc_ids[i]
                    w.add(doc(d, texts[d] if d in texts else passages[int(d[1:])]))
        rebuild_s = time.perf_counter() - t0
        fresh = Index.load(fresh_root)
        a, b = Searcher(index), Searcher(fresh)
        same_lists = max_diff = 0
        diffs = []
        for q in queries:
            ha = a.search(q, SearchOptions(k=10)).hits
            hb = b.search(q, SearchOptions(k=10)).hits
            if [h.pid for h in ha] == [h.pid for h in hb]:
                same_lists += 1
            else:
                diffs.append(q)
            if ha and hb:
                max_diff = max(max_diff, max(abs(x.score - y.score) for x, y in zip(ha, hb)))
        rows_equal = [seg.pids[i] for si, seg in enumerate(index.segments) for i in np.flatnonzero(index.seg_live[si])] == \
                     [seg.pids[i] for seg in fresh.segments for i in range(seg.n_passages)]
        bounds = [policy.bound(n) for _, n in seg_counts]
        return {"ops": kinds, "lat": lat, "segments_max": max(c for c, _ in seg_counts),
                "segments_final": len(index.segments), "bound_min": min(bounds), "bound_final": bounds[-1],
                "within_bound": all(c <= bnd for (c, _), bnd in zip(seg_counts, bounds)),
                "queries": len(queries), "same_top10": same_lists, "max_score_diff": max_diff, "rows_equal": rows_equal,
                "counts_equal": index.counts == fresh.counts, "rebuild_s": rebuild_s, "differing": diffs[:5]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _p(values: list[float], q: float) -> str:
    return f"{pct(values, q):.0f}" if values else "–"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--passages", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of each search load (with, without writes)")
    ap.add_argument("--writes", type=int, default=30, help="add/replace/delete triples measured alone")
    ap.add_argument("--write-pause", type=float, default=0.5, help="seconds between writes during the load")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--index", type=Path, default=None, help="a prebuilt index of the corpus (default: build/reuse in bench/out)")
    ap.add_argument("--server-src", default=None, help="PYTHONPATH for the server process (compare another capr)")
    ap.add_argument("--skip-service", action="store_true")
    ap.add_argument("--serve-args", default="", help="extra `capr serve` options, e.g. '--search-concurrency 1'")
    ap.add_argument("--random-ops", type=int, default=0, help="single-document commits in random order, then compare with a rebuild")
    ap.add_argument("--tmp-dir", default=None)
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA))
    ap.add_argument("--out-dir", default=str(DEFAULT_OUT))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rebuild-corpus", action="store_true")
    args = ap.parse_args(argv)

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    ppath, qpath, corpus = prepare_data(args)
    index_dir = args.index or build_or_reuse_index(ppath, out, args.passages, args.seed)[0]
    queries = [q["text"] for q in read_jsonl_gz(qpath)]
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine,
                              "index": str(index_dir), "server_src": args.server_src}
    lines = [f"bench_nrt: {args.passages:,}-passage lexical index, {args.clients} search clients (evidence on), "
             f"{result['date']}, {machine['cpu']} ({machine['logical_cores']} logical cores)", ""]
    if not args.skip_service:
        res = run_service(args, index_dir, queries, out)
        result["service"] = res
        alone, nw, ww = res["alone"], res["no_writes"], res["with_writes"]
        lines += ["| | add p50 | add p95 | replace p50 | replace p95 | delete p50 | delete p95 | search req/s | search p50 | search p99 | errors |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines.append("| writes alone (ms) | " + " | ".join(f"{_p(alone['lat'][k], 50)} | {_p(alone['lat'][k], 95)}" for k in WRITE_KINDS)
                     + f" | – | – | – | {len(alone['errors'])} |")
        for name, r in (("search load, no writes", nw), ("search load + writes", ww)):
            wl = " | ".join(f"{_p(r['wlat'][k], 50)} | {_p(r['wlat'][k], 95)}" for k in WRITE_KINDS)
            lines.append(f"| {name} (ms) | {wl} | {len(r['lat']) / r['wall_s']:.1f} | {_p(r['lat'], 50)} | {_p(r['lat'], 99)} | "
                         f"{len(r['errors'])} |")
        p99n, p99w = pct(nw["lat"], 99), pct(ww["lat"], 99)
        lines += ["", f"search p99 with writes / without: {p99w / p99n:.2f}×; writes during the load: "
                      f"{sum(len(v) for v in ww['wlat'].values())}; segments after the run: {res['segments_after']}; "
                      f"CPU busy (all processes) during the loads: {nw['other_cores']:.2f} / {ww['other_cores']:.2f} cores"]
        errs = alone["errors"] + nw["errors"] + ww["errors"]
        if errs:
            lines += ["error samples:"] + [f"  {e}" for e in errs[:10]]
        for r in (nw, ww):
            r["lat_summary"] = {"n": len(r["lat"]), "p50": pct(r["lat"], 50), "p99": pct(r["lat"], 99)}
            del r["lat"]
    if args.random_ops:
        passages = read_jsonl_gz(ppath)
        r = run_random_ops(args, index_dir, queries, passages)
        result["random_ops"] = r
        lat = r.pop("lat")
        lines += ["", f"{args.random_ops} single-document commits in random order ({r['ops']}), merge policy on "
                      f"(MergePolicy(): merge factor 5, floor 1,000): library commit + reader refresh p50/p95 ms: "
                      + ", ".join(f"{k} {_p(v, 50)}/{_p(v, 95)}" for k, v in lat.items()),
                  f"segments: at most {r['segments_max']} after any commit, {r['segments_final']} at the end; bound "
                  f"(merge_factor−1)·(⌈log_F(N/floor)⌉+1) = {r['bound_final']} (held after every commit: {r['within_bound']})",
                  f"vs a fresh rebuild of the live documents ({r['rebuild_s']:.0f} s): same rows in the same order: "
                  f"{r['rows_equal']}; same counts: {r['counts_equal']}; same top-10 pids for {r['same_top10']}/{r['queries']} "
                  f"queries; largest score difference {r['max_score_diff']:.2e}"]
    (out / f"nrt_{args.passages}.json").write_text(json.dumps(result, indent=1, default=str))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
