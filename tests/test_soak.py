"""The short soak and fault run (python -m bench.soak): readers beside two writers killed at random, then the audit.

About 60-100 s: four readers (two lanes of `capr search` processes, two processes opening and searching the
index in a loop), two writer lanes adding, replacing and deleting documents and compacting, at least 20
SIGKILLs and SIGTERMs of writers, adds under a file-size limit. The release runs it for 10 minutes."""

from __future__ import annotations

import json
import os
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
