#!/usr/bin/env python3
"""EHR-scale indexing: synthetic MIMIC-III NOTEEVENTS and MIMIC-IV-Note files (MTSamples text with MIMIC
de-identification placeholders inserted), indexed lexical-only; docs/s, peak RSS and the latency of a
search scoped to one patient.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_ehr                 # 100,000 notes per format
    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_ehr --notes 5000 --queries 50   # quick check

The files are generated into a temporary folder (never the repository) and deleted afterwards. Each
format is read and indexed in its own child process, so its peak RSS (ru_maxrss) is its own; a second
child only streams the file through the reader and segmenter (no index), which shows what the reading
side alone holds. Search latency is measured in the parent on the loaded index: ⟨entity, aspect⟩
queries, each scoped to one patient with --filter subject_id=N, against the same queries unscoped.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DEFAULT_DATA, log

MIMIC3_HEADER = ["ROW_ID", "SUBJECT_ID", "HADM_ID", "CHARTDATE", "CHARTTIME", "STORETIME", "CATEGORY", "DESCRIPTION",
                 "CGID", "ISERROR", "TEXT"]
MIMIC4_HEADER = ["note_id", "subject_id", "hadm_id", "note_type", "note_seq", "charttime", "storetime", "text"]
CATEGORIES3 = [("Discharge summary", "Report"), ("Radiology", "CHEST (PORTABLE AP)"), ("Nursing", "Nursing Progress Note"),
               ("Physician ", "Physician Resident Progress Note"), ("Echo", "Report")]
NOTES_PER_PATIENT = 10
ERROR_RATE = 0.002  # MIMIC-III flags about 0.2% of notes ISERROR

_TITLE_RE = re.compile(r"\b(Mr|Mrs|Ms|Dr)\.\s+[A-Z][a-z]+")
_DATE_RE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{2,4})\b")


def mtsamples_texts(data_dir: Path) -> list[tuple[str, str]]:
    from capr.corpus import ReadReport
    from capr.corpus.mtsamples import read_mtsamples

    path = data_dir / "mtsamples" / "mtsamples.csv.gz"
    if not path.exists():
        sys.exit(f"{path} not found: pass --data-dir (the shared data folder)")
    return [(d.title, d.text) for d in read_mtsamples(path, ReadReport())]


def deidentify3(text: str, rng: random.Random) -> str:
    """MIMIC-III style: names, dates and places as [** ... **] surrogates."""
    text = _TITLE_RE.sub(lambda m: f"{m.group(1)}. [**Known lastname {rng.randint(100, 9999)}**]", text)
    text = _DATE_RE.sub(lambda m: f"[**{2100 + rng.randint(0, 99)}-{m.group(1)}-{m.group(2)}**]", text)
    y = 2100 + rng.randint(0, 99)
    header = (f"Admission Date:  [**{y}-{rng.randint(1, 12)}-{rng.randint(1, 28)}**]     "
              f"Discharge Date:   [**{y}-{rng.randint(1, 12)}-{rng.randint(1, 28)}**]\n\n"
              f"Service: MEDICINE\n\n")
    return header + text + f"\n\nFollow up with Dr. [**First Name8 (NamePattern2) {rng.randint(100, 999)}**] at [**Hospital1 18**].\n"


def deidentify4(text: str, rng: random.Random) -> str:
    """MIMIC-IV style: every identifier is ___."""
    text = _TITLE_RE.sub(lambda m: f"{m.group(1)}. ___", text)
    text = _DATE_RE.sub("___", text)
    return ("Name:  ___                     Unit No:   ___\n \nAdmission Date:  ___              Discharge Date:   ___\n \n"
            "Date of Birth:  ___             Sex:   F\n \n" + text + "\n \nFollowup Instructions:\n___\n")


def generate(kind: str, out: Path, n: int, texts: list[tuple[str, str]], seed: int) -> dict:
    """Writes n notes; returns the ground truth the latency queries use (patient → note titles)."""
    rng = random.Random(seed)
    n_patients = max(1, n // NOTES_PER_PATIENT)
    patients: dict[str, list[str]] = {}
    with gzip.open(out, "wt", encoding="utf-8", newline="", compresslevel=1) as fh:
        w = csv.writer(fh)
        w.writerow(MIMIC3_HEADER if kind == "mimic3" else MIMIC4_HEADER)
        for i in range(n):
            title, text = texts[rng.randrange(len(texts))]
            subject = str(10000 + rng.randrange(n_patients))
            hadm = str(100000 + rng.randrange(n_patients * 2))
            y, mo, d = 2100 + rng.randint(0, 99), rng.randint(1, 12), rng.randint(1, 28)
            hh, mm = rng.randint(0, 23), rng.randint(0, 59)
            if len(patients.setdefault(subject, [])) < 20:
                patients[subject].append(title)
            if kind == "mimic3":
                cat, desc = CATEGORIES3[rng.randrange(len(CATEGORIES3))]
                charttime = "" if cat == "Discharge summary" else f"{y}-{mo:02d}-{d:02d} {hh:02d}:{mm:02d}:00"
                err = "1" if rng.random() < ERROR_RATE else ""
                w.writerow([i + 1, subject, hadm, f"{y}-{mo:02d}-{d:02d}", charttime, "", cat, desc, "", err,
                            deidentify3(text, rng)])
            else:
                rr = rng.random() < 0.3
                note_type = "RR" if rr else "DS"
                w.writerow([f"{subject}-{note_type}-{i}", subject, hadm, note_type, rng.randint(1, 40),
                            f"{y}-{mo:02d}-{d:02d} {hh:02d}:{mm:02d}:00", f"{y}-{mo:02d}-{d:02d} {hh:02d}:{mm:02d}:00",
                            deidentify4(text, rng)])
    return patients


# -- children ----------------------------------------------------------------------------------
def child_index(src: str, out: str) -> None:
    from capr.corpus import ReadReport, read_documents
    from capr.index import IndexWriter

    report = ReadReport()
    t0 = time.perf_counter()
    n_docs = 0
    with IndexWriter(out, report=report) as w:
        for doc in read_documents(src, report=report):
            w.add(doc)
            n_docs += 1
        n_pass = w.n_passages
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"docs": n_docs, "passages": n_pass, "seconds": secs, "peak_rss_mb": rss,
                      "flagged": report.flagged, "summary": report.summary()}))


def child_read(src: str) -> None:
    from capr.corpus import ReadReport, read_documents
    from capr.corpus.segment import segment

    t0 = time.perf_counter()
    n = p = 0
    for doc in read_documents(src, report=ReadReport()):
        n += 1
        p += len(segment(doc))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"docs": n, "passages": p, "seconds": time.perf_counter() - t0, "peak_rss_mb": rss}))


def run_child(*args: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run([sys.executable, "-m", "bench.bench_ehr", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- latency -----------------------------------------------------------------------------------
range_filters_text = "charttime>=2150-01-01, charttime<2160-01-01, category in (Discharge summary, Radiology)"


def latency(index_dir: Path, patients: dict[str, list[str]], n_queries: int, seed: int) -> dict:
    from capr.index import Index
    from capr.records import Query
    from capr.search import search
    from capr.store.embedded import EmbeddedStore

    index = Index.load(index_dir)
    store = EmbeddedStore.of(index)  # the store front compiles (and checks) filters
    rng = random.Random(seed)
    subjects = sorted(patients)
    aspects = ["medications", "history of present illness", "plan", "past medical history", "assessment"]
    queries = []
    for i in range(n_queries):
        s = subjects[rng.randrange(len(subjects))]
        entity = " ".join(rng.choice(patients[s]).split()[:3]) or "pain"
        queries.append((s, Query(f"q{i}", entity=entity, aspect=rng.choice(aspects))))
    for s, q in queries[:5]:  # warm-up: scorers, column views, page cache
        search(index, q, k=10, filters=[f"subject_id={s}"])
        search(index, q, k=10)
    scoped, unscoped, masks, n_hits = [], [], [], 0
    for s, q in queries:
        t = time.perf_counter()
        store.compile_filter([f"subject_id={s}"])
        masks.append(time.perf_counter() - t)
        t = time.perf_counter()
        hits = search(index, q, k=10, filters=[f"subject_id={s}"])
        scoped.append(time.perf_counter() - t)
        assert all(h.passage.metadata["subject_id"] == s for h in hits), "a scoped search left its patient"
        n_hits += len(hits)
        t = time.perf_counter()
        search(index, q, k=10)
        unscoped.append(time.perf_counter() - t)
    # ranges and sets: the first call also builds the column's sorted value table (once per index snapshot)
    range_filters = ["charttime>=2150-01-01", "charttime<2160-01-01", "category in (Discharge summary, Radiology)"]
    t = time.perf_counter()
    ranged = search(index, queries[0][1], k=10, filters=range_filters)
    range_ms = (time.perf_counter() - t) * 1e3
    ranges = []
    for _, q in queries:
        t = time.perf_counter()
        search(index, q, k=10, filters=range_filters)
        ranges.append(time.perf_counter() - t)

    def pct(xs: list[float], p: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))] * 1e3

    out = {"queries": len(queries), "passages": int(index.live.sum()),
           "scoped_p50_ms": statistics.median(scoped) * 1e3, "scoped_p95_ms": pct(scoped, 0.95),
           "unscoped_p50_ms": statistics.median(unscoped) * 1e3, "unscoped_p95_ms": pct(unscoped, 0.95),
           "mask_p50_ms": statistics.median(masks) * 1e3, "mean_hits_scoped": n_hits / len(queries),
           "range_and_set_first_ms": range_ms, "range_and_set_hits": len(ranged),
           "range_and_set_p50_ms": statistics.median(ranges) * 1e3, "range_and_set_p95_ms": pct(ranges, 0.95)}
    index.close()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-index":
        return child_index(sys.argv[2], sys.argv[3])
    if len(sys.argv) > 1 and sys.argv[1] == "--child-read":
        return child_read(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=100_000, help="notes per format")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--formats", default="mimic3,mimic4")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--tmp-dir", type=Path, default=None)
    ap.add_argument("--read-only", default="mimic3", help="formats that also get the reader-only child ('' for none)")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    texts = mtsamples_texts(args.data_dir)
    tmp = Path(tempfile.mkdtemp(prefix="capr-bench-ehr-", dir=args.tmp_dir))
    rows = []
    try:
        for kind in args.formats.split(","):
            src = tmp / ("NOTEEVENTS.csv.gz" if kind == "mimic3" else "discharge.csv.gz")
            t = time.perf_counter()
            patients = generate(kind, src, args.notes, texts, args.seed)
            log(f"{kind}: generated {args.notes:,} notes ({src.stat().st_size / 2**20:.0f} MiB gz) in {time.perf_counter() - t:.0f}s")
            read = run_child("--child-read", str(src)) if kind in args.read_only.split(",") else None
            if read:
                log(f"{kind}: read+segment only: {read}")
            idx = run_child("--child-index", str(src), str(tmp / f"index-{kind}"))
            log(f"{kind}: index: {idx}")
            lat = latency(tmp / f"index-{kind}", patients, args.queries, args.seed)
            log(f"{kind}: latency: {lat}")
            rows.append((kind, src.stat().st_size, read, idx, lat))
            shutil.rmtree(tmp / f"index-{kind}", ignore_errors=True)
            src.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print("| format | notes | file (gz) | passages | index s | docs/s | peak RSS index | peak RSS read+segment only "
          "| one-patient search p50 / p95 | unscoped p50 / p95 | subject_id mask p50 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, size, read, idx, lat in rows:
        print(f"| {kind} | {idx['docs']:,} (+{idx['flagged']} ISERROR skipped) | {size / 2**20:.0f} MiB | {idx['passages']:,} "
              f"| {idx['seconds']:.0f} | {idx['docs'] / idx['seconds']:.0f} | {idx['peak_rss_mb']:.0f} MiB "
              f"| {read['peak_rss_mb']:.0f} MiB | {lat['scoped_p50_ms']:.1f} / {lat['scoped_p95_ms']:.1f} ms "
              f"| {lat['unscoped_p50_ms']:.1f} / {lat['unscoped_p95_ms']:.1f} ms | {lat['mask_p50_ms']:.2f} ms |"
              if read else
              f"| {kind} | {idx['docs']:,} (+{idx['flagged']} ISERROR skipped) | {size / 2**20:.0f} MiB | {idx['passages']:,} | {idx['seconds']:.0f} "
              f"| {idx['docs'] / idx['seconds']:.0f} | {idx['peak_rss_mb']:.0f} MiB | – | {lat['scoped_p50_ms']:.1f} / "
              f"{lat['scoped_p95_ms']:.1f} ms | {lat['unscoped_p50_ms']:.1f} / {lat['unscoped_p95_ms']:.1f} ms "
              f"| {lat['mask_p50_ms']:.2f} ms |")
    for kind, _, _, _, lat in rows:
        print(f"{kind}: {lat['queries']} queries, mean {lat['mean_hits_scoped']:.1f} hits per scoped query; "
              f"filters {range_filters_text}: first search {lat['range_and_set_first_ms']:.1f} ms, then p50 / p95 "
              f"{lat['range_and_set_p50_ms']:.1f} / {lat['range_and_set_p95_ms']:.1f} ms ({lat['range_and_set_hits']} hits)")


if __name__ == "__main__":
    main()
