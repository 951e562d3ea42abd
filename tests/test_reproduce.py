"""The reproduction runner (capr.eval.reproduce): published conditions re-run and compared metric by metric; a
mismatch, a failing command or a malformed conditions file ends with a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from capr.eval.reproduce import Check, Condition, Outcome, command_argv, load_conditions, summary
from conftest import DATA_DIR, REPO, need_data

CONDITIONS = REPO / "reproduce" / "conditions.toml"
# the cheapest real command with metrics: 25 MEDIQA questions re-ranking their judged answers with BM25
MEDIQA_BM25 = "capr eval --benchmark mediqa2019 --data-dir ../shared/data --query-field question -r bm25 --json"


def reproduce(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "capr.reproduce", *args], capture_output=True, text=True, cwd=cwd)


def write_conditions(path: Path, *entries: str) -> Path:
    path.write_text("\n".join(entries), encoding="utf-8")
    return path


def condition(name: str, command: str, expected: str, quick: bool = True) -> str:
    return f'[[condition]]\nname = "{name}"\ncommand = "{command}"\nquick = {str(quick).lower()}\nexpected = {expected}\n'


def test_the_published_conditions_file_is_well_formed():
    conditions = load_conditions(CONDITIONS)
    assert len({c.name for c in conditions}) == len(conditions)
    assert any(c.quick for c in conditions) and any(not c.quick for c in conditions)
    for c in conditions:
        assert "--json" in c.command and "--data-dir ../shared/data" in c.command, c.name


def test_data_dir_replaces_the_commands_data_dir():
    argv = command_argv(MEDIQA_BM25, Path("/elsewhere/data"))
    assert argv[:3] == [sys.executable, "-m", "capr"]
    assert argv[argv.index("--data-dir") + 1] == "/elsewhere/data"


def test_the_summary_has_one_row_per_condition_with_its_largest_difference():
    cond = Condition("c", "capr eval --json", {"R@1": 1.0, "MAP": 2.0})
    same = Outcome(cond, [Check("c", "R@1", 1.0, 1.0, 0.0), Check("c", "MAP", 2.0, 2.0, 0.0)], seconds=3.0)
    off = Outcome(Condition("d", "capr eval --json", {"R@1": 1.0}), [Check("d", "R@1", 1.0, 1.25, 0.0)], seconds=1.5)
    failed = Outcome(Condition("e", "capr eval --json", {"R@1": 1.0}), error="exit 2: unknown benchmark")
    rows = summary([same, off, failed]).splitlines()[2:]
    assert rows == ["| c | 2 | 0 | yes | 3 |", "| d | 1 | 0.25 | **NO** | 1.5 |",
                    "| e | 0 | — | **error**: exit 2: unknown benchmark | 0 |"]


def test_a_failing_command_is_a_mismatch_with_its_reason(tmp_path):
    path = write_conditions(tmp_path / "c.toml", condition("nope", "capr eval --benchmark no-such-set --json",
                                                            '{ "R@1" = 1.0 }'))
    proc = reproduce("--conditions", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "unknown benchmark 'no-such-set'" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("entry, reason", [
    (condition("a", "python -c 1", '{ "R@1" = 1.0 }'), "field 'command' must start with 'capr'"),
    (condition("a", "capr eval --json", '{ "R@1" = "high" }'), "field 'expected' must be a table of metric = number"),
    ('[[condition]]\nname = "a"\ncommand = "capr eval"\nexpected = { "R@1" = 1 }\nqiuck = true\n', "unknown field 'qiuck'"),
])
def test_a_malformed_conditions_file_is_one_line_naming_the_field(tmp_path, entry, reason):
    proc = reproduce("--conditions", str(write_conditions(tmp_path / "c.toml", entry)))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 'c.toml'} [condition a]: {reason}"), lines


def test_an_unknown_condition_name_is_refused(tmp_path):
    proc = reproduce("--only", "no-such-condition")
    assert proc.returncode == 2 and "no condition named 'no-such-condition'" in proc.stderr


@pytest.mark.data
def test_a_mismatching_metric_exits_non_zero_and_a_matching_one_zero(tmp_path):
    need_data("mediqa2019")
    good, bad = '{ "MAP" = 84.85, "nDCG@10" = 91.23 }', '{ "MAP" = 84.85, "nDCG@10" = 91.24 }'
    path = write_conditions(tmp_path / "c.toml", condition("mediqa-bm25", MEDIQA_BM25, good),
                            condition("mediqa-bm25-off-by-one-digit", MEDIQA_BM25, bad))
    proc = reproduce("--conditions", str(path), "--data-dir", str(DATA_DIR), "--only", "mediqa-bm25")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| mediqa-bm25 | nDCG@10 | 91.23 | 91.23 | +0 | yes |" in proc.stdout
    proc = reproduce("--conditions", str(path), "--data-dir", str(DATA_DIR))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "| mediqa-bm25-off-by-one-digit | nDCG@10 | 91.24 | 91.23 | -0.01 | **NO** |" in proc.stdout
    assert "mismatches: mediqa-bm25-off-by-one-digit" in proc.stdout


@pytest.mark.data
def test_the_quick_set_reproduces():
    """CI's reproduction check: every quick condition of reproduce/conditions.toml, to the last digit."""
    need_data()
    proc = reproduce("--quick", "--data-dir", str(DATA_DIR))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


def test_quick_and_only_select_together_and_nothing_selected_is_an_error():
    from capr.errors import CaprError
    from capr.eval.reproduce import Condition, select

    made = [Condition(name=n, command="capr --help", expected={"m": 1.0}, quick=q)
            for n, q in (("a", True), ("b", False), ("c", False))]
    assert [c.name for c in select(made, ["c"], quick=True)] == ["a", "c"]
    assert [c.name for c in select(made, ["b"])] == ["b"]
    assert [c.name for c in select(made)] == ["a", "b", "c"]
    with pytest.raises(CaprError, match="no condition selected"):
        select([m for m in made if not m.quick], quick=True)


# -- docs/RESULTS.md against the conditions file: every ✓ number is a condition's expected score -------------------
RESULTS = REPO / "docs" / "RESULTS.md"


def test_every_checked_number_of_the_results_is_a_conditions_expected_score():
    from capr.eval.reproduce import check_document

    held, unheld = check_document(RESULTS, load_conditions(CONDITIONS))
    assert unheld == [], [f"line {c.line}: {c.row}" for c in unheld]
    checked_rows = [line for line in RESULTS.read_text().splitlines() if line.startswith("|") and "✓" in line]
    assert {c.line for c, _ in held} and len({c.row for c, _ in held}) == len(checked_rows)
    assert all(len(c.values) >= min(3, len(cond.expected)) for c, cond in held)  # no row held by one or two numbers alone


def test_a_drifted_number_fails_with_its_line(tmp_path):
    """A digit changed in a ✓ row, a row given another protocol's numbers, a drifted cell of a multi-condition row, and
    a changed expected value in the file: each is a claim no condition holds, named by its line; the command exits 1."""
    from capr.eval.reproduce import check_document

    conditions = load_conditions(CONDITIONS)
    text = RESULTS.read_text()
    drifts = [("| rerank64 | tuple | bm25 | 29.98 | 78.64 | 86.48 | 49.63 |", "| rerank64 | tuple | bm25 | 29.98 | 78.64 | 86.48 | 49.64 |"),
              # the full protocol's MAP in the rerank64 row: another condition's numbers under this row's name
              ("| rerank64 | tuple | bm25 | 29.98 | 78.64 | 86.48 | 49.63 | 49.81 | 58.51 |",
               "| rerank64 | tuple | bm25 | 29.98 | 78.64 | 86.48 | 49.49 | 49.81 | 58.50 |"),
              ("88.00 / 84.85 / 91.23 ✓", "88.00 / 84.58 / 91.23 ✓")]
    for old, new in drifts:
        assert old in text, old
        drifted = tmp_path / "RESULTS.md"
        drifted.write_text(text.replace(old, new, 1))
        line = text[: text.index(old)].count("\n") + 1
        _, unheld = check_document(drifted, conditions)
        assert [c.line for c in unheld] == [line], new
    moved = CONDITIONS.read_text().replace('"nDCG@10" = 58.51 }', '"nDCG@10" = 58.52 }', 1)
    assert moved != CONDITIONS.read_text()
    path = tmp_path / "conditions.toml"
    path.write_text(moved)
    proc = reproduce("--conditions", str(path), "--check-doc", str(RESULTS))
    assert proc.returncode == 1 and "29.98 / 78.64 / 86.48 / 49.63 / 49.81 / 58.51" in proc.stderr, proc.stderr
    assert proc.stderr.count("no condition of the file has") == 1


@pytest.mark.data
def test_a_slow_condition_runs_its_setup_once_and_only_when_asked(tmp_path):
    """Setup commands write into the work folder; one whose --out exists is not run again (conditions share what they
    train); a slow condition runs only with --slow or --only."""
    need_data("mediqa2019")
    work = tmp_path / "work"
    setup = f'setup = ["capr index {REPO}/src/capr/demo/corpus --out {{work}}/demo --lexical-only"]\nslow = true\n'
    path = write_conditions(tmp_path / "c.toml", condition("fast", MEDIQA_BM25, '{ "nDCG@10" = 91.23 }'),
                            condition("trained", MEDIQA_BM25, '{ "nDCG@10" = 91.23 }', quick=False) + setup)
    proc = reproduce("--conditions", str(path), "--data-dir", str(DATA_DIR), "--work", str(work))
    assert proc.returncode == 0 and "| trained |" not in proc.stdout and not work.exists(), proc.stdout + proc.stderr
    proc = reproduce("--conditions", str(path), "--data-dir", str(DATA_DIR), "--work", str(work), "--slow")
    assert proc.returncode == 0 and "| trained | nDCG@10 | 91.23 | 91.23 |" in proc.stdout, proc.stdout + proc.stderr
    made = (work / "demo" / "CURRENT").stat().st_mtime_ns
    proc = reproduce("--conditions", str(path), "--data-dir", str(DATA_DIR), "--work", str(work), "--only", "trained")
    assert proc.returncode == 0 and (work / "demo" / "CURRENT").stat().st_mtime_ns == made


def test_the_generated_tables_render_from_the_conditions_and_a_stale_one_is_named(tmp_path):
    from capr.eval.reproduce import load_tables, render_document, stale_tables

    conditions, tables = load_conditions(CONDITIONS), load_tables(CONDITIONS)
    doc = "intro\n<!-- table free-text: generated from reproduce/conditions.toml by `python -m capr.reproduce --render`; " \
          "do not edit -->\nold\n<!-- end of table free-text -->\nafter\n"
    rendered = render_document(doc, tables, conditions)
    assert rendered.startswith("intro\n") and rendered.endswith("after\n") and "| mediqa2019 | BM25 |" in rendered
    assert "free-text" in stale_tables(doc, tables, conditions) and "free-text" not in stale_tables(rendered, tables, conditions)
    assert render_document(rendered, tables, conditions) == rendered
