#!/usr/bin/env python3
"""Peak memory and time of `capr add` (the same batch of documents) onto a small and a large index.

    .venv/bin/python -m bench.bench_writes                   # bases of 1,500 and 12,300 documents, batch 1,220
    .venv/bin/python -m bench.bench_writes --small 300 --large 1200 --batch 200   # quick check
    .venv/bin/python -m bench.bench_writes --large 25600 --batch 1000 --huge-doc-mb 50   # issue 19: ~200k passages

Documents: MedQuAD (every XML answer document with text) and MTSamples notes from ../shared/data; when
the large base needs more documents than the two hold, MedQuAD documents are repeated under new ids
(their text, hence their postings, counts again). The batch is disjoint from both bases. Each `capr add`
runs as its own child process; its peak resident memory is its VmHWM (read by the child at exit; ru_maxrss of
a child would also count this process's memory at the fork), so it includes the interpreter and imports
(measured alone as "baseline": `capr --help`);
"growth" is the peak minus that baseline.

--huge-doc-mb N also adds one single-line document of N MB (ASCII words drawn from the corpus, no
newline) to the small index, once with the default --max-doc-chars (it must be refused, naming the
limit) and once with the limit raised above its size (it must index; its growth is compared with N).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DEFAULT_DATA


def _corpus(data_dir: Path) -> list[dict]:
    from capr.corpus import ReadReport, read_documents

    docs = []
    for src in (data_dir / "medquad" / "MedQuAD.tar.gz", data_dir / "mtsamples" / "mtsamples.csv.gz"):
        if not src.exists():
            sys.exit(f"{src}: missing (pass --data-dir)")
        docs += [{"doc_id": d.doc_id, "title": d.title, "text": d.text}
                 for d in read_documents(src, report=ReadReport(skip_bad=True))]
    return list({d["doc_id"]: d for d in docs}.values())  # MedQuAD repeats a few ids: keep the last


def _take(pool: list[dict], n: int) -> list[dict]:
    out = list(pool[:n])
    copy = 1
    while len(out) < n:  # repeat documents under new ids
        out += [{**d, "doc_id": f"{d['doc_id']}~{copy}"} for d in pool[: n - len(out)]]
        copy += 1
    return out


def _write(path: Path, docs: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")
    return path


def _huge_document(pool: list[dict], megabytes: float, path: Path) -> int:
    """One JSONL line holding a document of ``megabytes`` MB of corpus words on one line; returns its characters."""
    words = " ".join(d["text"] for d in pool[:2000]).split()
    target = int(megabytes * 1e6)
    parts, size, i = [], 0, 0
    while size < target:
        w = words[i % len(words)]
        parts.append(w)
        size += len(w) + 1
        i += 1
    text = " ".join(parts)[:target].encode("ascii", "replace").decode("ascii")
    path.write_text(json.dumps({"doc_id": "huge-document", "title": "Huge", "text": text}) + "\n")
    return len(text)


# The child reports its own peak: ru_maxrss of a child also counts the parent's memory at the moment of the fork
# (Linux keeps the high-water mark across exec), so a bench process holding the corpus would inflate every row.
_CHILD = ("import atexit, runpy, sys\n"
          "def peak():\n"
          "    for line in open('/proc/self/status'):\n"
          "        if line.startswith('VmHWM:'):\n"
          "            sys.stderr.write('\\nVMHWM_KB ' + line.split()[1] + '\\n')\n"
          "atexit.register(peak)\n"
          "sys.argv = ['capr', *sys.argv[1:]]\n"
          "runpy.run_module('capr', run_name='__main__')\n")


def _run(args: list[str], check: bool = True) -> tuple[float, float, str]:
    """(peak RSS in MB, wall seconds, stderr) of one capr command in a child process: its VmHWM (the peak resident
    memory of its own address space), read by the child at exit; ru_maxrss where /proc is missing."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the child runs the capr this process imports
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    secs = time.perf_counter() - t0
    if check and os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"capr {' '.join(args)} failed:\n{err}")
    lines = err.rstrip().splitlines()
    if lines and lines[-1].startswith("VMHWM_KB "):
        peak_kb = int(lines[-1].split()[1])
        err = "\n".join(lines[:-1])
    else:
        peak_kb = usage.ru_maxrss  # KiB on Linux
    return peak_kb / 1024, secs, err


def _passages(index_dir: Path) -> int:
    from capr.index import Index

    idx = Index.load(index_dir)
    try:
        return int(idx.counts["passages"])
    finally:
        idx.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=1500, help="documents in the small base index")
    ap.add_argument("--large", type=int, default=12300, help="documents in the large base index")
    ap.add_argument("--batch", type=int, default=1220, help="documents added to each")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--tmp-dir", type=Path, default=None)
    ap.add_argument("--huge-doc-mb", type=float, default=0, help="also add one single-line document of this many MB")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    a = ap.parse_args()

    pool = _corpus(a.data_dir)
    batch, rest = pool[-a.batch:], pool[: -a.batch]
    work = Path(tempfile.mkdtemp(prefix="capr-bench-writes-", dir=a.tmp_dir))
    rows = []
    try:
        batch_file = _write(work / "batch.jsonl", batch)
        base_mb, _, _ = _run(["--help"])
        for label, n in (("small", a.small), ("large", a.large)):
            base = _write(work / f"{label}.jsonl", _take(rest, n))
            idx = work / f"idx-{label}"
            build_mb, build_s, _ = _run(["index", "--lexical-only", str(base), "--out", str(idx)])
            passages = _passages(idx)
            add_mb, add_s, err = _run(["add", str(idx), str(batch_file)])
            rows.append({"base": label, "base_docs": n, "base_passages": passages, "batch_docs": len(batch),
                         "index_peak_mb": round(build_mb), "index_s": round(build_s, 1), "add_peak_mb": round(add_mb),
                         "add_growth_mb": round(add_mb - base_mb), "add_s": round(add_s, 1),
                         "summary": err.strip().splitlines()[-1][:200]})
        if a.huge_doc_mb > 0:
            chars = _huge_document(pool, a.huge_doc_mb, work / "huge.jsonl")
            idx = work / "idx-small"
            refused_mb, refused_s, refused_err = _run(["add", str(idx), str(work / "huge.jsonl")], check=False)
            huge_mb, huge_s, huge_err = _run(["add", str(idx), str(work / "huge.jsonl"),
                                              "--max-doc-chars", str(chars + 1)])
            huge = {"chars": chars, "file_mb": round((work / "huge.jsonl").stat().st_size / 1e6, 1),
                    "refused_peak_mb": round(refused_mb), "refused_s": round(refused_s, 1),
                    "refused_message": refused_err.strip().splitlines()[-1][:300] if refused_err.strip() else "",
                    "indexed_peak_mb": round(huge_mb), "indexed_growth_mb": round(huge_mb - base_mb),
                    "indexed_s": round(huge_s, 1), "indexed_summary": huge_err.strip().splitlines()[-1][:200]}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"capr add: peak RSS of the child process (interpreter + imports alone: {base_mb:.0f} MB); "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"{'base':>6} {'base docs':>10} {'passages':>9} {'batch':>6} {'index MB':>9} {'index s':>8} {'add MB':>7} "
          f"{'growth MB':>10} {'add s':>6}")
    for r in rows:
        print(f"{r['base']:>6} {r['base_docs']:>10,} {r['base_passages']:>9,} {r['batch_docs']:>6,} {r['index_peak_mb']:>9} "
              f"{r['index_s']:>8} {r['add_peak_mb']:>7} {r['add_growth_mb']:>10} {r['add_s']:>6}")
    if a.huge_doc_mb > 0:
        print(f"one {huge['file_mb']} MB single-line document ({huge['chars']:,} characters) added to the small index:")
        print(f"  default limit: peak {huge['refused_peak_mb']} MB, {huge['refused_s']} s: {huge['refused_message']}")
        print(f"  limit raised: peak {huge['indexed_peak_mb']} MB (growth {huge['indexed_growth_mb']} MB = "
              f"{huge['indexed_growth_mb'] / (huge['chars'] / 1e6):.1f}x its size), {huge['indexed_s']} s: "
              f"{huge['indexed_summary']}")
    if a.json:
        print(json.dumps({"baseline_mb": round(base_mb), "rows": rows, "huge": huge if a.huge_doc_mb > 0 else None}))


if __name__ == "__main__":
    main()
