#!/usr/bin/env python3
"""Soak and fault run of an embedded index: readers beside writers that are killed at random, then an audit.

    .venv/bin/python python -m bench.soak                       # release: 10 minutes
    .venv/bin/python python -m bench.soak --seconds 60          # CI (tests/test_soak.py)

What runs at once, for --seconds (longer, up to twice, until --min-kills writers were killed):
  * readers: --cli-readers lanes each running `capr search` processes one after another, --api-readers
    processes each opening the index (load_index), searching and reading stored passages in a loop, and
    --http-readers lanes posting searches to a `capr serve` of the index (a real server on loopback);
  * two writer lanes, each one `capr` process at a time: add new documents, replace documents, delete
    documents, `capr compact`, and now and then an add under a file-size limit (RLIMIT_FSIZE, as `ulimit -f`:
    a full disk without root); commits merge segments as they go. Each lane owns its own document ids, so
    its operations are totally ordered and each one's effect can be checked the moment it ends;
  * faults: a writer is sent SIGKILL or SIGTERM (--kill-rate of operations) at a random moment of its run.

Each writer operation ends one of three ways: acknowledged (exit 0: it must be in the index), killed (it must
be in the index entirely or not at all: the lane looks and records which), or failed with a true reason (the
file-size limit, the writer lock after --wait: nothing of it may be in the index). The audit then checks:
every acknowledged write present exactly once and in its last version, no partial write, no duplicate
document, every search answered (no "damaged index" that was not), nothing left over after the next writer,
and the final index equal to a rebuild of the surviving documents (the same ids; BM25 scores of every passage
for a few queries equal to 1e-6). A writer that neither ends nor answers within --wait + --stuck-after seconds,
or that goes on answering after its SIGTERM, is a violation too: it is ended with SIGABRT and the stacks
faulthandler prints are reported, so the run never waits on it for ever. It prints a table and exits 1 on any
violation.

The index is lexical only (--lexical-only): a CLI search then starts in ~1 s instead of loading a model.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO

SRC = REPO / "src"  # the writers and readers it starts run this checkout
CAPR = [sys.executable, "-m", "capr"]
# writers run with faulthandler on: one that stops answering is sent SIGABRT, which prints every thread's stack
WRITER_PYTHON = [sys.executable, "-X", "faulthandler"]
WRITER_CAPR = [*WRITER_PYTHON, "-m", "capr"]
CONDITIONS = ["gout", "atrial fibrillation", "asthma", "heart failure", "pneumonia", "migraine", "anemia"]
DRUGS = ["colchicine", "apixaban", "albuterol", "furosemide", "amoxicillin", "sumatriptan", "ferrous sulfate"]
QUERIES = ["gout colchicine", "atrial fibrillation apixaban", "heart failure furosemide", "migraine", "asthma inhaler"]
FALSE_DAMAGE = ("damaged", "corrupt", "missing")
FULL_DISK_BYTES = 16 * 1024
STUCK = "stuck"  # what _run_cli and _run_api say of a writer ended by the harness for not answering
HANG_MARGIN_S = 120  # beyond the lock --wait: a writer silent this long is stuck, not slow


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": "1"}


def _doc(doc_id: str, version: str, rng: random.Random) -> dict:
    c, d = rng.randrange(len(CONDITIONS)), rng.randrange(len(DRUGS))
    return {"id": doc_id, "title": f"Note {doc_id}",
            "text": f"ASSESSMENT: {CONDITIONS[c]} in patient {doc_id}, stable. "
                    f"PLAN: {DRUGS[d]} {rng.randrange(1, 50)} mg daily; review in {rng.randrange(1, 9)} weeks. "
                    f"Version {version}."}


def _version_of(text: str) -> str | None:
    i = text.rfind("Version ")
    return text[i + 8:].rstrip(". \n") if i >= 0 else None


@dataclass
class Stats:
    ops: dict[str, int] = field(default_factory=dict)
    acked: int = 0
    sigkill: int = 0
    sigterm: int = 0
    killed_holding_lock: int = 0
    killed_applied: int = 0
    full_disk_refused: int = 0
    full_disk_written: int = 0
    lock_timeouts: int = 0
    unexpected_writer_errors: list[str] = field(default_factory=list)
    stuck_writers: list[str] = field(default_factory=list)
    partial_writes: list[str] = field(default_factory=list)
    failed_but_applied: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def kills(self) -> int:
        return self.sigkill + self.sigterm


class WriterLane(threading.Thread):
    """One writer lane: its own document ids (prefix), one `capr` process at a time."""

    def __init__(self, name: str, root: Path, work: Path, stats: Stats, args, stop_at, seed: int) -> None:
        super().__init__(name=f"writer-{name}", daemon=True)
        self.prefix, self.root, self.work, self.stats, self.args = name, root, work, stats, args
        self.stop_at = stop_at
        self.rng = random.Random(seed)
        self.model: dict[str, str] = {}  # doc id → the version the index must hold (absent: deleted/never added)
        self.source: dict[tuple[str, str], dict] = {}  # (doc id, version) → the document as written
        self.next_id = 0
        self.seq = 0
        self.typical_cli_s, self.typical_api_s = 3.0, 0.5
        self.api: subprocess.Popen | None = None
        self.stderr_tails: dict[int, tuple[collections.deque[str], threading.Thread]] = {}
        self.answers: dict[int, queue.Queue[str]] = {}
        self.standby: subprocess.Popen | None = None

    # -- operations ------------------------------------------------------------------------------
    def _new_ids(self, n: int) -> list[str]:
        ids = [f"{self.prefix}{self.next_id + i:05d}" for i in range(n)]
        self.next_id += n
        return ids

    def _batch(self, ids: list[str]) -> tuple[Path, dict[str, str]]:
        self.seq += 1
        version = f"{self.prefix}v{self.seq}"
        path = self.work / f"{self.prefix}-{self.seq}.jsonl"
        with path.open("w") as fh:
            for i in ids:
                doc = self.source[i, version] = _doc(i, version, self.rng)
                fh.write(json.dumps(doc) + "\n")
        return path, {i: version for i in ids}

    def _choose(self) -> tuple[str, str, list[str], dict[str, str | None]]:
        """(kind, "cli" or "api", the `capr` arguments or the API op, the model's change if it is applied)."""
        live = sorted(self.model)
        r = self.rng.random()
        via = "cli" if self.rng.random() < self.args.cli_share else "api"
        if r < 0.06:
            return "compact", via, ["compact", str(self.root)], {}
        if r < 0.12:
            path, change = self._batch(self._new_ids(self.args.full_disk_docs))
            return "add-full-disk", "cli", ["add", str(self.root), str(path)], change
        if r < 0.30 and len(live) > 4:
            ids = self.rng.sample(live, self.rng.randint(1, 3))
            return "delete", via, ["delete", str(self.root), *[a for i in ids for a in ("--doc-id", i)]], {i: None for i in ids}
        if r < 0.55 and live:
            path, change = self._batch(self.rng.sample(live, min(len(live), self.rng.randint(1, 5))))
            return "replace", via, ["add", str(self.root), str(path)], change
        path, change = self._batch(self._new_ids(self.rng.randint(1, self.args.batch)))
        return "add", via, ["add", str(self.root), str(path)], change

    # -- one operation, its fault, and what the index must show after it ----------------------------
    def _observed(self, change: dict[str, str | None]) -> dict[str, str | None]:
        from capr.index import load_index

        index = load_index(self.root)
        try:
            return {i: (_version_of(index.document(i).text) if index.has_document(i) else None) for i in change}
        finally:
            index.close()

    def _resolve(self, kind: str, change: dict[str, str | None], must: str | None) -> bool | None:
        """Whether ``change`` is in the index (None: only part of it, a violation). ``must``: "applied" or
        "absent" when the outcome is known, to check it."""
        seen = self._observed(change)
        before = {i: self.model.get(i) for i in change}
        if seen == change:
            applied = True
        elif seen == before:
            applied = False
        else:
            with self.stats.lock:
                self.stats.partial_writes.append(f"{kind} {sorted(change)[:3]}: index {seen}, before {before}, write {change}")
            return None
        if must == "applied" and not applied and change:
            with self.stats.lock:
                self.stats.partial_writes.append(f"acknowledged {kind} {sorted(change)[:3]} not in the index: {seen}")
        if must == "absent" and applied and change != before:
            with self.stats.lock:
                self.stats.failed_but_applied.append(f"{kind} {sorted(change)[:3]}")
        return applied

    def _apply(self, change: dict[str, str | None]) -> None:
        for i, v in change.items():
            if v is None:
                self.model.pop(i, None)
            else:
                self.model[i] = v

    def _fault(self, typical_s: float) -> tuple[signal.Signals, float] | None:
        if self.rng.random() >= self.args.kill_rate:
            return None
        return self.rng.choice([signal.SIGKILL, signal.SIGTERM]), self.rng.uniform(0, typical_s * 1.2)

    def _stuck(self, kind: str, proc: subprocess.Popen, why: str, stderr_tail) -> None:
        """Record a writer that stopped answering, with the stacks faulthandler prints on SIGABRT, and end it."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGABRT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stacks = " | ".join(line.strip() for line in stderr_tail()[-80:] if line.strip() and not line.startswith("Extension modules"))
        with self.stats.lock:
            self.stats.stuck_writers.append(f"{kind} (pid {proc.pid}) {why}: {stacks[-6000:]}")

    def _run_cli(self, kind: str, argv: list[str]) -> tuple[int | None, str, int, signal.Signals | None]:
        """One `capr` writer process: (exit status, its last stderr line, pid, the signal sent to it)."""
        fault = None if kind == "add-full-disk" else self._fault(self.typical_cli_s)

        def limit_file_size() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_DISK_BYTES, FULL_DISK_BYTES))

        t0 = time.monotonic()
        proc = subprocess.Popen([*WRITER_CAPR, *argv, "--wait", str(self.args.wait)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=_env(),
                                preexec_fn=limit_file_size if kind == "add-full-disk" else None)
        sent = None
        if fault is not None:
            try:
                proc.wait(timeout=fault[1])
            except subprocess.TimeoutExpired:
                proc.send_signal(fault[0])
                sent = fault[0]
        try:
            _, err = proc.communicate(timeout=self.args.wait + self.args.stuck_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            self._stuck(kind, proc, f"no exit within {self.args.wait + self.args.stuck_after:.0f} s"
                        + (f" of {sent.name}" if sent else ""), lambda: err.splitlines())
            return proc.returncode, STUCK, proc.pid, sent
        if proc.returncode == 0 and sent is None:
            self.typical_cli_s = 0.8 * self.typical_cli_s + 0.2 * (time.monotonic() - t0)
        last = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
        return proc.returncode, last, proc.pid, sent

    def _spawn_writer(self) -> subprocess.Popen:
        """A writer process importing capr while another one works: the next one after a kill starts at once.
        Its stderr is read as it comes (kept: the last lines), so that a full pipe never blocks it, and so are its
        answers, one thread per pipe for its whole life: a wait for an answer that times out leaves no reader
        behind to take the next one."""
        proc = subprocess.Popen([*WRITER_PYTHON, "-c", _API_WRITER, str(self.args.wait)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env())
        self._follow(proc)
        return proc

    def _follow(self, proc: subprocess.Popen) -> None:
        tail: collections.deque[str] = collections.deque(maxlen=200)
        answers: queue.Queue[str] = queue.Queue()

        def read_answers() -> None:
            for line in proc.stdout:
                answers.put(line)
            answers.put("")  # the process has ended

        drain = threading.Thread(target=lambda: tail.extend(proc.stderr), daemon=True)
        drain.start()
        threading.Thread(target=read_answers, daemon=True).start()
        self.stderr_tails[proc.pid] = (tail, drain)
        self.answers[proc.pid] = answers

    def _stderr_tail(self, proc: subprocess.Popen) -> list[str]:
        self.answers.pop(proc.pid, None)
        tail, drain = self.stderr_tails.pop(proc.pid, (collections.deque(), None))
        if drain is not None and proc.poll() is not None:
            drain.join(timeout=10)
        return list(tail)

    def _answer(self, proc: subprocess.Popen, timeout: float) -> str | None:
        """The writer's next stdout line ("" once it has ended), or None when none came within ``timeout``."""
        try:
            return self.answers[proc.pid].get(timeout=timeout)
        except queue.Empty:
            return None

    def _run_api(self, kind: str, argv: list[str]) -> tuple[int | None, str, int, signal.Signals | None]:
        """The same operation through the library, in this lane's long-lived writer process (started again after
        each kill): a kill then lands in the write itself rather than in a CLI's start-up."""
        limit = self.args.wait + self.args.stuck_after
        if self.api is None or self.api.poll() is not None:
            self.api, self.standby = self.standby or self._spawn_writer(), self._spawn_writer()
            ready = self._answer(self.api, limit)
            if ready is None:
                self._stuck(kind, self.api, f"not ready within {limit:.0f} s", lambda p=self.api: self._stderr_tail(p))
                return self.api.returncode, STUCK, self.api.pid, None
            if ready.strip() != "ready":
                if self.api.poll() is None:
                    self.api.kill()
                code = self.api.wait()
                return code, "".join(self._stderr_tail(self.api)).strip()[-300:], self.api.pid, None
        proc, fault = self.api, self._fault(self.typical_api_s)
        t0 = time.monotonic()
        proc.stdin.write(json.dumps(argv) + "\n")
        proc.stdin.flush()
        line = self._answer(proc, fault[1] if fault else limit)
        if line is None and fault:  # still writing when the fault comes
            proc.send_signal(fault[0])
            self.api = None
            # it may still finish the write it is in and answer, but then it must end without being asked again
            answered, end_by = [], time.monotonic() + limit
            while (after := self._answer(proc, max(0.0, end_by - time.monotonic()))):
                answered.append(after.strip())
            if after is None:
                self._stuck(kind, proc, f"no end within {limit:.0f} s of {fault[0].name}"
                            + (f" (answered {', '.join(map(repr, answered))} and went on)" if answered else ""),
                            lambda: self._stderr_tail(proc))
                return proc.returncode, STUCK, proc.pid, fault[0]
            proc.wait()
            self._stderr_tail(proc)
            return proc.returncode, "", proc.pid, fault[0]
        if line is None:
            self.api = None
            self._stuck(kind, proc, f"no answer within {limit:.0f} s", lambda: self._stderr_tail(proc))
            return proc.returncode, STUCK, proc.pid, None
        line = line.strip()
        if line == "ok":
            self.typical_api_s = 0.8 * self.typical_api_s + 0.2 * (time.monotonic() - t0)
            return 0, "", proc.pid, None
        if line.startswith("error "):
            return 2, line[6:], proc.pid, None
        if proc.poll() is None:  # an answer that is neither: not a writer to send more to
            proc.kill()
        proc.wait()
        self.api = None
        return proc.returncode, f"writer process died: {''.join(self._stderr_tail(proc)).strip()[-300:]}", proc.pid, None

    def run_one(self) -> None:
        kind, via, argv, change = self._choose()
        status, last, pid, sent = (self._run_cli if via == "cli" else self._run_api)(kind, argv)
        key = f"{kind} ({via})"
        with self.stats.lock:
            self.stats.ops[key] = self.stats.ops.get(key, 0) + 1
        if last == STUCK:  # recorded as a violation; what it wrote must still be all there or not at all
            if self._resolve(kind, change, None) and change:
                self._apply(change)
            return
        if status == 0 and sent is None:
            with self.stats.lock:
                self.stats.acked += 1
                if kind == "add-full-disk":
                    self.stats.full_disk_written += 1
            self._resolve(kind, change, "applied")
            self._apply(change)
            return
        if sent is not None:
            holder = (self.root / "LOCK").read_text().strip() if (self.root / "LOCK").exists() else ""
            with self.stats.lock:
                if sent == signal.SIGKILL:
                    self.stats.sigkill += 1
                else:
                    self.stats.sigterm += 1
                self.stats.killed_holding_lock += holder == str(pid)
            applied = self._resolve(kind, change, None)
            if applied and change:
                with self.stats.lock:
                    self.stats.killed_applied += 1
                self._apply(change)
            return
        if kind == "add-full-disk" and "File too large" in last:
            with self.stats.lock:
                self.stats.full_disk_refused += 1
        elif "another process is writing this index" in last:
            with self.stats.lock:
                self.stats.lock_timeouts += 1
        else:
            with self.stats.lock:
                self.stats.unexpected_writer_errors.append(f"{key}: {last}")
        self._resolve(kind, change, "absent")

    def run(self) -> None:
        while not self.stop_at():
            try:
                self.run_one()
            except Exception as e:  # the harness's own failure is a finding, not a crash of the run
                with self.stats.lock:
                    self.stats.unexpected_writer_errors.append(f"harness: {type(e).__name__}: {e}")
                time.sleep(0.5)


class CliReaderLane(threading.Thread):
    def __init__(self, root: Path, stop: threading.Event, seed: int, pause: float) -> None:
        super().__init__(daemon=True)
        self.root, self.stop, self.rng, self.pause = root, stop, random.Random(seed), pause
        self.answered = 0
        self.false_damage: list[str] = []
        self.other_failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            q = self.rng.choice(QUERIES)
            try:
                proc = subprocess.run([*CAPR, "search", str(self.root), q, "-k", "5", "--json"], capture_output=True,
                                      text=True, env=_env(), timeout=HANG_MARGIN_S)
            except subprocess.TimeoutExpired:
                self.other_failures.append(f"`capr search {q}` gave no answer within {HANG_MARGIN_S} s")
                continue
            if proc.returncode == 0 and json.loads(proc.stdout)["results"]:
                self.answered += 1
                time.sleep(self.pause)
                continue
            line = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}, no results"])[-1]
            (self.false_damage if any(w in line for w in FALSE_DAMAGE) else self.other_failures).append(line)
            time.sleep(self.pause)


class HttpReaderLane(CliReaderLane):
    """Searches through `capr serve` (POST /search), which follows the generations the writers commit."""

    def __init__(self, url: str, stop: threading.Event, seed: int, pause: float) -> None:
        super().__init__(Path(), stop, seed, pause)
        self.url = url

    def run(self) -> None:
        import urllib.error
        import urllib.request

        while not self.stop.is_set():
            body = json.dumps({"text": self.rng.choice(QUERIES), "k": 5}).encode()
            request = urllib.request.Request(self.url + "/search", data=body, headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    if json.loads(response.read())["results"]:
                        self.answered += 1
                    else:
                        self.other_failures.append("200 with no results")
            except urllib.error.HTTPError as e:
                line = f"{e.code} {e.read().decode(errors='replace')[:300]}"
                (self.false_damage if any(w in line for w in FALSE_DAMAGE) else self.other_failures).append(line)
            except OSError as e:  # the server gone or not answering: a failure, never an answer
                self.other_failures.append(f"{type(e).__name__}: {e}")
            time.sleep(self.pause)


def start_server(root: Path, work: Path) -> tuple[subprocess.Popen, str]:
    """`capr serve` of the index on a free loopback port, once /health says ready."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (work / "serve.log").open("w")
    proc = subprocess.Popen([*CAPR, "serve", "--index", str(root), "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, env=_env())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"capr serve exited {proc.returncode}: see {work / 'serve.log'}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("capr serve did not say ready within 180 s")


_API_WRITER = textwrap.dedent("""
    import json, sys
    from capr.cli.common import terminate_cleanly
    from capr.corpus import ReadReport, read_documents
    from capr.errors import CaprError
    from capr.index import compact_index
    from capr.store import open_store
    terminate_cleanly()  # SIGTERM unwinds: the write in progress is abandoned cleanly
    wait = float(sys.argv[1])
    print("ready", flush=True)
    for line in sys.stdin:
        op, root, *rest = json.loads(line)
        try:
            if op == "compact":
                compact_index(root, lock_wait_s=wait)
            elif op == "add":
                open_store(root, lock_wait_s=wait).add(read_documents(rest[0], report=ReadReport(), require_documents=True))
            else:
                open_store(root, lock_wait_s=wait).delete(rest[1::2])
            print("ok", flush=True)
        except CaprError as e:
            print("error " + " ".join(str(e).split()), flush=True)
""")


_API_READER = textwrap.dedent("""
    import json, os, random, sys, time
    from capr.errors import CaprError
    from capr.index import load_index
    from capr.search.searcher import search
    root, stop, queries, seed = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    answered, damage, other = 0, [], []
    while not os.path.exists(stop):
        try:
            index = load_index(root)
            try:
                time.sleep(rng.uniform(0, 0.3))  # a reader that holds its generation a while before searching
                hits = search(index, rng.choice(queries), k=5)
                [h.passage.text for h in hits]
                answered += 1 if hits else 0
            finally:
                index.close()
        except CaprError as e:
            msg = str(e)
            (damage if any(w in msg for w in ("damaged", "corrupt", "missing")) else other).append(msg)
    print(json.dumps({"answered": answered, "false_damage": damage, "other_failures": other}))
""")


def _rebuild_equal(root: Path, survivors: dict[str, dict], work: Path) -> tuple[bool, float, str]:
    """The final index against `capr index` of the surviving source documents: same ids and passages, and every
    passage's BM25 score for QUERIES within 1e-6."""
    from capr.index import load_index
    from capr.search import search

    src = work / "survivors.jsonl"
    with src.open("w") as fh:
        for doc_id in sorted(survivors):
            fh.write(json.dumps(survivors[doc_id]) + "\n")
    fresh_dir = work / "rebuild"
    subprocess.run([*CAPR, "index", "--lexical-only", str(src), "--out", str(fresh_dir)], check=True,
                   capture_output=True, env=_env())
    index, fresh = load_index(root), load_index(fresh_dir)
    if sorted(index.document_ids()) != sorted(fresh.document_ids()):
        return False, float("nan"), "document ids differ"
    if index.counts != fresh.counts:
        return False, float("nan"), f"counts {index.counts} vs {fresh.counts}"
    worst = 0.0
    for q in QUERIES:
        a = {h.pid: h.score for h in search(index, q, k=index.counts["passages"], retriever="bm25")}
        b = {h.pid: h.score for h in search(fresh, q, k=fresh.counts["passages"], retriever="bm25")}
        if a.keys() != b.keys():
            return False, float("nan"), f"query {q!r}: different passages match"
        worst = max([worst, *(abs(a[p] - b[p]) for p in a)])
    return worst <= 1e-6, worst, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600, help="how long readers and writers run (default 600)")
    ap.add_argument("--min-kills", type=int, default=20, help="run on (up to twice --seconds) until this many writer kills")
    ap.add_argument("--cli-readers", type=int, default=2, help="lanes of `capr search` processes")
    ap.add_argument("--api-readers", type=int, default=2, help="processes searching through load_index in a loop")
    ap.add_argument("--http-readers", type=int, default=2, help="lanes searching through a `capr serve` of the index")
    ap.add_argument("--reader-pause", type=float, default=0.2, help="seconds a CLI reader lane waits between searches")
    ap.add_argument("--kill-rate", type=float, default=0.5, help="share of writer operations killed (SIGKILL or SIGTERM)")
    ap.add_argument("--initial-docs", type=int, default=60)
    ap.add_argument("--full-disk-docs", type=int, default=120, help="documents of an add run under the file-size limit")
    ap.add_argument("--batch", type=int, default=20, help="at most this many documents per add")
    ap.add_argument("--cli-share", type=float, default=0.3, help="share of writer operations run as `capr` commands "
                    "(the others go through the library in a long-lived writer process)")
    ap.add_argument("--wait", type=float, default=60, help="writers' --wait for the lock")
    ap.add_argument("--stuck-after", type=float, default=HANG_MARGIN_S,
                    help="seconds beyond --wait after which a silent writer is taken for stuck and ended (SIGABRT)")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--workdir", type=Path, default=None, help="where the index lives (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    from capr.index import load_index

    work = Path(tempfile.mkdtemp(prefix="capr-soak-", dir=args.workdir))
    root = work / "idx"
    rng = random.Random(args.seed)
    stats = Stats()
    lanes_model: dict[str, dict] = {}

    # the initial index: documents of both lanes
    lanes = []
    t_start = time.monotonic()
    deadline = t_start + args.seconds
    hard_deadline = t_start + 2 * args.seconds

    def stop_at() -> bool:
        now = time.monotonic()
        return now >= hard_deadline or (now >= deadline and stats.kills >= args.min_kills)

    init = work / "initial.jsonl"
    for k, name in enumerate("ab"):
        lane = WriterLane(name, root, work, stats, args, stop_at, args.seed * 100 + k)
        lanes.append(lane)
    with init.open("w") as fh:
        for lane in lanes:
            for i in lane._new_ids(args.initial_docs // 2):
                doc = lane.source[i, "initial"] = _doc(i, "initial", rng)
                fh.write(json.dumps(doc) + "\n")
                lane.model[i] = "initial"
    subprocess.run([*CAPR, "index", "--lexical-only", str(init), "--out", str(root)], check=True, capture_output=True,
                   env=_env())

    stop_readers = threading.Event()
    stop_file = work / "stop-readers"
    reader_lanes = [CliReaderLane(root, stop_readers, args.seed * 1000 + i, args.reader_pause) for i in range(args.cli_readers)]
    api_readers = [subprocess.Popen([sys.executable, "-c", _API_READER, str(root), str(stop_file), json.dumps(QUERIES),
                                     str(args.seed * 2000 + i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=_env()) for i in range(args.api_readers)]
    server, url = start_server(root, work) if args.http_readers else (None, "")
    reader_lanes += [HttpReaderLane(url, stop_readers, args.seed * 3000 + i, args.reader_pause) for i in range(args.http_readers)]
    t_start = time.monotonic()
    deadline, hard_deadline = t_start + args.seconds, t_start + 2 * args.seconds
    for t in [*reader_lanes, *lanes]:
        t.start()
    for lane in lanes:
        lane.join(timeout=max(0.0, hard_deadline - time.monotonic()) + 2 * (args.wait + args.stuck_after))
        if lane.is_alive():  # the harness itself is stuck: say where, instead of waiting for ever
            frame = sys._current_frames().get(lane.ident)
            where = " | ".join(traceback.format_stack(frame)[-8:]).replace("\n", " ") if frame else "?"
            stats.stuck_writers.append(f"harness lane {lane.name} did not end: {where}")
            continue
        for proc in (lane.api, lane.standby):
            if proc is not None:
                proc.stdin.close()
                try:
                    proc.wait(timeout=args.wait + args.stuck_after)
                except subprocess.TimeoutExpired:
                    lane._stuck("end of input", proc, "did not exit once its input closed", lambda p=proc: lane._stderr_tail(p))
    stop_readers.set()
    stop_file.touch()
    for t in reader_lanes:
        t.join()
    if server is not None:  # its pins on generations go with it, before the final writer cleans up
        server.terminate()
        server.wait(60)
    api_results = []
    for p in api_readers:
        out, err = p.communicate(timeout=300)
        api_results.append(json.loads(out) if p.returncode == 0 and out.strip()
                           else {"answered": 0, "false_damage": [], "other_failures": [f"reader exit {p.returncode}: {err[-300:]}"]})
    elapsed = time.monotonic() - t_start

    # what the killed writers left is deleted by the next writer; no reader is left to pin an old generation
    leftovers_before = [p.name for d in (root, root / "segments") for p in d.iterdir() if ".tmp-" in p.name]
    final = subprocess.run([*CAPR, "compact", str(root), "--wait", str(args.wait)], capture_output=True, text=True,
                           env=_env())
    if final.returncode != 0:  # the index the writers left is broken: that is the finding, said without a traceback
        print(f"| the final `capr compact` failed | {final.stderr.strip().splitlines()[-1:]} |\n| violations | 1 |")
        print(f"index kept for inspection: {root}")
        return 1
    leftovers_after = [p.name for d in (root, root / "segments") for p in d.iterdir()
                       if ".tmp-" in p.name or p.name.startswith(".trash-")]
    generations = sorted(p.name for p in root.iterdir() if p.name.startswith("gen-"))

    # the audit
    survivors: dict[str, dict] = {}  # the source documents the index must now hold
    for lane in lanes:
        lanes_model.update(lane.model)
        survivors.update({i: lane.source[i, v] for i, v in lane.model.items()})
    index = load_index(root)
    ids = index.document_ids()
    duplicates = len(ids) - len(set(ids))
    lost = [i for i, v in lanes_model.items() if not index.has_document(i) or _version_of(index.document(i).text) != v]
    extra = sorted(set(ids) - set(lanes_model))
    index.close()
    equal, worst, why = _rebuild_equal(root, survivors, work)

    answered = sum(r.answered for r in reader_lanes) + sum(r["answered"] for r in api_results)
    false_damage = [m for r in reader_lanes for m in r.false_damage] + [m for r in api_results for m in r["false_damage"]]
    other_fail = [m for r in reader_lanes for m in r.other_failures] + [m for r in api_results for m in r["other_failures"]]
    rows = [
        ("run (s)", f"{elapsed:.0f}"),
        ("readers (CLI lanes + API processes + HTTP lanes)", f"{args.cli_readers} + {args.api_readers} + {args.http_readers}"),
        ("searches answered", answered),
        ("  of which through capr serve (HTTP)", sum(r.answered for r in reader_lanes if isinstance(r, HttpReaderLane))),
        ("searches failed: false 'damaged'", len(false_damage)),
        ("searches failed: other", len(other_fail)),
        ("writer operations", sum(stats.ops.values())),
        ("  by kind", ", ".join(f"{k} {v}" for k, v in sorted(stats.ops.items()))),
        ("acknowledged (exit 0)", stats.acked),
        ("killed: SIGKILL + SIGTERM", f"{stats.sigkill} + {stats.sigterm} = {stats.kills}"),
        ("  killed while holding the writer lock", stats.killed_holding_lock),
        ("  killed writes found committed (whole)", stats.killed_applied),
        ("full-disk adds refused (File too large) / written", f"{stats.full_disk_refused} / {stats.full_disk_written}"),
        ("writer lock timeouts", stats.lock_timeouts),
        ("unexpected writer errors", len(stats.unexpected_writer_errors)),
        ("writers stuck (ended by SIGABRT, stacks below)", len(stats.stuck_writers)),
        ("partial or missing writes seen", len(stats.partial_writes)),
        ("failed writes found applied", len(stats.failed_but_applied)),
        ("lost acknowledged writes", len(lost)),
        ("documents not written by anyone", len(extra)),
        ("duplicate documents", duplicates),
        ("final documents", len(ids)),
        ("leftovers before / after the next writer", f"{len(leftovers_before)} / {len(leftovers_after)}"),
        ("generations on disk after it", len(generations)),
        ("equal to a rebuild (ids, counts, BM25 ≤ 1e-6)", f"{'yes' if equal else 'NO ' + why} (max |Δscore| {worst:.2e})"),
    ]
    violations = (len(false_damage) + len(other_fail) + len(stats.unexpected_writer_errors) + len(stats.stuck_writers)
                  + len(stats.partial_writes)
                  + len(stats.failed_but_applied) + len(lost) + len(extra) + duplicates + len(leftovers_after)
                  + (not equal) + (len(generations) != 1))
    rows.append(("violations", violations))
    width = max(len(r[0]) for r in rows)
    print(f"| {'soak':<{width}} | value |\n|{'-' * (width + 2)}|-------|")
    for k, v in rows:
        print(f"| {k:<{width}} | {v} |")
    details = {"false_damage": false_damage[:5], "other_failures": other_fail[:5],
               "unexpected_writer_errors": stats.unexpected_writer_errors[:5], "stuck_writers": stats.stuck_writers[:5],
               "partial_writes": stats.partial_writes[:5],
               "failed_but_applied": stats.failed_but_applied[:5], "lost": lost[:5], "extra": extra[:5],
               "leftovers_after": leftovers_after[:5]}
    for k, v in details.items():
        if v:
            print(f"{k}: {v}")
    if args.json:
        args.json.write_text(json.dumps({"rows": [[k, str(v)] for k, v in rows], "violations": violations,
                                         "kills": stats.kills, "answered": answered, "details": details}, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
