#!/usr/bin/env python3
"""`capr serve` from process start to ready, and the first search after it says ready (issue 35).

    .venv/bin/python python -m bench.bench_ready                          # this checkout vs --baseline, 3 fresh starts each
    .venv/bin/python python -m bench.bench_ready --starts 5 --baseline da3168e

For each version (this checkout's src/, and --baseline's src/ taken from git), each index (the demo corpus with
MiniLM vectors; the same with a recorded second stage, as `capr adapt` records one) and each of --starts fresh
processes: the time from spawning `python -m capr serve` to the first /health answering 200 (the service's own
"ready"), then the wall time of the first default /search (hybrid, and the recorded second stage) and of a second
one. Every search asks a question no earlier run asked, so no cached query vector hides a model load. One discarded
start per version first fills the disk caches (synonym table) a machine keeps between runs. Loopback only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import REPO

OUT = REPO / "bench" / "out" / "ready"
QUESTIONS = [
    "how is gout treated", "what causes migraine attacks", "symptoms of iga nephropathy", "which inhaler for asthma",
    "diet for celiac disease", "when to anticoagulate atrial fibrillation", "blood sugar targets in type 2 diabetes",
    "heart failure in cardiomyopathy", "triggers of an asthma attack", "uric acid lowering drugs", "aura before headache",
    "kidney biopsy findings", "gluten free foods", "stroke risk with irregular heartbeat", "insulin for diabetes",
    "chest pain and shortness of breath", "prevention of gout flares", "migraine medicines", "wheeze at night",
    "protein in the urine", "metformin side effects", "palpitations and dizziness", "thickened heart muscle",
    "joint swelling in the big toe", "steroid inhaler dose", "weight loss and diarrhea", "blood in the urine",
    "beta blockers for heart rhythm", "nausea with headache", "fasting glucose test",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_indexes(work: Path) -> dict[str, Path]:
    import importlib.util

    # the tests' index (first documents of the demo corpus), read from their helper module
    spec = importlib.util.spec_from_file_location("service_support", REPO / "tests" / "service_support.py")
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    build_dense_demo_index = support.build_dense_demo_index

    from capr.cli import demo_corpus_dir

    return {"hybrid": build_dense_demo_index(demo_corpus_dir(), work / "dense", documents=36),
            "hybrid + second stage bi:minilm": build_dense_demo_index(demo_corpus_dir(), work / "second", "bi:minilm", 36)}


def one_start(src: Path, index: Path, questions: list[str], env: dict[str, str]) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "capr", "serve", "--index", str(index), "--port", str(port),
                             "--log-level", "warning"], env={**env, "PYTHONPATH": str(src)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(timeout=120) as c:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"capr serve exited: {proc.stderr.read()[-2000:]}")
                try:
                    if c.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
            ready = time.perf_counter() - t0
            lat = []
            for q in questions:
                t = time.perf_counter()
                r = c.post(url + "/search", json={"text": q})
                lat.append(time.perf_counter() - t)
                r.raise_for_status()
        return {"ready_s": ready, "first_ms": lat[0] * 1e3, "second_ms": lat[1] * 1e3,
                "first_answer_s": ready + lat[0]}
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=3, help="fresh processes per version and index")
    ap.add_argument("--baseline", default="da3168e", help="git revision to compare with ('' : none)")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=OUT))
    env = {**os.environ, "CAPR_CACHE": str(OUT / "cache"), "HF_HUB_OFFLINE": "1"}
    os.environ.update(CAPR_CACHE=env["CAPR_CACHE"], HF_HUB_OFFLINE="1")
    versions = {"this checkout": REPO / "src"}
    if args.baseline:
        base = work / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline, "src"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        versions[f"baseline {args.baseline}"] = base / "src"
    try:
        indexes = build_indexes(work)
        questions = iter(QUESTIONS * 10)
        rows = []
        for name, src in versions.items():
            one_start(src, indexes["hybrid"], [next(questions), next(questions)], env)  # fills the disk caches
            for label, index in indexes.items():
                runs = [one_start(src, index, [next(questions), next(questions)], env) for _ in range(args.starts)]
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                rows.append((name, label, med, runs))
                print(f"  {name} · {label}: " + ", ".join(f"{r['ready_s']:.1f}s/{r['first_ms']:.0f}ms" for r in runs),
                      flush=True)
        print("\n| version | default search | start → /health 200, p50 | first /search after it, p50 | second /search, p50 "
              "| start → first answer, p50 |\n|---|---|---|---|---|---|")
        for name, label, med, runs in rows:
            print(f"| {name} | {label} | {med['ready_s']:.2f} s | {med['first_ms']:.0f} ms | {med['second_ms']:.0f} ms "
                  f"| {med['first_answer_s']:.2f} s |")
        print(f"\n{args.starts} fresh `capr serve` processes per row; 36 demo documents; "
              f"wall times seen by an httpx client on loopback")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
