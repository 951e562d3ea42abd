"""Published numbers as checks: every condition in ``reproduce/conditions.toml`` is a ``capr ...`` command with
the scores it printed when it was measured; the runner re-runs the commands and compares each metric.

    python -m capr.reproduce --quick          # the cheap conditions (CI)
    python -m capr.reproduce --only NAME      # one condition; --list names them all
    python -m capr.reproduce --check-doc docs/RESULTS.md   # every ✓ number of the document is a condition's

A condition in the file::

    [[condition]]
    name = "medquad-cdv.bm25.rerank64.tuple"
    command = "capr eval --benchmark medquad-cdv --data-dir ../shared/data -r bm25 --json"
    quick = true                      # part of --quick (default false)
    tolerance = 0.0                   # |got - expected| allowed for every metric (default 0: to the last digit)
    expected = { "R@1" = 29.98, "MAP" = 49.63 }

Commands run from the current directory with this interpreter (``capr`` becomes ``python -m capr``), one thread
(``OMP_NUM_THREADS=1`` unless set) and offline models; each must print ``capr eval --json``'s record, whose
``metrics`` are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from capr.errors import CaprError

DEFAULT_CONDITIONS = Path("reproduce/conditions.toml")
_KEYS = {"name", "command", "expected", "quick", "tolerance", "area", "note"}


@dataclass(frozen=True)
class Condition:
    name: str
    command: str
    expected: dict[str, float]
    quick: bool = False
    tolerance: float = 0.0
    area: str = ""
    note: str = ""


@dataclass(frozen=True)
class Check:
    """One metric of one condition: what the file expects and what the command printed (None: not printed)."""

    condition: str
    metric: str
    expected: float
    got: float | None
    tolerance: float

    @property
    def delta(self) -> float | None:
        return None if self.got is None else round(self.got - self.expected, 6)

    @property
    def ok(self) -> bool:
        return self.got is not None and abs(self.got - self.expected) <= self.tolerance + 1e-9


@dataclass
class Outcome:
    condition: Condition
    checks: list[Check] = field(default_factory=list)
    error: str | None = None  # the command failed or printed no record
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)


def load_conditions(path: Path) -> list[Condition]:
    """The conditions of a TOML file; a malformed entry is a CaprError naming the file, the condition and the field."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CaprError(f"{path}: no such conditions file") from None
    except tomllib.TOMLDecodeError as e:
        raise CaprError(f"{path}: not valid TOML ({e})") from None
    entries = data.get("condition")
    if not isinstance(entries, list) or not entries:
        raise CaprError(f"{path}: no [[condition]] entries")
    conditions, seen = [], set()
    for i, entry in enumerate(entries, 1):
        where = f"{path} [condition {entry.get('name') or i}]"
        unknown = set(entry) - _KEYS
        if unknown:
            raise CaprError(f"{where}: unknown field {sorted(unknown)[0]!r}; fields: {', '.join(sorted(_KEYS))}")
        for key in ("name", "command"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise CaprError(f"{where}: field {key!r} must be a non-empty string")
        if entry["name"] in seen:
            raise CaprError(f"{where}: field 'name' repeats an earlier condition")
        seen.add(entry["name"])
        if not shlex.split(entry["command"])[:1] == ["capr"]:
            raise CaprError(f"{where}: field 'command' must start with 'capr'")
        expected = entry.get("expected")
        if not isinstance(expected, dict) or not expected or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in expected.values()):
            raise CaprError(f"{where}: field 'expected' must be a table of metric = number")
        tolerance = entry.get("tolerance", 0.0)
        if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or tolerance < 0:
            raise CaprError(f"{where}: field 'tolerance' must be a number ≥ 0")
        if not isinstance(entry.get("quick", False), bool):
            raise CaprError(f"{where}: field 'quick' must be true or false")
        conditions.append(Condition(name=entry["name"], command=entry["command"],
                                    expected={k: float(v) for k, v in expected.items()}, quick=entry.get("quick", False),
                                    tolerance=float(tolerance), area=str(entry.get("area", "")),
                                    note=str(entry.get("note", ""))))
    return conditions


def select(conditions: list[Condition], only: list[str] | None = None, quick: bool = False) -> list[Condition]:
    """The conditions --only NAME (each must exist) and --quick name together, in the file's order: every condition
    when neither is given. A selection of nothing is an error, not a run that checks nothing and passes."""
    names = {c.name for c in conditions}
    missing = [n for n in only or [] if n not in names]
    if missing:
        raise CaprError(f"no condition named {missing[0]!r}; --list shows the names")
    if not only and not quick:
        return list(conditions)
    chosen = [c for c in conditions if c.name in (only or ()) or (quick and c.quick)]
    if not chosen:
        raise CaprError("no condition selected (--quick: none is marked quick)")
    return chosen


def command_argv(command: str, data_dir: Path | None = None) -> list[str]:
    """The command as this interpreter runs it; ``data_dir`` replaces the value of its ``--data-dir``."""
    argv = shlex.split(command)
    if data_dir is not None:
        for i, arg in enumerate(argv):
            if arg == "--data-dir" and i + 1 < len(argv):
                argv[i + 1] = str(data_dir)
            elif arg.startswith("--data-dir="):
                argv[i] = f"--data-dir={data_dir}"
    return [sys.executable, "-m", "capr", *argv[1:]]


def run_condition(condition: Condition, data_dir: Path | None = None, cwd: Path | None = None) -> Outcome:
    env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **os.environ}
    start = time.perf_counter()
    proc = subprocess.run(command_argv(condition.command, data_dir), capture_output=True, text=True, env=env, cwd=cwd)
    outcome = Outcome(condition, seconds=round(time.perf_counter() - start, 1))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        outcome.error = f"exit {proc.returncode}: {last}"
        return outcome
    record = next((line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")), None)
    try:
        metrics = json.loads(record)["metrics"] if record else None
    except (json.JSONDecodeError, KeyError, TypeError):
        metrics = None
    if not isinstance(metrics, dict):
        outcome.error = "the command printed no JSON record with 'metrics' (is --json missing?)"
        return outcome
    outcome.checks = [Check(condition.name, m, exp, _number(metrics.get(m)), condition.tolerance)
                      for m, exp in condition.expected.items()]
    return outcome


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def table(outcomes: list[Outcome]) -> str:
    """The comparison as a Markdown table: condition, metric, expected, got, delta, ok."""
    lines = ["| condition | metric | expected | got | delta | ok |", "|---|---|---:|---:|---:|---|"]
    for o in outcomes:
        if o.error:
            lines.append(f"| {o.condition.name} | — | — | — | — | **error**: {o.error.replace('|', '/')} |")
        for c in o.checks:
            got = "—" if c.got is None else f"{c.got:g}"
            delta = "—" if c.delta is None else f"{c.delta:+g}"
            lines.append(f"| {c.condition} | {c.metric} | {c.expected:g} | {got} | {delta} | "
                         f"{'yes' if c.ok else '**NO**'} |")
    return "\n".join(lines)


def summary(outcomes: list[Outcome]) -> str:
    """One row per condition: how many metrics were compared, the largest difference, the verdict and the time."""
    lines = ["| condition | metrics | largest \\|delta\\| | ok | seconds |", "|---|---:|---:|---|---:|"]
    for o in outcomes:
        deltas = [abs(c.delta) for c in o.checks if c.delta is not None]
        largest = "—" if o.error or not deltas else f"{max(deltas):g}"
        verdict = f"**error**: {o.error.replace('|', '/')}" if o.error else "yes" if o.ok else "**NO**"
        lines.append(f"| {o.condition.name} | {len(o.checks)} | {largest} | {verdict} | {o.seconds:g} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Claim:
    """Numbers a results document attributes to a reproduction condition: one table row marked ✓, or one cell of
    it that carries its own ✓ (a row of several conditions)."""

    line: int  # 1-based, in the document
    row: str
    values: tuple[float, ...]
    words: frozenset[str] = frozenset()  # the row's words ("rerank64", "tuple", "bm25"): which condition it names


_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def published_claims(text: str) -> list[Claim]:
    """The claims of a Markdown results document: every table row with a ✓. A cell holding numbers and its own ✓
    ("88.00 / 84.85 / 91.23 ✓") is one claim, its numbers split at "/"; otherwise the row's numeric cells are.
    Of "before → after", the value after the last arrow counts; bold marks are ignored. A ✓ row without a number
    is a claim of nothing, which no condition holds (so a row the parser cannot read fails, never passes)."""
    claims = []
    for i, line in enumerate(text.splitlines(), 1):
        row = line.strip()
        if not row.startswith("|") or "✓" not in row:
            continue
        cells = [c.strip() for c in row.strip("|").split("|")]
        marked = [c.replace("✓", "") for c in cells if "✓" in c and c.replace("✓", "").strip()]
        groups = [c.split("/") for c in marked] if marked else [cells]
        for group in groups:
            values = tuple(v for v in (_cell_value(c) for c in group) if v is not None)
            words = frozenset(w for c in cells if _cell_value(c) is None for w in re.findall(r"[a-z0-9@-]+", c.lower()))
            claims.append(Claim(i, row, values, words))
    return claims


def _cell_value(cell: str) -> float | None:
    text = cell.split("→")[-1].replace("*", "").strip()
    return float(text) if _NUMBER.match(text) else None


def claim_condition(claim: Claim, conditions: list[Condition]) -> Condition | None:
    """The first condition whose expected scores hold every number of the claim, each a different metric's score
    (within the condition's tolerance; the document may order the metrics its own way, "P@1 / MAP / nDCG@10"),
    among the conditions the row's words do not contradict: a row that says "rerank64" is never held by a condition
    named "full" (see :func:`_rivals`). None when no condition does: a drifted number, in the document or in the
    file."""
    rivals = _rivals(conditions)
    for c in conditions:
        if any(part not in claim.words and rivals.get(part, set()) & claim.words for part in c.name.split(".")):
            continue
        unused = list(c.expected.values())
        for v in claim.values:
            match = next((i for i, e in enumerate(unused) if abs(v - e) <= c.tolerance + 1e-9), None)
            if match is None:
                break
            unused.pop(match)
        else:
            if claim.values:
                return c
    return None


def _rivals(conditions: list[Condition]) -> dict[str, set[str]]:
    """Each part of a condition name → the parts that stand in its place in other names: the other benchmarks
    (first part), and among one benchmark's names of one length the other protocols, query fields or retrievers."""
    names = [c.name.split(".") for c in conditions]
    rivals: dict[str, set[str]] = {}
    for a in names:
        for b in names:
            for j, (x, y) in enumerate(zip(a, b)):
                if x != y and (j == 0 or (a[0] == b[0] and len(a) == len(b))):
                    rivals.setdefault(x, set()).add(y)
    return rivals


def check_document(path: Path, conditions: list[Condition]) -> tuple[list[tuple[Claim, Condition]], list[Claim]]:
    """Each ✓ claim of the document with the condition that holds it, and the claims none holds."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CaprError(f"{path}: no such document") from None
    held, unheld = [], []
    for claim in published_claims(text):
        c = claim_condition(claim, conditions)
        (held.append((claim, c)) if c is not None else unheld.append(claim))
    if not held and not unheld:
        raise CaprError(f"{path}: no table row is marked ✓")
    return held, unheld


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capr.reproduce",
                                     description="Re-run the published conditions and compare every metric.")
    parser.add_argument("--conditions", type=Path, default=DEFAULT_CONDITIONS, help="TOML file of conditions.")
    parser.add_argument("--only", action="append", metavar="NAME", help="Run this condition (repeatable).")
    parser.add_argument("--quick", action="store_true", help="The conditions marked quick (CI), and any --only.")
    parser.add_argument("--list", action="store_true", help="List the conditions and exit.")
    parser.add_argument("--data-dir", type=Path, help="Replaces the --data-dir of every command.")
    parser.add_argument("--json-out", type=Path, help="Also write every outcome as JSON lines here.")
    parser.add_argument("--summary", action="store_true", help="One row per condition instead of one per metric.")
    parser.add_argument("--check-doc", type=Path, metavar="MARKDOWN",
                        help="Run nothing: check that every ✓ row of this document is a condition's expected scores.")
    args = parser.parse_args(argv)
    try:
        if args.check_doc is not None:
            return _check_doc(args.check_doc, load_conditions(args.conditions))
        chosen = select(load_conditions(args.conditions), args.only, args.quick)
    except CaprError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for c in chosen:
            print(f"{c.name}\t{'quick' if c.quick else 'full'}\t{c.command}")
        return 0
    outcomes = []
    for c in chosen:
        print(f"running {c.name}: {c.command}", file=sys.stderr, flush=True)
        outcomes.append(run_condition(c, args.data_dir))
        print(f"  {'ok' if outcomes[-1].ok else 'MISMATCH'} in {outcomes[-1].seconds} s", file=sys.stderr, flush=True)
        if args.json_out:
            with open(args.json_out, "a", encoding="utf-8") as f:
                o = outcomes[-1]
                f.write(json.dumps({"condition": c.name, "error": o.error, "seconds": o.seconds,
                                    "got": {k.metric: k.got for k in o.checks}}) + "\n")
    print(summary(outcomes) if args.summary else table(outcomes))
    bad = [o.condition.name for o in outcomes if not o.ok]
    total = sum(o.seconds for o in outcomes)
    print(f"\n{len(outcomes) - len(bad)} of {len(outcomes)} conditions reproduce ({total:.0f} s)"
          + (f"; mismatches: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


def _check_doc(path: Path, conditions: list[Condition]) -> int:
    held, unheld = check_document(path, conditions)
    for claim, c in held:
        print(f"{path}:{claim.line}: {' / '.join(f'{v:g}' for v in claim.values)} = {c.name}")
    for claim in unheld:
        print(f"{path}:{claim.line}: no condition of the file has {' / '.join(f'{v:g}' for v in claim.values) or 'these numbers'}: "
              f"{claim.row}", file=sys.stderr)
    cited = {c.name for _, c in held}
    print(f"\n{len(held)} of {len(held) + len(unheld)} ✓ claims are conditions' expected scores; conditions no ✓ row "
          f"shows: {', '.join(c.name for c in conditions if c.name not in cited) or 'none'}")
    return 1 if unheld else 0


__all__ = ["Check", "Claim", "Condition", "Outcome", "check_document", "claim_condition", "command_argv", "published_claims", "load_conditions", "main",
           "run_condition", "select", "summary", "table"]
