"""What the likely diagnoses (the differential: profiles, passages, similar coded cases) cost `capr cases similar`:
the same descriptions with `--diagnoses 0` (cases only) and with the default (10 likely diagnoses), side by side in
one run.

- **cold**: fresh `python -m capr cases similar` processes, the two settings alternating run by run (wall time,
  peak RSS): what one command costs a user;
- **warm**: one CaseFinder (as the service holds), each description searched with both settings after a first
  call that reads the label space (per-call latency p50 / p95): what a request costs the service.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_cases --index CASE_INDEX [--runs 5] [--queries 50] \
        [--descriptions codiesp|medqa]

The descriptions: CodiEsp dev cases (never in a case index: `capr case-index` holds dev out), first 80 words; or
the MedQA dev vignettes that ask for the most likely diagnosis, whole (capr.cases.diagnosis_eval).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO, percentile


def descriptions(data_dir: Path, n: int, which: str = "codiesp") -> list[str]:
    if which == "medqa":
        from capr.cases.data import read_medqa
        from capr.cases.diagnosis_eval import diagnosis_vignettes

        return [q.description for q in diagnosis_vignettes(read_medqa(data_dir))][:n]
    from capr.cases.data import CODIESP_FILE
    from capr.corpus import Format, read_documents

    dev = [d for d in read_documents(data_dir / CODIESP_FILE, Format.codiesp) if d.metadata["split"] == "dev"]
    return [" ".join(d.text.split()[:80]) for d in dev[:n]]


def cold(index: Path, text: str, diagnoses: int) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one `capr cases similar` process."""
    t = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-m", "capr", "cases", "similar", text, "--index", str(index), "-k", "5",
                           "--diagnoses", str(diagnoses), "--json"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    rss = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
    return wall, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--descriptions", choices=("codiesp", "medqa"), default="codiesp")
    args = ap.parse_args()
    from capr.cases.similar import CaseFinder
    from capr.index import Index

    texts = descriptions(args.data_dir, max(args.queries, args.runs), args.descriptions)
    settings = (("cases only (--diagnoses 0)", 0), ("default (10 likely diagnoses)", 10))
    print(f"# bench_cases — {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, index {args.index}, "
          f"{args.descriptions} descriptions\n")
    walls: dict[int, list[float]] = {n: [] for _, n in settings}
    rss: dict[int, float] = {n: 0.0 for _, n in settings}
    for i in range(args.runs):
        for _, n in settings if i % 2 == 0 else settings[::-1]:
            w, r = cold(args.index, texts[i], n)
            walls[n].append(w)
            rss[n] = max(rss[n], r)
    finder = CaseFinder(Index.load(args.index))
    t = time.perf_counter()
    finder.similar(texts[0], k=5, diagnoses=10)
    first = time.perf_counter() - t
    lat: dict[int, list[float]] = {n: [] for _, n in settings}
    for text in texts[: args.queries]:
        for _, n in settings:
            t = time.perf_counter()
            finder.similar(text, k=5, diagnoses=n)
            lat[n].append(time.perf_counter() - t)
    print(f"| setting | cold p50 (s, {args.runs} runs) | cold peak RSS (MB) | warm p50 (ms) | warm p95 (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, n in settings:
        print(f"| {name} | {statistics.median(walls[n]):.2f} | {rss[n]:.0f} | {1e3 * statistics.median(lat[n]):.0f} | "
              f"{1e3 * percentile(lat[n], 95):.0f} |")
    print(f"\nwarm: {args.queries} descriptions, each with both settings; the first call (label space, "
          f"{len(finder.name_matcher().codes):,} codes; profiles, {len(finder.differential().table):,} conditions) "
          f"took {first:.2f} s")


if __name__ == "__main__":
    main()
