"""What every performance benchmark shares: where the repository, the shared data and the outputs are, how the
machine is described, and how time, memory and CPU are measured (in the benchmark's own process or its children)."""

from __future__ import annotations

import gc
import gzip
import json
import os
import platform
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "bench" / "out"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)



def capr_fingerprint(subpackages: tuple[str, ...] = ()) -> str:
    """Short SHA-1 of capr's Python sources (all of them, or only the given subpackages + records.py):
    ties cached corpora and reported numbers to the code that produced them."""
    import hashlib

    import capr

    root = Path(capr.__file__).resolve().parent
    files = sorted(root.rglob("*.py"))
    if subpackages:
        files = [f for f in files if f.name == "records.py" and f.parent == root
                 or any(root / sp in f.parents for sp in subpackages)]
    h = hashlib.sha1()
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]

def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class PeakRSS:
    """Peak resident memory during a block, minus the RSS at its start.
    Uses the kernel's high-water mark (VmHWM, reset through /proc/self/clear_refs) when possible,
    and a 5 ms psutil sampler in any case; reports the larger of the two."""

    def __init__(self) -> None:
        self.baseline = 0
        self.peak = 0
        self._stop = threading.Event()
        self._hwm_ok = False

    @staticmethod
    def _hwm() -> int | None:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def __enter__(self) -> "PeakRSS":
        gc.collect()
        self.baseline = self.peak = rss()
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            self._hwm_ok = self._hwm() is not None
        except OSError:
            self._hwm_ok = False
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())
        if self._hwm_ok:
            self.peak = max(self.peak, self._hwm() or 0)

    @property
    def delta_mb(self) -> float:
        return (self.peak - self.baseline) / 2**20


def percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def read_jsonl_gz(path: Path) -> list[Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        fh.readline()  # meta
        return [json.loads(line) for line in fh]


def latency_stats(lat: list[float]) -> dict[str, float]:
    return {"queries_timed": len(lat), "query_seconds": sum(lat), "qps": len(lat) / sum(lat) if sum(lat) else 0.0,
            "p50_ms": percentile(lat, 50) * 1e3, "p95_ms": percentile(lat, 95) * 1e3}


def machine_info() -> dict[str, Any]:
    import psutil

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for pkg in ("capr", "bm25s", "rank-bm25", "numpy", "scipy", "PyStemmer", "nupunkt", "numba"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"cpu": cpu, "logical_cores": os.cpu_count(), "capr_source_sha1": capr_fingerprint(), "physical_cores": psutil.cpu_count(logical=False),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def busy_cpu_seconds() -> float:
    """CPU seconds spent by the whole machine outside idle/iowait since boot."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the worker processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
