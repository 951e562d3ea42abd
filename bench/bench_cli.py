"""Cold wall time and peak RSS of each command a user runs, at this checkout and at an earlier commit, in one run:
index a small folder (the demo corpus), search it lexical / hybrid / ⟨entity, aspect⟩ / with a recorded second
stage, add one document, stats. Every run is a fresh `python -m capr` process (nothing loaded, files in the page
cache), the two checkouts alternating run by run so that load from other processes falls on both alike.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_cli [--base da3168e] [--runs 5]

Each checkout gets a fresh CAPR_CACHE, as on a new machine: the first `capr index` fills it (embeddings, and at
this checkout the ONNX query encoder and the entity synonym table). The index with a second stage records
`bi:minilm,bi:BI` as `capr adapt` does, BI being MiniLM with slightly perturbed weights (another model: its own
export and session), and its passages' vectors are put in the embedding cache as `capr adapt` does
(warm_passage_vectors). The earlier commit is read with `git archive` (no worktree is registered).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, busy_cpu_seconds


def own_children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


QUERY = "how is gout treated"
NEW_DOC = """Plantar fasciitis

## Symptoms
Stabbing heel pain with the first steps in the morning that eases with walking.

## Treatment
Stretching of the calf and plantar fascia, supportive shoes and night splints; most people recover within a year.
"""

# The index with a second stage, built by the checkout under test (its own API, as `capr adapt` would).
SECOND_STAGE_SETUP = r"""
import sys
from pathlib import Path
from capr.corpus import read_documents
from capr.index import IndexWriter, load_index
from capr.models import EncoderConfig
from capr.search.second_stage import load_reranker, warm_passage_vectors
source, out, spec = sys.argv[1:4]
writer = IndexWriter(out, dense=EncoderConfig())
writer.dense_info["reranker"] = {"spec": spec, "depth": 20}
with writer as w:
    for doc in read_documents(Path(source)):
        w.add(doc)
warm_passage_vectors(load_reranker(spec), load_index(out))
"""


def perturbed_minilm(target: Path) -> Path:
    """MiniLM with its weights nudged (×(1 + 1e-3) on one matrix): a second model, as a trained bi-encoder is."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from capr.models.loading import resolve_model

    source = Path(resolve_model("minilm"))
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
    weights = load_file(str(source / "model.safetensors"))
    name = next(k for k in sorted(weights) if k.endswith("attention.output.dense.weight"))
    weights[name] = (weights[name] * np.float32(1.001)).astype(weights[name].dtype)
    save_file(weights, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def run(src: Path, cache: Path, args: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MB, exit status, stderr tail) of one fresh `python ARGS` process."""
    env = {**os.environ, "PYTHONPATH": str(src), "CAPR_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        # wait4: this child's own peak RSS (getrusage(RUSAGE_CHILDREN) is the largest of every child so far)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return wall, usage.ru_maxrss / 1024, proc.returncode, err.read()[-400:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="da3168e", help="the earlier commit")
    ap.add_argument("--runs", type=int, default=5, help="cold runs of each search/add/stats command per checkout")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one, removed)")
    args = ap.parse_args()

    from capr.demo import demo_corpus_dir

    work = args.work or Path(tempfile.mkdtemp(prefix="bench-cli-"))
    work.mkdir(parents=True, exist_ok=True)
    base_src = work / "base"
    if not base_src.exists():
        base_src.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.base], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base_src)], input=archive, check=True)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "src"], capture_output=True, text=True).stdout.strip()
    sides = {f"before ({args.base})": base_src / "src", f"after ({head}{'+changes' if dirty else ''})": REPO / "src"}
    demo = demo_corpus_dir()
    bi = work / "bi-perturbed"
    if not bi.exists():
        # in a child: loading the weights here would grow this process, and a child's peak RSS counts its parent's
        # pages up to its exec, so every later row would read at least this process's size
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from bench.bench_cli import "
                        "perturbed_minilm; perturbed_minilm(Path(sys.argv[1]))", str(bi)], check=True, cwd=REPO)
    spec = f"bi:minilm,bi:{bi}"
    new_doc = work / "new-doc.txt"
    new_doc.write_text(NEW_DOC)

    cpu0, load0, t_start = busy_cpu_seconds() - own_children_cpu_seconds(), os.getloadavg(), time.time()
    rows: dict[str, dict[str, list[tuple[float, float]]]] = {}
    caches = {}
    for side, src in sides.items():  # index: once per checkout, on its fresh cache (what a new user sees)
        slug = side.split()[0]
        caches[side] = work / f"cache-{slug}"
        shutil.rmtree(caches[side], ignore_errors=True)
        shutil.rmtree(work / f"idx-{slug}", ignore_errors=True)
        wall, rss, rc, err = run(src, caches[side], ["-m", "capr", "index", str(demo), "--out", str(work / f"idx-{slug}")])
        assert rc == 0, err
        rows.setdefault("index the demo folder (36 docs), fresh cache", {})[side] = [(wall, rss)]
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", SECOND_STAGE_SETUP, str(demo), str(work / f"idx2-{slug}"), spec],
                              env={**os.environ, "PYTHONPATH": str(src), "CAPR_CACHE": str(caches[side]),
                                   "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        print(f"{side}: index with a second stage + its passage vectors: {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    commands = {
        "search lexical (-r bm25)": lambda idx, idx2: ["search", str(idx), QUERY, "-r", "bm25"],
        "search hybrid (default)": lambda idx, idx2: ["search", str(idx), QUERY],
        "search ⟨entity, aspect⟩ (hybrid)": lambda idx, idx2: ["search", str(idx), "-e", "gout", "-a", "treatment"],
        "search with the recorded second stage": lambda idx, idx2: ["search", str(idx2), QUERY],
        "add one document": lambda idx, idx2: ["add", str(idx), str(new_doc)],
        "stats (of the demo folder)": lambda idx, idx2: ["stats", str(demo)],
        "--help": lambda idx, idx2: ["--help"],
    }
    for label, make in commands.items():
        for _ in range(args.runs):
            for side, src in sides.items():
                slug = side.split()[0]
                wall, rss, rc, err = run(src, caches[side], ["-m", "capr", *make(work / f"idx-{slug}", work / f"idx2-{slug}")])
                assert rc == 0, (label, side, err)
                rows.setdefault(label, {}).setdefault(side, []).append((wall, rss))
    cpu1, load1 = busy_cpu_seconds() - own_children_cpu_seconds(), os.getloadavg()

    names = list(sides)
    print(f"\n{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; {args.runs} cold runs per "
          f"command and checkout (index: 1), alternating; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t_start))}")
    spent = time.time() - t_start
    print(f"load average {load0[0]:.1f} → {load1[0]:.1f}; other processes used {cpu1 - cpu0:.0f} of the "
          f"{spent * (os.cpu_count() or 1):.0f} CPU s the {spent:.0f} s run had\n")
    print(f"| command | {names[0]} first | p50 | peak RSS | {names[1]} first | p50 | peak RSS | p50 after/before |")
    print("|---|---|---|---|---|---|---|---|")
    p50 = {}
    for label, by_side in rows.items():
        cells = []
        for side in names:
            walls = [w for w, _ in by_side[side]]
            p50[label, side] = statistics.median(walls)
            cells += [f"{walls[0]:.2f} s", f"{p50[label, side]:.2f} s", f"{max(r for _, r in by_side[side]):.0f} MB"]
        ratio = p50[label, names[1]] / p50[label, names[0]]
        print(f"| {label} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    for side in names:
        hybrid = p50["search hybrid (default)", side] / p50["search lexical (-r bm25)", side]
        second = p50["search with the recorded second stage", side] / p50["search lexical (-r bm25)", side]
        print(f"\n{side}: hybrid / lexical p50 = {hybrid:.2f}; with second stage / lexical = {second:.2f}", end="")
    print()
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"base": args.base, "head": head}), file=sys.stderr)


if __name__ == "__main__":
    main()
