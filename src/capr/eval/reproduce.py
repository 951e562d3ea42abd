"""Published numbers as checks: every condition in ``reproduce/conditions.toml`` is a ``capr ...`` command with
the scores it printed when it was measured; the runner re-runs the commands and compares each metric.

    python -m capr.reproduce --quick          # the cheap conditions (CI)
    python -m capr.reproduce --only NAME      # one condition; --list names them all
    python -m capr.reproduce --check-doc docs/RESULTS.md   # every ✓ number of the document is a condition's
    python -m capr.reproduce --render docs/RESULTS.md      # rewrite the document's generated tables from the file
    python -m capr.reproduce --slow                        # also the conditions that train their models first

A condition in the file::

    [[condition]]
    name = "medquad-cdv.bm25.rerank64.tuple"
    command = "capr eval --benchmark medquad-cdv --data-dir ../shared/data -r bm25 --json"
    quick = true                      # part of --quick (default false)
    tolerance = 0.0                   # |got - expected| allowed for every metric (default 0: to the last digit)
    expected = { "R@1" = 29.98, "MAP" = 49.63 }
    table = "medquad-cdv-protocol"    # the generated table of docs/RESULTS.md that shows it ([[table]] below)
    row = ["rerank64", "tuple", "bm25"]   # its label cells there
    measured = "2026-11-28, 10b1002"  # when and at which commit the expected scores were printed

A condition that needs a trained model names the commands that make it (``setup``, run in order before its command;
``{work}`` is the runner's work folder, and a command whose ``--out`` already exists is skipped, so conditions share
what they train) and is ``slow``: only ``--slow`` or ``--only`` run it. Its tolerance states how far a re-trained
model may land from the published one (training on a time budget is not deterministic).

A table of the results document::

    [[table]]
    name = "medquad-cdv-protocol"
    title = "medquad-cdv, the papers' protocol"
    labels = ["protocol", "queries", "retriever"]

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
DEFAULT_WORK = Path("runs/reproduce")
_KEYS = {"name", "command", "expected", "quick", "tolerance", "area", "note", "table", "row", "measured", "setup", "slow"}
_TABLE_KEYS = {"name", "title", "labels"}


@dataclass(frozen=True)
class Condition:
    name: str
    command: str
    expected: dict[str, float]
    quick: bool = False
    tolerance: float = 0.0
    area: str = ""
    note: str = ""
    table: str = ""
    row: tuple[str, ...] = ()
    measured: str = ""
    setup: tuple[str, ...] = ()
    slow: bool = False


@dataclass(frozen=True)
class Table:
    """A table of the results document generated from the conditions that name it, in the file's order."""

    name: str
    title: str
    labels: tuple[str, ...]


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


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CaprError(f"{path}: no such conditions file") from None
    except tomllib.TOMLDecodeError as e:
        raise CaprError(f"{path}: not valid TOML ({e})") from None


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)


def load_conditions(path: Path) -> list[Condition]:
    """The conditions of a TOML file; a malformed entry is a CaprError naming the file, the condition and the field."""
    data = _read_toml(path)
    entries = data.get("condition")
    if not isinstance(entries, list) or not entries:
        raise CaprError(f"{path}: no [[condition]] entries")
    tables = {t.name: t for t in load_tables(path, data)}
    conditions, seen = [], set()
    for i, entry in enumerate(entries, 1):
        conditions.append(_condition(entry, f"{path} [condition {entry.get('name') or i}]", seen, tables))
    return conditions


def _condition(entry: dict, where: str, seen: set[str], tables: dict[str, Table]) -> Condition:
    unknown = set(entry) - _KEYS
    if unknown:
        raise CaprError(f"{where}: unknown field {sorted(unknown)[0]!r}; fields: {', '.join(sorted(_KEYS))}")
    for key in ("name", "command"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise CaprError(f"{where}: field {key!r} must be a non-empty string")
    if entry["name"] in seen:
        raise CaprError(f"{where}: field 'name' repeats an earlier condition")
    seen.add(entry["name"])
    for command in [entry["command"], *entry.get("setup", [])]:
        if not isinstance(command, str) or shlex.split(command)[:1] != ["capr"]:
            raise CaprError(f"{where}: field '{'command' if command == entry['command'] else 'setup'}' must start with 'capr'")
    expected = entry.get("expected")
    if not isinstance(expected, dict) or not expected or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in expected.values()):
        raise CaprError(f"{where}: field 'expected' must be a table of metric = number")
    tolerance = entry.get("tolerance", 0.0)
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or tolerance < 0:
        raise CaprError(f"{where}: field 'tolerance' must be a number ≥ 0")
    for key in ("quick", "slow"):
        if not isinstance(entry.get(key, False), bool):
            raise CaprError(f"{where}: field {key!r} must be true or false")
    if "setup" in entry and not _strings(entry["setup"]):
        raise CaprError(f"{where}: field 'setup' must be a list of capr commands")
    table, row = entry.get("table", ""), entry.get("row", [])
    if table and table not in tables:
        raise CaprError(f"{where}: field 'table' names no [[table]] of the file: {table!r}")
    if table and (not _strings(row) or len(row) != len(tables[table].labels)):
        raise CaprError(f"{where}: field 'row' must be {len(tables[table].labels)} label cells for table {table!r}")
    return Condition(name=entry["name"], command=entry["command"], expected={k: float(v) for k, v in expected.items()},
                     quick=entry.get("quick", False), tolerance=float(tolerance), area=str(entry.get("area", "")),
                     note=str(entry.get("note", "")), table=table, row=tuple(row), measured=str(entry.get("measured", "")),
                     setup=tuple(entry.get("setup", ())), slow=entry.get("slow", False))


def load_tables(path: Path, data: dict | None = None) -> list[Table]:
    """The [[table]] entries of a conditions file: the generated tables of the results document."""
    data = _read_toml(path) if data is None else data
    tables = []
    for i, entry in enumerate(data.get("table", []), 1):
        where = f"{path} [table {entry.get('name') or i}]"
        unknown = set(entry) - _TABLE_KEYS
        if unknown:
            raise CaprError(f"{where}: unknown field {sorted(unknown)[0]!r}; fields: {', '.join(sorted(_TABLE_KEYS))}")
        if not isinstance(entry.get("name"), str) or not isinstance(entry.get("title"), str) or not _strings(entry.get("labels")):
            raise CaprError(f"{where}: a table needs a name, a title and a list of labels")
        tables.append(Table(entry["name"], entry["title"], tuple(entry["labels"])))
    return tables


def select(conditions: list[Condition], only: list[str] | None = None, quick: bool = False,
           slow: bool = False) -> list[Condition]:
    """The conditions --only NAME (each must exist) and --quick name together, in the file's order: every condition
    but the slow ones (those that train first; --slow adds them) when neither is given. A selection of nothing is an
    error, not a run that checks nothing and passes."""
    names = {c.name for c in conditions}
    missing = [n for n in only or [] if n not in names]
    if missing:
        raise CaprError(f"no condition named {missing[0]!r}; --list shows the names")
    if not only and not quick:
        return [c for c in conditions if slow or not c.slow]
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


def _out_of(argv: list[str]) -> Path | None:
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--out="):
            return Path(arg.split("=", 1)[1])
    return None


def _last_line(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr.strip().splitlines() or ["(no output)"])[-1]


def run_condition(condition: Condition, data_dir: Path | None = None, cwd: Path | None = None,
                  work: Path = DEFAULT_WORK) -> Outcome:
    env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **os.environ}
    start = time.perf_counter()
    outcome = Outcome(condition)
    for step in condition.setup:
        argv = command_argv(step.replace("{work}", str(work)), data_dir)
        out = _out_of(argv)
        if out is not None and (Path(cwd or ".") / out).exists():
            continue  # made by an earlier condition (or run): conditions share what they train
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
        if proc.returncode != 0:
            outcome.error = f"setup exit {proc.returncode}: {_last_line(proc)}"
            outcome.seconds = round(time.perf_counter() - start, 1)
            return outcome
    proc = subprocess.run(command_argv(condition.command.replace("{work}", str(work)), data_dir), capture_output=True,
                          text=True, env=env, cwd=cwd)
    outcome.seconds = round(time.perf_counter() - start, 1)
    if proc.returncode != 0:
        outcome.error = f"exit {proc.returncode}: {_last_line(proc)}"
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
        if any(part not in claim.words and rivals.get(part, set()) & claim.words for part in c.name.lower().split(".")):
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
    """Each part of a condition name (lower case, as a row's words are read) → the parts that stand in its place in
    other names of as many parts: the other benchmarks (first part), and among one benchmark's names the other
    protocols, query fields or retrievers."""
    names = [c.name.lower().split(".") for c in conditions]
    rivals: dict[str, set[str]] = {}
    for a in names:
        for b in names:
            if len(a) != len(b):  # names of another shape ("trained.MODEL.BENCHMARK…") hold their parts elsewhere
                continue
            for j, (x, y) in enumerate(zip(a, b)):
                if x != y and (j == 0 or a[0] == b[0]):
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


_METRIC_ORDER = ("P@1", "R@1", "R@5", "R@10", "R@100", "MAP", "MRR@10", "nDCG@10")
_BEGIN = "<!-- table {name}: generated from reproduce/conditions.toml by `python -m capr.reproduce --render`; do not edit -->"
_END = "<!-- end of table {name} -->"


def render_table(table: Table, conditions: list[Condition]) -> str:
    """The Markdown table of the conditions that name ``table``: its label cells, every metric they expect, when
    each was measured, and a ✓ (each row is a condition's expected scores, which --check-doc then holds)."""
    rows = [c for c in conditions if c.table == table.name]
    if not rows:
        raise CaprError(f"table {table.name!r}: no condition names it")
    named = list(dict.fromkeys(m for c in rows for m in c.expected))
    metrics = [m for m in _METRIC_ORDER if m in named] + [m for m in named if m not in _METRIC_ORDER]
    lines = [f"| {' | '.join(table.labels)} | {' | '.join(metrics)} | measured | |",
             f"|{'---|' * len(table.labels)}{'---:|' * len(metrics)}---|---|"]
    for c in rows:
        values = [f"{c.expected[m]:.2f}" if m in c.expected else "" for m in metrics]
        lines.append(f"| {' | '.join(c.row)} | {' | '.join(values)} | {c.measured} | ✓ |")
    return "\n".join(lines)


def render_document(text: str, tables: list[Table], conditions: list[Condition]) -> str:
    """The document with each generated table (between its two markers) rewritten from the conditions."""
    for table in tables:
        begin, end = _BEGIN.format(name=table.name), _END.format(name=table.name)
        if begin not in text:
            continue
        head, rest = text.split(begin, 1)
        if end not in rest:
            raise CaprError(f"table {table.name!r}: the document has its start marker but not its end marker")
        text = f"{head}{begin}\n{render_table(table, conditions)}\n{end}{rest.split(end, 1)[1]}"
    return text


def stale_tables(text: str, tables: list[Table], conditions: list[Condition]) -> list[str]:
    """Tables of the document that differ from what the conditions render, and tables it lacks."""
    rendered = render_document(text, tables, conditions)
    missing = [t.name for t in tables if _BEGIN.format(name=t.name) not in text]
    changed = [t.name for t in tables if t.name not in missing and
               rendered.split(_BEGIN.format(name=t.name))[1].split(_END.format(name=t.name))[0]
               != text.split(_BEGIN.format(name=t.name))[1].split(_END.format(name=t.name))[0]]
    return missing + changed



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
                        help="Run nothing: check that every ✓ row of this document is a condition's expected scores "
                             "and that its generated tables are current.")
    parser.add_argument("--render", type=Path, metavar="MARKDOWN",
                        help="Run nothing: rewrite this document's generated tables from the conditions file.")
    parser.add_argument("--slow", action="store_true", help="Also the conditions that train their models first.")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK,
                        help=f"Where setup commands write what they train ({{work}} in the file; default {DEFAULT_WORK}).")
    args = parser.parse_args(argv)
    try:
        if args.render is not None:
            return _render(args.render, args.conditions)
        if args.check_doc is not None:
            return _check_doc(args.check_doc, args.conditions)
        chosen = select(load_conditions(args.conditions), args.only, args.quick, args.slow)
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
        outcomes.append(run_condition(c, args.data_dir, work=args.work))
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


def _render(path: Path, conditions_file: Path) -> int:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CaprError(f"{path}: no such document") from None
    tables = load_tables(conditions_file)
    rendered = render_document(text, tables, load_conditions(conditions_file))
    if rendered != text:
        path.write_text(rendered, encoding="utf-8")
    missing = [t.name for t in tables if _BEGIN.format(name=t.name) not in text]
    print(f"{path}: {len(tables) - len(missing)} generated tables"
          + (f"; no markers for {', '.join(missing)}" if missing else ""))
    return 0


def _check_doc(path: Path, conditions_file: Path) -> int:
    conditions = load_conditions(conditions_file)
    held, unheld = check_document(path, conditions)
    stale = stale_tables(path.read_text(encoding="utf-8"), load_tables(conditions_file), conditions)
    for claim, c in held:
        print(f"{path}:{claim.line}: {' / '.join(f'{v:g}' for v in claim.values)} = {c.name}")
    for claim in unheld:
        print(f"{path}:{claim.line}: no condition of the file has {' / '.join(f'{v:g}' for v in claim.values) or 'these numbers'}: "
              f"{claim.row}", file=sys.stderr)
    cited = {c.name for _, c in held}
    print(f"\n{len(held)} of {len(held) + len(unheld)} ✓ claims are conditions' expected scores; conditions no ✓ row "
          f"shows: {', '.join(c.name for c in conditions if c.name not in cited) or 'none'}")
    if stale:
        print(f"{path}: generated tables not current (python -m capr.reproduce --render {path}): {', '.join(stale)}",
              file=sys.stderr)
    return 1 if unheld or stale else 0


__all__ = ["Check", "Claim", "Condition", "Outcome", "Table", "check_document", "load_tables", "render_document",
           "render_table", "stale_tables", "claim_condition", "command_argv", "published_claims", "load_conditions", "main",
           "run_condition", "select", "summary", "table"]
