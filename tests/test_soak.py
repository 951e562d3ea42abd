"""The short soak and fault run (python -m bench.soak): readers beside two writers killed at random, then the audit.

About 60-100 s: four readers (two lanes of `capr search` processes, two processes opening and searching the
index in a loop), two writer lanes adding, replacing and deleting documents and compacting, at least 20
SIGKILLs and SIGTERMs of writers, adds under a file-size limit. The release runs it for 10 minutes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.soak


def test_short_soak_has_no_false_errors_lost_writes_or_duplicates(tmp_path):
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, "-m", "bench.soak",
                           "--seconds", "45", "--min-kills", "20", "--kill-rate", "0.8", "--workdir", str(tmp_path),
                           "--json", str(out)], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          cwd=Path(__file__).resolve().parents[1])
    assert out.exists(), proc.stderr[-2000:]
    result = json.loads(out.read_text())
    rows = dict(result["rows"])
    assert proc.returncode == 0 and result["violations"] == 0, proc.stdout
    assert result["kills"] >= 20 and result["answered"] > 0
    assert rows["searches failed: false 'damaged'"] == "0" and rows["lost acknowledged writes"] == "0"
    assert rows["duplicate documents"] == "0" and rows["equal to a rebuild (ids, counts, BM25 ≤ 1e-6)"].startswith("yes")


def _lane(tmp_path, wait: float, stuck_after: float):
    import argparse

    from bench.soak import Stats, WriterLane

    args = argparse.Namespace(wait=wait, stuck_after=stuck_after, kill_rate=0.0)
    return WriterLane("a", tmp_path / "idx", tmp_path, Stats(), args, lambda: True, seed=1)


def _silent_writer(lane, script: str):
    def spawn():
        proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lane._follow(proc)
        return proc
    return spawn


def test_a_writer_that_stops_answering_is_ended_with_its_stack_recorded(tmp_path):
    """The harness never waits for ever on a writer: one silent past --wait + --stuck-after is a violation whose
    record carries the stack faulthandler printed, and the lane goes on."""
    from bench.soak import STUCK

    lane = _lane(tmp_path, wait=0.5, stuck_after=1.5)
    lane._spawn_writer = _silent_writer(lane, "import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\n"
                                              "def stuck_in_a_write():\n    time.sleep(600)\nstuck_in_a_write()\n")
    status, last, pid, sent = lane._run_api("add", ["add", "idx", "x.jsonl"])
    assert last == STUCK and sent is None and lane.api is None
    assert status is not None and status < 0  # ended by the harness (SIGABRT), not left running
    [record] = lane.stats.stuck_writers
    assert f"pid {pid}" in record and "stuck_in_a_write" in record


def test_a_writer_that_floods_stderr_still_answers(tmp_path):
    """A long-lived writer's stderr is read as it comes: 1 MiB of warnings (16 pipe buffers) does not block it."""
    lane = _lane(tmp_path, wait=0.5, stuck_after=20)
    lane._spawn_writer = _silent_writer(lane, "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"
                                              "sys.stderr.write('warning: ' + 'x' * (1 << 20) + '\\n')\n"
                                              "print('ok', flush=True)\nsys.stdin.readline()\n")
    status, last, pid, sent = lane._run_api("add", ["add", "idx", "x.jsonl"])
    assert (status, last, sent) == (0, "", None) and not lane.stats.stuck_writers


def test_a_writer_that_outlives_its_sigterm_is_a_violation(tmp_path):
    """A SIGTERM'd writer may finish the write it is in, but must then end: one that waits for more (the signal
    lost) is recorded and ended, never waited on for ever."""
    lane = _lane(tmp_path, wait=0.5, stuck_after=2)
    lane.args.kill_rate = 1.0
    lane.rng.uniform = lambda a, b: 0.2  # the fault comes 0.2 s into the write
    lane.rng.choice = lambda seq: signal.SIGTERM
    lane._spawn_writer = _silent_writer(lane, "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                              "print('ready', flush=True)\nsys.stdin.readline()\ntime.sleep(1)\n"
                                              "print('ok', flush=True)\nsys.stdin.readline()\n")
    status, last, pid, sent = lane._run_api("add", ["add", "idx", "x.jsonl"])
    assert sent == signal.SIGTERM and last == "stuck"
    [record] = lane.stats.stuck_writers
    assert "of SIGTERM (answered 'ok' and went on)" in record
