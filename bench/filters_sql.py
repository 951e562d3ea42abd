"""capr's filter language against SQLite's WHERE (issue 52): on random metadata and random filters, the documents a
filter keeps on the embedded index (and on a real Milvus server) are the rows SQLite's WHERE clause keeps, and a
filter capr refuses is one the SQL says is a typo (a value no row has) or a bound of the wrong kind.

The SQL is written here from the rules docs/GUIDE.md states, in SQL's own terms, not from capr's code:

- each field is two columns: the value (TEXT, INTEGER/REAL for a JSON number, 'true'/'false' for a boolean) and its
  kind ('s', 'n', 'b'); a missing field is NULL in both, and SQL's three-valued logic makes every clause on it false,
  ``!=`` and ``not in`` included;
- text compares with ``=`` and ``<`` under SQLite's BINARY collation (exact, code-point order);
- a number written as text is ``CAST(x AS REAL)`` when it matches NUMBER (the REGEXP operator);
- a date is the value's leading date-time (SQL ``substr`` up to its fraction or zone, a space read as ``T``), and
  compares with a date bound at ``min(length(date), length(bound))`` characters.

Random rows hold identifiers that differ only in case, unicode words, missing fields, dates with and without times
(zones, fractions, a space before the time), JSON numbers and numbers written as text, booleans; each row set is
indexed in two segments and loses a few documents to deletes. Random filters use =, !=, ranges, in and not in,
ANDed.

    python -m bench.filters_sql                         # 10,000 cases on the embedded index
    python -m bench.filters_sql --milvus lite           # ... and on a Milvus Lite 2.5 server (or standalone: 2.3.5)
    python -m bench.filters_sql --sets 20 --filters 50  # a quick check
"""

from __future__ import annotations

import argparse
import calendar
import random
import re
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

NUMBER = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
DATE = (r"^[0-9]{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12][0-9]|3[01])([T ][0-9]{2}(:[0-9]{2}(:[0-9]{2})?)?)?)?"
        r"(\.[0-9]+)?(Z|[+-][0-9]{2}:?[0-9]{2})?$")
BOUND = r"^[0-9]{4}(-[0-9]{2}(-[0-9]{2}([T ][0-9]{2}(:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?)?)?)?)?$"
# the fields of the random rows, and whether each is read as dates (an identifier is not, unless its name says so)
FIELDS = {"patient": False, "subject_id": False, "category": True, "date": True, "birth_date": True, "score": True,
          "code": True, "flag": True}
OPS = ("=", "!=", ">=", "<=", ">", "<", "in", "not in")


# -- random metadata and filters --------------------------------------------------------------------------------------
def _date(rng: random.Random, bound: bool = False) -> str:
    day = f"215{rng.choice('01')}-0{rng.choice('12')}-0{rng.choice('123')}"
    time_ = f"{rng.choice(['00', '08', '23'])}:{rng.choice(['00', '30'])}:{rng.choice(['00', '59'])}"
    if bound:
        return rng.choice([day[:4], day[:7], day, f"{day}T{time_[:2]}", f"{day}T{time_[:5]}", f"{day} {time_}"])
    return rng.choice([day[:7], day, day, f"{day}T{time_[:2]}", f"{day}T{time_[:5]}", f"{day} {time_}",
                       f"{day}T{time_}Z", f"{day}T{time_}.5+01:00", f"{day}T{time_[:5]}-05:00"])


POOLS: dict[str, Callable[[random.Random], Any]] = {
    "patient": lambda r: r.choice(["abC1", "ABc1", "abc1", "P-1001", "p-1001", "2041", "2041-11", "Ünal", "ünal", 2041]),
    "subject_id": lambda r: r.choice(["10006", "010006", 10006, "10007", "1e2", 100]),
    "category": lambda r: r.choice(["Radiology", "radiology", "Discharge summary", "discharge summary", "Échographie",
                                    "échographie", "ß", "SS", "Nursing/other", "x-ray", "", " spaced "]),
    "date": lambda r: _date(r),
    "birth_date": lambda r: r.choice([_date(r), "unknown"]),
    "score": lambda r: r.choice([7, 7.0, "7", "07", "7.0", "7.5", -3, "-3", 3.5, "1e2", 100, "abc", "", " 7"]),
    "code": lambda r: r.choice(["A10", "a10", "2150-01", "2150", 2150, "E11.9", "e11.9", "zz"]),
    "flag": lambda r: r.choice([True, False, "true", "yes"]),
}


def random_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """``n`` documents' metadata: each field present with probability 0.7."""
    return [{f: pool(rng) for f, pool in POOLS.items() if rng.random() < 0.7} for _ in range(n)]


_FIRST = re.compile(r"^[<>=]")


def _value(rng: random.Random, field: str, rows: list[dict], ranged: bool) -> str:
    """A filter value: mostly one a row holds (as the text a user types for it, its case changed at times), else a
    number, a date bound or a word of the field's own kind."""
    held = [r[field] for r in rows if field in r]
    if held and rng.random() < 0.75:
        v = rng.choice(held)
        text = "true" if v is True else "false" if v is False else str(v)
        if rng.random() < 0.15:
            text = text.swapcase()
    else:
        text = rng.choice([_date(rng, bound=True), str(rng.choice([7, 7.5, 100, -3, 2150, 0])), "Radiology", "m", "Z",
                           "é", str(POOLS[field](rng))])
    text = text.strip().replace(",", " ").replace("(", "").replace(")", "")
    if not text or _FIRST.match(text) or text[0] in "\"'":
        return "x"
    if ranged and re.match(BOUND, text) and not _valid_date(text):
        return text[:4]  # capr refuses an invalid date bound outright ("2150-13"): not what is compared here
    return text


def random_filter(rng: random.Random, rows: list[dict]) -> list[str]:
    """1 to 3 clauses, ANDed, on fields the rows have."""
    fields = sorted({f for r in rows for f in r})
    clauses = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        field, op = rng.choice(fields), rng.choice(OPS)
        if op in ("in", "not in"):
            values = [_value(rng, field, rows, False) for _ in range(rng.choice([1, 2, 3]))]
            clauses.append(f"{field} {op} ({', '.join(values)})")
        else:
            clauses.append(f"{field}{op}{_value(rng, field, rows, op not in ('=', '!='))}")
    return clauses


# -- SQLite ----------------------------------------------------------------------------------------------------------
def _valid_date(bound: str) -> bool:
    """Whether each part a bound gives (month, day, hour, minute, second) exists on the calendar and the clock."""
    parts = [int(p) for p in re.findall(r"[0-9]+", bound.split(".")[0])]
    year, rest = parts[0], parts[1:]
    limits = [12, calendar.monthrange(year, rest[0])[1] if rest and 1 <= rest[0] <= 12 else 31, 23, 59, 59]
    return all((1 if i < 2 else 0) <= v <= limits[i] for i, v in enumerate(rest))


def _is_number(text: str) -> bool:
    return bool(re.match(NUMBER, text)) and abs(float(text)) != float("inf")


def _date_bound(field: str, text: str) -> str | None:
    if not FIELDS[field] or not re.match(BOUND, text) or not _valid_date(text):
        return None
    return text.replace(" ", "T").split(".")[0]


def sqlite_table(rows: list[dict]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.create_function("regexp", 2, lambda pattern, v: isinstance(v, str) and re.search(pattern, v) is not None,
                       deterministic=True)
    cols = ", ".join(f"{f}, {f}_kind" for f in FIELDS)
    db.execute(f"CREATE TABLE docs (doc INTEGER, {cols})")  # no declared types: a value keeps its own
    for i, r in enumerate(rows):
        values: list[Any] = [i]
        for f in FIELDS:
            v = r.get(f)
            if v is None:
                values += [None, None]
            elif isinstance(v, bool):
                values += ["true" if v else "false", "b"]
            else:
                values += [v, "n" if isinstance(v, (int, float)) else "s"]
        db.execute(f"INSERT INTO docs VALUES ({', '.join('?' * len(values))})", values)
    return db


def _date_of(f: str) -> str:
    """SQL for the leading date-time of a text date (up to a fraction or zone), with T before the time."""
    end = (f"CASE WHEN instr({f}, '.') > 0 THEN instr({f}, '.') - 1 WHEN instr({f}, 'Z') > 0 THEN instr({f}, 'Z') - 1 "
           f"WHEN instr(substr({f}, 11), '+') > 0 THEN 9 + instr(substr({f}, 11), '+') "
           f"WHEN instr(substr({f}, 11), '-') > 0 THEN 9 + instr(substr({f}, 11), '-') ELSE length({f}) END")
    return f"replace(substr({f}, 1, {end}), ' ', 'T')"


def _is_date(f: str) -> str:
    return f"({f}_kind = 's' AND {f} REGEXP '{DATE}')"


def _at_common_precision(f: str, op: str, bound: str, params: list) -> str:
    d = _date_of(f)
    n = f"min(length({d}), {len(bound)})"
    params += [bound]
    return f"({_is_date(f)} AND substr({d}, 1, {n}) {op} substr(?, 1, {n}))"


def _sql_equal(field: str, w: str, params: list) -> str:
    parts = [f"({field}_kind IN ('s', 'b') AND {field} = ?)"]
    params.append(w)
    if _is_number(w):
        parts.append(f"({field}_kind = 'n' AND {field} = CAST(? AS REAL))")
        params.append(w)
    if (b := _date_bound(field, w)) is not None:
        parts.append(_at_common_precision(field, "=", b, params))
    return "(" + " OR ".join(parts) + ")"


def _sql_range(field: str, op: str, w: str, params: list) -> str:
    number = f"CASE WHEN {field}_kind = 'n' THEN {field} WHEN {field}_kind = 's' AND {field} REGEXP '{NUMBER}' " \
             f"THEN CAST({field} AS REAL) END"
    parts = []
    if _is_number(w):
        parts.append(f"({number}) {op} CAST(? AS REAL)")
        params.append(w)
    if (b := _date_bound(field, w)) is not None:
        parts.append(_at_common_precision(field, op, b, params))
    if not parts:
        parts.append(f"({field}_kind = 's' AND {field} {op} ?)")
        params.append(w)
    return "(" + " OR ".join(parts) + ")"


def sql_where(clauses: list[tuple[str, str, list[str]]]) -> tuple[str, list]:
    params: list = []
    parts = []
    for field, op, values in clauses:
        if op in ("=", "in"):
            parts.append("(" + " OR ".join(_sql_equal(field, w, params) for w in values) + ")")
        elif op in ("!=", "not in"):
            parts.append(f"({field} IS NOT NULL AND NOT (" + " OR ".join(_sql_equal(field, w, params) for w in values) + "))")
        else:
            parts.append(_sql_range(field, op, values[0], params))
    return " AND ".join(parts), params


_SET = re.compile(r"^(\w+) (not in|in) \((.*)\)$")
_CMP = re.compile(r"^(\w+)(>=|<=|!=|=|>|<)(.*)$")


def split_clause(text: str) -> tuple[str, str, list[str]]:
    if m := _SET.match(text):
        return m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
    m = _CMP.match(text)
    return m.group(1), m.group(2), [m.group(3)]


class Refusal(frozenset):
    """The reasons capr must refuse a filter for (any one of them will do: clauses are checked in different orders)."""


def sql_answer(db: sqlite3.Connection, live: list[int], clauses: list[str]) -> set[int] | Refusal:
    """The live rows the WHERE keeps, or why capr must refuse the filter: "missing" (a value an =, !=, in or not in
    names that no live row has, a date on a date field aside) or "kind" (a range bound that is neither a number nor a
    date on a field whose live values are all dates, or all numbers)."""
    alive = f"doc IN ({', '.join(map(str, live))})" if live else "0"
    parsed = [split_clause(c) for c in clauses]
    reasons = set()
    for field, op, values in parsed:
        if op in (">=", "<=", ">", "<"):
            w = values[0]
            if not _is_number(w) and not re.match(BOUND, w):
                count = lambda cond: db.execute(f"SELECT count(*) FROM docs WHERE {alive} AND {cond}").fetchone()[0]  # noqa: E731
                present = count(f"{field} IS NOT NULL")
                numbers = count(f"({field}_kind = 'n' OR ({field}_kind = 's' AND {field} REGEXP '{NUMBER}'))")
                if present and ((FIELDS[field] and count(_is_date(field)) == present) or numbers == present):
                    reasons.add("kind")
        else:
            for w in values:
                if _date_bound(field, w) is not None:
                    continue
                params: list = []
                cond = _sql_equal(field, w, params)
                if not db.execute(f"SELECT count(*) FROM docs WHERE {alive} AND {cond}", params).fetchone()[0]:
                    reasons.add("missing")
    if reasons:
        return Refusal(reasons)
    where, params = sql_where(parsed)
    return {r[0] for r in db.execute(f"SELECT doc FROM docs WHERE {alive} AND {where}", params)}


# -- capr ------------------------------------------------------------------------------------------------------------
def _documents(rows: list[dict], prefix: str) -> list:
    from capr.records import Document

    return [Document(f"{prefix}{i}", "Note", f"Plan: follow-up {i}.", metadata=r) for i, r in enumerate(rows)]


def _outcome(run: Callable[[], set[int]]) -> set[int] | str:
    """The documents kept, or why capr refused the filter ("missing", "kind")."""
    from capr.errors import QueryError

    try:
        return run()
    except QueryError as e:
        message = str(e)
        if message.startswith("no passage has"):
            return "missing"
        if " holds dates " in message or " holds numbers " in message:
            return "kind"
        raise


@dataclass
class EmbeddedSide:
    """The row set on an embedded index: half in a first segment, half added as a second, a few deleted."""

    root: Path

    def load(self, rows: list[dict], deleted: list[int]) -> None:
        from capr.index import IndexWriter, build_index

        docs = _documents(rows, "d")
        half = len(docs) // 2
        build_index(docs[:half], self.root).close()
        with IndexWriter(self.root, mode="update", merge_policy=None) as w:
            for d in docs[half:]:
                w.add(d)
        if deleted:
            with IndexWriter(self.root, mode="update", merge_policy=None) as w:
                for i in deleted:
                    w.delete(f"d{i}")
        from capr.index import load_index
        from capr.store.embedded import EmbeddedStore

        self.store = EmbeddedStore.of(load_index(self.root))

    def answer(self, clauses: list[str]) -> set[int] | str:
        import numpy as np

        def run() -> set[int]:
            mask = self.store.compile_filter(clauses)
            index = self.store.index
            return {int(index.passage(int(r)).doc_id[1:]) for r in np.flatnonzero(mask)}

        return _outcome(run)


@dataclass
class MilvusSide:
    """The row set in one Milvus collection, emptied and refilled for each set."""

    uri: str
    ids: tuple[str, ...] = ()
    n: int = 0

    def __post_init__(self) -> None:
        from capr.store import create_store

        self.store = create_store("filters_sql", "milvus", uri=self.uri, lexical="none")

    def load(self, rows: list[dict], deleted: list[int]) -> None:
        if self.ids:
            self.store.delete(list(self.ids))
        self.n += 1
        prefix = f"s{self.n}-"
        docs = _documents(rows, prefix)
        self.store.add(docs)
        if deleted:
            self.store.delete([f"{prefix}{i}" for i in deleted])
        self.ids = tuple(d.doc_id for i, d in enumerate(docs) if i not in set(deleted))
        self.prefix = prefix

    def answer(self, clauses: list[str]) -> set[int] | str:
        def run() -> set[int]:
            expr = self.store.compile_filter(clauses)
            rows = self.store.client.query(self.store.name, filter=expr, output_fields=["doc_id"], limit=16384,
                                           consistency_level="Strong")
            if not rows:
                self.store.explain_empty(clauses)
            return {int(r["doc_id"][len(self.prefix):]) for r in rows}

        return _outcome(run)


def compare(sides: dict[str, Any], sets: int, filters: int, seed: int = 0,
            show: Callable[[str], None] | None = None) -> dict[str, dict[str, int]]:
    """``sets`` random row sets × ``filters`` random filters on each side; per side: cases, disagreements, and how
    many cases were errors (missing, kind) and empty answers."""
    rng = random.Random(seed)
    out = {name: {"cases": 0, "disagreements": 0, "missing": 0, "kind": 0, "empty": 0} for name in sides}
    for _ in range(sets):
        rows = random_rows(rng, rng.randint(8, 40))
        deleted = rng.sample(range(len(rows)), rng.randint(0, 3))
        live = [i for i in range(len(rows)) if i not in deleted]
        db = sqlite_table(rows)
        for side in sides.values():
            side.load(rows, deleted)
        for _ in range(filters):
            clauses = random_filter(rng, [rows[i] for i in live])
            want = sql_answer(db, live, clauses)
            for name, side in sides.items():
                got = side.answer(clauses)
                tally = out[name]
                tally["cases"] += 1
                agree = isinstance(got, str) and got in want if isinstance(want, Refusal) else got == want
                if isinstance(want, Refusal):
                    tally[got if agree else min(want)] += 1
                elif not want:
                    tally["empty"] += 1
                if not agree:
                    tally["disagreements"] += 1
                    if show is not None:
                        show(f"{name}: {clauses} -> capr {sorted(got) if isinstance(got, set) else got}, "
                             f"SQL {sorted(want)}{' (refused)' if isinstance(want, Refusal) else ''}; "
                             f"rows {[rows[i] for i in live]}")
    return out


def main(argv: list[str] | None = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=100, help="random row sets (each indexed once)")
    ap.add_argument("--filters", type=int, default=100, help="random filters per row set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--milvus", choices=["lite", "standalone"], action="append", default=[],
                    help="also a real Milvus server (from .venv-milvus), started on loopback; repeatable")
    ap.add_argument("--show", type=int, default=10, help="disagreements printed (at most)")
    args = ap.parse_args(argv)
    shown: list[str] = []

    def show(line: str) -> None:
        if len(shown) < args.show:
            shown.append(line)
            print(line, file=sys.stderr)

    from capr.store.local_servers import milvus_python, start_server

    from bench.common import REPO

    with tempfile.TemporaryDirectory(prefix="capr-filters-sql-") as tmp:
        servers = []
        try:
            sides: dict[str, Any] = {"embedded": EmbeddedSide(Path(tmp) / "idx")}
            for kind in args.milvus:
                py = milvus_python(REPO)
                if py is None:
                    raise SystemExit("no .venv-milvus with the Milvus servers: run `make milvus-venv`")
                servers.append(start_server(kind, Path(tmp) / kind, python=py, timeout=300))
                sides[f"milvus-{kind}"] = MilvusSide(servers[-1].uri)
            t0 = time.time()
            result = compare(sides, args.sets, args.filters, args.seed, show)
            secs = time.time() - t0
        finally:
            for s in servers:
                s.stop()
    print(f"capr filters vs SQLite WHERE: {args.sets} random row sets x {args.filters} random filters, seed {args.seed} "
          f"({secs:.0f} s)\n")
    print("| backend | cases | disagreements | refused: value no row has | refused: bound of the wrong kind | empty answers |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, t in result.items():
        print(f"| {name} | {t['cases']:,} | {t['disagreements']} | {t['missing']:,} | {t['kind']:,} | {t['empty']:,} |")
    return 1 if any(t["disagreements"] for t in result.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
