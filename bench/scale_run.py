"""Child processes of bench.scale: each one run, bounded in time, with its wall time and its own peak memory."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bench.common import REPO, log


def child_env(src: Path, extra_paths: Sequence[str] = ()) -> dict[str, str]:
    """The environment of every child: ``src``'s capr first on the path, then this repository (for bench), then any
    extra folders (a dependency another checkout needs)."""
    path = os.pathsep.join([str(src), str(REPO), *extra_paths])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


# A small process between this one and the command: a child's high-water mark (wait4's ru_maxrss) counts the pages
# of the process it was forked from, so the command is forked from this launcher (a bare interpreter, ~10 MB),
# which reports the command's peak RSS and exit status in a file.
_LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
rc = os.waitstatus_to_exitcode(status)
with open(sys.argv[1], "w") as fh:
    fh.write(f"{usage.ru_maxrss} {rc}")
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def run_measured(argv: Sequence[str], env: Mapping[str, str], timeout_s: float, stdout: Path | None = None,
                 max_rss_mb: float | None = None) -> dict[str, Any]:
    """Runs ``argv`` to its end, to ``timeout_s`` or until its processes hold more than ``max_rss_mb`` (then kills
    its process group, so that no step can take the machine's memory from others): wall seconds, its peak RSS (the
    command's own high-water mark, its waited-for children included), exit status, stderr's tail."""
    with tempfile.TemporaryDirectory(prefix="scale-run-") as tmp, open(stdout or os.devnull, "w") as out, \
            open(Path(tmp) / "stderr", "w+") as err:
        usage_file = Path(tmp) / "usage"
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(usage_file), *map(str, argv)], env=dict(env),
                                stdout=out, stderr=err, start_new_session=True)
        stop = threading.Event()
        why: dict[str, float] = {}

        def watch() -> None:  # the main thread blocks in wait(): the wall time ends the moment the command does
            while not stop.wait(0.1):
                held = tree_rss_mb(proc.pid)
                why["tree_peak"] = max(why.get("tree_peak", 0.0), held)
                if time.perf_counter() - t0 > timeout_s or held > (max_rss_mb or float("inf")):
                    why.update(timed_out=time.perf_counter() - t0 > timeout_s, held=held, stopped=1.0)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        proc.wait()
        stop.set()
        watcher.join()
        timed_out = bool(why.get("timed_out"))
        over_memory = why["held"] if why.get("stopped") and not timed_out else 0.0
        wall = time.perf_counter() - t0
        maxrss_kb, rc = (usage_file.read_text().split() + ["0", str(proc.returncode)])[:2] if usage_file.exists() \
            else ("0", str(proc.returncode))
        err.seek(0)
        tail = err.read()[-1500:]
    rc = int(rc)
    # the high-water mark of its largest process, or the memory of all its processes sampled every 0.1 s when that
    # is larger (a writer with an analysis child process holds both at once)
    peak = max(int(maxrss_kb) / 1024, why.get("tree_peak", 0.0))
    res = {"wall_s": round(wall, 3), "peak_rss_mb": round(peak, 1), "rc": rc, "timed_out": timed_out}
    if over_memory:
        res.update(killed_over_mb=max_rss_mb, peak_rss_mb=round(over_memory, 1))
    if rc != 0 or timed_out:
        res["stderr_tail"] = tail
        why = (f"timed out after {timeout_s:.0f} s" if timed_out else
               f"killed at {over_memory:,.0f} MB of memory (limit {max_rss_mb:,.0f} MB)" if over_memory else f"exit {rc}")
        log(f"  ! {' '.join(map(str, argv[:4]))} ... {why}: {tail[-400:]}")
    return res


def tree_rss_mb(pid: int) -> float:
    """Memory held by a process and its descendants: the sum of their proportional set sizes (a page two of them
    share counts half to each; /proc/PID/smaps_rollup), or of their RSS where that cannot be read."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/smaps_rollup") as fh:
                total += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))
        except (OSError, StopIteration, ValueError):
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
    return total / 2**20


def capr_cmd(*args: Any) -> list[str]:
    return [sys.executable, "-m", "capr", *map(str, args)]


def bench_cmd(module: str, *args: Any) -> list[str]:
    return [sys.executable, "-m", module, *map(str, args)]


def dir_bytes(path: Path) -> int:
    """Every file under ``path`` (whatever the index names them)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r["rc"] == 0 and not r["timed_out"]]
    if not ok:
        return {"runs": len(runs), "failed": len(runs), "error": (runs[0].get("stderr_tail") or "")[-300:] if runs else ""}
    return {"runs": len(runs), "failed": len(runs) - len(ok), "median_s": round(statistics.median(r["wall_s"] for r in ok), 3),
            "max_s": round(max(r["wall_s"] for r in ok), 3), "peak_rss_mb": max(r["peak_rss_mb"] for r in ok)}


def worker_main(doc: str, argv: list[str] | None, add_arguments: Callable[[argparse.ArgumentParser], None],
                run: Callable[[argparse.Namespace, list[dict[str, Any]]], dict[str, Any]]) -> int:
    """A step's child process: NOTES QUERIES --result OUT.json and the step's own options; writes run's result."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("notes", type=Path)
    ap.add_argument("queries", type=Path)
    ap.add_argument("--result", type=Path, required=True)
    add_arguments(ap)
    args = ap.parse_args(argv)
    queries = [json.loads(line) for line in args.queries.read_text().splitlines() if line.strip()]
    args.result.write_text(json.dumps(run(args, queries)))
    return 0
