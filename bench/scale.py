#!/usr/bin/env python3
"""A hospital's notes at scale (issue 55): build, writes, compaction, cold CLI and warm service searches of a
lexical capr index on generated clinical notes, side by side with bm25s on the same passages; one printed table.

    python -m bench.scale --passages 1.24M                       # the issue's corpus size (200k notes)
    python -m bench.scale --passages 10M --steps build,cli,serve # a subset of the steps
    python -m bench.scale --passages 1M --steps hybrid           # static vectors: ANN recall@10 vs exact, p50
    python -m bench.scale --passages 200k --steps milvus         # Milvus standalone + Ray encoding vs embedded
    python -m bench.scale --passages 20k --src /work/wt-index/src   # another checkout's capr

The notes are written by bench/scale_notes.py under --data (not in the repository) and reused while the generator is
unchanged. Every step runs in its own child process, bounded by --step-timeout; sizes are read from disk (every file
under the index, whatever its name). See bench/README.md for what each row measures.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import DEFAULT_DATA, DEFAULT_OUT, REPO, busy_cpu_seconds, latency_stats, log
from bench.scale_notes import extra_notes, generate, load_pools, make_queries, parse_count
from bench.scale_run import bench_cmd, capr_cmd, child_env, dir_bytes, run_measured, summarize

LEXICAL_STEPS = ("generate", "build", "cli", "serve", "add", "delete", "compact", "bm25s")
ALL_STEPS = (*LEXICAL_STEPS, "hybrid", "milvus")
QUERY_KINDS = ("free text", "entity+aspect", "free text, one patient", "entity+aspect, one patient")


def _search_args(q: dict[str, Any]) -> list[str]:
    args = [q["text"]] if "text" in q else ["-e", q["entity"], "-a", q["aspect"]]
    for field, value in (q.get("filters") or {}).items():
        args += ["--filter", f"{field}={value}"]
    return args


def _request(q: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in q.items() if k in ("text", "entity", "aspect", "filters")} | {"k": 10}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data = Path(args.data)
        self.work = Path(args.work) if args.work else self.data / f"work_{args.passages}_{args.label}"
        self.index = self.work / "lexical-index"
        self.timeout = args.step_timeout or 600 + args.passages / 400
        self.max_rss_mb = args.max_rss_gb * 1024
        self.results: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}
        self.queries: list[dict[str, Any]] = []

    # -- corpus -------------------------------------------------------------------------------------------------
    def step_generate(self) -> None:
        t0 = time.perf_counter()
        self.meta = generate(self.data, self.args.passages, self.args.seed, Path(self.args.data_dir))
        pools = load_pools(Path(self.args.data_dir), self.data)
        self.queries = make_queries(pools, self.meta, self.args.queries, self.args.seed)
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in self.queries))
        batch = extra_notes(pools, self.args.batch, self.args.seed + 1000, self.meta["patients"], "added-")
        (self.work / "add-batch.jsonl").write_text("".join(json.dumps(n) + "\n" for n in batch))
        self.results["corpus"] = {**{k: self.meta[k] for k in ("notes", "estimated_passages", "text_bytes",
                                                              "file_bytes", "patients", "path")},
                                  "ready_s": round(time.perf_counter() - t0, 1)}

    # -- capr ---------------------------------------------------------------------------------------------------
    def _run(self, argv: list[str], timeout_s: float | None = None) -> dict[str, Any]:
        return run_measured(argv, os.environ, timeout_s or self.timeout, max_rss_mb=self.max_rss_mb)

    def _counts(self, index: Path) -> dict[str, int]:
        code = ("import json, sys; from capr.store import open_store; s = open_store(sys.argv[1]); "
                "print(json.dumps(s.counts())); s.close()")
        out = subprocess.run([sys.executable, "-c", code, str(index)], capture_output=True, text=True, timeout=600)
        return json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr[-300:]}

    def _size(self, key: str, index: Path) -> None:
        b = dir_bytes(index)
        self.results[key] = {"index_bytes": b, "ratio_to_text": round(b / self.meta["text_bytes"], 3)}

    def step_build(self) -> None:
        shutil.rmtree(self.index, ignore_errors=True)
        log(f"[build] capr index {self.meta['path']} --lexical-only")
        r = self._run(capr_cmd("index", self.meta["path"], "--out", self.index, "--lexical-only"))
        r["counts"] = self._counts(self.index) if r["rc"] == 0 else {}
        n = r["counts"].get("passages", 0)
        r["passages_per_s"] = round(n / r["wall_s"]) if n else None
        r["notes_per_s"] = round(self.meta["notes"] / r["wall_s"]) if n else None
        self.results["build"] = r
        self._size("size_after_build", self.index)
        log(f"[build] {json.dumps(r)}")

    def step_add(self) -> None:
        r = self._run(capr_cmd("add", self.index, self.work / "add-batch.jsonl"))
        self.results["add"] = {**r, "notes": self.args.batch}
        log(f"[add] {json.dumps(self.results['add'])}")

    def step_delete(self) -> None:
        every = max(1, self.meta["notes"] // self.args.batch)
        ids = [f"note-{i:09d}" for i in range(0, self.meta["notes"], every)][: self.args.batch]
        argv = capr_cmd("delete", self.index, *[a for d in ids for a in ("--doc-id", d)])
        self.results["delete"] = {**self._run(argv), "notes": len(ids)}
        log(f"[delete] {json.dumps(self.results['delete'])}")

    def step_compact(self) -> None:
        self._size("size_before_compact", self.index)
        r = self._run(capr_cmd("compact", self.index))
        self.results["compact"] = {**r, "counts": self._counts(self.index) if r["rc"] == 0 else {}}
        self._size("size_after_compact", self.index)
        log(f"[compact] {json.dumps(self.results['compact'])}")

    def step_cli(self) -> None:
        out: dict[str, Any] = {}
        for kind in QUERY_KINDS:
            qs = [q for q in self.queries if q["kind"] == kind][: self.args.cli_runs]
            runs = [self._run(capr_cmd("search", self.index, *_search_args(q)), 300) for q in qs]
            out[kind] = summarize(runs)
            log(f"[cli] {kind}: {json.dumps(out[kind])}")
        self.results["cli"] = out

    def step_serve(self) -> None:
        import httpx

        from bench.bench_service import Server

        server = Server(self.index, 1, "scale-bench-token", self.work / "serve.log")
        res: dict[str, Any] = {}
        try:
            res["ready_s"] = round(server.wait(timeout=min(self.timeout, 900)), 2)
            res["rss_ready_mb"] = round(server.rss_mb())
            with httpx.Client(base_url=server.url, timeout=120) as client:
                for kind in QUERY_KINDS:
                    res[kind] = self._serve_kind(server, client, [q for q in self.queries if q["kind"] == kind])
                    log(f"[serve] {kind}: {json.dumps(res[kind])}")
            res["rss_after_mb"] = round(server.rss_mb())
        finally:
            server.stop()
        self.results["serve"] = res

    def _serve_kind(self, server: Any, client: Any, queries: list[dict[str, Any]]) -> dict[str, Any]:
        for q in queries[:3]:  # warm-up
            client.post("/search", json=_request(q))
        lat: list[float] = []
        errors: list[str] = []
        deadline = time.perf_counter() + self.args.serve_seconds
        for i, q in enumerate(queries[: self.args.serve_requests]):
            if time.perf_counter() > deadline:
                break
            if i % 10 == 0 and server.rss_mb() > self.max_rss_mb:
                errors.append(f"stopped: the server holds {server.rss_mb():,.0f} MB, over --max-rss-gb")
                break
            t0 = time.perf_counter()
            r = client.post("/search", json=_request(q))
            if r.status_code == 200:
                r.json()
                lat.append(time.perf_counter() - t0)
            else:
                errors.append(f"{r.status_code}: {r.text[:200]}")
        return {**latency_stats(lat), "errors": len(errors), "first_error": errors[0] if errors else None}

    # -- the alternative and the other parts ---------------------------------------------------------------------
    def _worker(self, step: str, module: str, *args: Any) -> None:
        out = self.work / f"{step}.json"
        out.unlink(missing_ok=True)
        r = self._run(bench_cmd(module, *args, "--result", out))
        self.results[step] = {**(json.loads(out.read_text()) if out.is_file() else {}), "process": r}
        log(f"[{step}] {json.dumps(self.results[step])[:2000]}")

    def step_bm25s(self) -> None:
        self._worker("bm25s", "bench.scale_bm25s", self.meta["path"], self.work / "queries.jsonl",
                     "--tmp", self.work)

    def step_hybrid(self) -> None:
        self._worker("hybrid", "bench.scale_hybrid", self.meta["path"], self.work / "queries.jsonl",
                     "--index", self.work / "hybrid-index", "--queries", self.args.queries,
                     "--lexical-index", self.index, "--text-bytes", self.meta["text_bytes"])

    def step_milvus(self) -> None:
        self._worker("milvus", "bench.scale_milvus", self.meta["path"], self.work / "queries.jsonl",
                     "--tmp", self.work / "milvus-tmp", "--queries", self.args.queries)

    def run(self, steps: list[str]) -> None:
        self.step_generate()
        for step in ALL_STEPS[1:]:
            if step in steps:
                t0, busy0, own0 = time.perf_counter(), busy_cpu_seconds(), _children_cpu()
                getattr(self, f"step_{step}")()
                wall = time.perf_counter() - t0
                other = (busy_cpu_seconds() - busy0 - (_children_cpu() - own0)) / max(wall, 1e-9)
                self.results.setdefault("other_cores", {})[step] = round(other, 2)


def _total_memory_gb() -> float:
    import psutil

    return psutil.virtual_memory().total / 2**30


def _children_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--passages", type=parse_count, default=parse_count("1M"), help="corpus size: 1M, 3M, 10M, 1.24M, 300k ...")
    ap.add_argument("--steps", default=",".join(LEXICAL_STEPS),
                    help=f"comma-separated subset of {','.join(ALL_STEPS)} (generate always runs; 'all' = every step)")
    ap.add_argument("--src", type=Path, default=REPO / "src", help="the capr sources the children import")
    ap.add_argument("--extra-path", action="append", default=[], help="a folder the children also import from "
                    "(repeatable), e.g. a dependency another checkout's capr needs")
    ap.add_argument("--label", default="", help="names the work folder (default: from --src)")
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("CAPR_SCALE_DATA", "/work/scale-data")),
                    help="where the generated notes (and the work folders) go")
    ap.add_argument("--work", type=Path, default=None, help="work folder (indexes, queries); default under --data")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA), help="the shared data (sentence sources)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=100, help="queries of each kind")
    ap.add_argument("--batch", type=int, default=1000, help="notes added, then notes deleted")
    ap.add_argument("--cli-runs", type=int, default=3, help="cold `capr search` processes per query kind")
    ap.add_argument("--serve-requests", type=int, default=100, help="timed requests per query kind")
    ap.add_argument("--serve-seconds", type=float, default=60, help="at most this long per query kind")
    ap.add_argument("--step-timeout", type=float, default=0, help="seconds per step (default 600 + passages/400)")
    ap.add_argument("--max-rss-gb", type=float, default=round(0.6 * _total_memory_gb(), 1),
                    help="a step whose processes hold more memory is killed and reported so (default 60%% of RAM)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (indexes) afterwards")
    ap.add_argument("--json-out", type=Path, default=None, help="results JSON (default bench/out/scale_<N>.json)")
    args = ap.parse_args(argv)
    steps = list(ALL_STEPS) if args.steps == "all" else [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(ALL_STEPS))
    if unknown:
        ap.error(f"unknown step(s) {', '.join(unknown)}; the steps are {', '.join(ALL_STEPS)}")
    args.src = args.src.resolve()
    args.label = args.label or ("this" if args.src == (REPO / "src").resolve() else args.src.parent.name)
    if "cli" in steps:
        # as `pip install` does: a cold command then reads capr's bytecode instead of compiling its sources (0.2 s
        # of a 10M cold search where PYTHONDONTWRITEBYTECODE keeps a checkout from ever caching it)
        compileall.compile_dir(str(args.src), quiet=1)
    saved = dict(os.environ)
    os.environ.update(child_env(args.src, args.extra_path))  # every child (and `capr serve`) imports --src's capr
    bench = Bench(args)
    t0 = time.perf_counter()
    try:
        bench.run(steps)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if not args.keep:
            shutil.rmtree(bench.work, ignore_errors=True)
    from bench.scale_report import report

    lines = report(bench.results, args, time.perf_counter() - t0)
    print("\n".join(lines))
    out = args.json_out or DEFAULT_OUT / f"scale_{args.passages}_{args.label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"results": bench.results, "table": lines, "args": {k: str(v) for k, v in vars(args).items()}},
                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
