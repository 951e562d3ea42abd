"""Metadata filters with comparisons and sets: one parser and one evaluator for the CLI, the Python
API, the HTTP service and the Milvus backend.

Syntax (one clause per ``--filter``; clauses are ANDed)::

    subject_id=10006            equality
    category!=Radiology         inequality
    charttime>=2150-01-01       ranges: >=, <=, >, <
    category in (Discharge summary, Radiology)     sets; "not in (...)" too; quote values holding commas

How a stored value compares (the same rule on every backend; ``bench/filters_sql.py`` checks it against SQLite):

- Text is compared exactly, case included, on every field: ``patient=abC1`` is not ``ABc1`` and
  ``category=radiology`` is not ``Radiology`` (a value no passage has is an error, with close spellings on
  fields that are not identifiers). A text bound orders text by code point, as SQL's BINARY collation does.
  Only a field's name is found in any case, and ``aspect`` is read as ``-a`` reads an aspect.
- A number stored as a number (JSON ``7``) equals that number however it is written (``7``, ``7.0``); a number
  stored as text (a CSV's ``"07"``) is text to ``=`` and a number to a numeric range bound (``age>=65``).
- Dates (``YYYY-MM``, ``YYYY-MM-DD``, then ``T`` or a space and a time; a time zone or fraction of a second is
  not read) compare at the precision both sides have: a bound covers its whole year, month, day (hour, ...) —
  ``charttime<=2150-01-01`` includes that day, ``charttime=2150-01`` means "in January 2150" — and a bound with a
  time against a note dated only by its day compares as days (``date=2150-01-05T00:00`` matches ``2150-01-05``).
  Identifier fields (:func:`is_identifier_field`) are never read as dates: ``patient=2041`` is not ``2041-17``.
- A passage whose document lacks the field passes no clause on it, ``!=`` and ``not in`` included: SQL's NULL.
- A range bound that is a number compares with numbers only; a date bound with dates only; any other bound with
  text only. A bound that is neither a number nor a date on a field that holds only dates (or numbers) is an error
  naming the field and the value, not an empty answer.

A plain ``{field: value}`` dict (the older API) still means equality on each field.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, Union

import numpy as np

from capr.errors import QueryError

OPS = ("=", "!=", ">=", "<=", ">", "<", "in", "not in")
_RANGE_OPS = (">=", "<=", ">", "<")

_FIELD = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_SET_RE = re.compile(rf"^\s*(?P<field>{_FIELD})\s+(?P<op>not\s+in|in)\s*\((?P<values>.*)\)\s*$", re.I | re.S)
_CMP_RE = re.compile(rf"^\s*(?P<field>{_FIELD})\s*(?P<op>>=|<=|!=|==|=|>|<)\s*(?P<value>.*?)\s*$", re.S)
# an ISO date or a leading part of one (year, year-month, date, date+hour, +minute, +second)
_ISO_PREFIX_RE = re.compile(r"^\d{4}(-\d{2}(-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?)?)?$")
# a stored value that is a calendar date (a month, as FHIR allows, or a day, maybe with a time): only such a value
# is "on" the day, month or year an equality names. An identifier shaped like one (patient 2041-17, an accession
# 2041-17-03) is compared exactly.
_DATE_VALUE_RE = re.compile(r"^(\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01])([T ]\d{2}(:\d{2}(:\d{2})?)?)?)?)(\.\d+)?"
                            r"(Z|[+-]\d{2}:?\d{2})?$")
# a number written as text: what SQL's CAST reads as one (no "1_000", "inf" or "nan", no blanks around it)
_NUMBER_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
# the precisions a stored date can have: year-month, day, hour, minute, second
_DATE_LENGTHS = (7, 10, 13, 16, 19)
# fields that name a patient, a stay or a record: a filter value with no match gets no "close" spellings there,
# which would list other patients' ids to a client that named one it may not know. Besides these names (and *_id,
# *Id), any field holding one of the words: a CSV's PatientID column is read as "patientid", and a patient's name,
# MRN or birth date identifies the patient as well as the id does
IDENTIFIER_FIELDS = frozenset({"id", "path", "title"})
IDENTIFIER_WORDS = ("patient", "subject", "encounter", "mrn", "birth", "ssn", "dob")
# capr's own fields of every passage: text, never read as dates or numbers
TEXT_FIELDS = frozenset({"aspect", "doc_id", "title", "heading", "pid"})
# an identifier field whose name says it holds a date (birth_date, encounter_time) is still read as dates
_DATE_WORDS = ("date", "time", "dob", "birth")


def is_identifier_field(name: str) -> bool:
    low = name.lower()
    return (low in IDENTIFIER_FIELDS or low.endswith("_id") or name.endswith(("Id", "ID"))
            or any(w in low for w in IDENTIFIER_WORDS))


def reads_dates(name: str) -> bool:
    """Whether a field's values are read as dates (a bound's whole day, month or year): not capr's own text fields,
    and not an identifier unless its name says it holds a date — ``patient=2041`` is not patient ``2041-11``."""
    if name in TEXT_FIELDS:
        return False
    return not is_identifier_field(name) or any(w in name.lower() for w in _DATE_WORDS)


def known_field(clause: "FilterClause", fields: Iterable[str]) -> "FilterClause":
    """``clause`` on a field the index has: its own name, else the one field that differs from it only in case
    (a CSV's ``PatientID`` column is stored as ``patientid``, and users type the name they see in their file).
    QueryError when there is none, or several."""
    known = set(fields)
    if clause.field in known:
        return clause
    same = [f for f in known if f.lower() == clause.field.lower()]
    if len(same) == 1:
        return replace(clause, field=same[0])
    raise QueryError(f"unknown filter field {clause.field!r}; filterable fields: {', '.join(sorted(known))}")


@dataclass(frozen=True, slots=True)
class FilterClause:
    """``field op value``; for ``in``/``not in`` the value is a tuple of values."""

    field: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise QueryError(f"bad filter operator {self.op!r}; use one of {', '.join(OPS)}")

    @property
    def values(self) -> tuple[Any, ...]:
        return tuple(self.value) if self.op in ("in", "not in") else (self.value,)

    def __str__(self) -> str:
        if self.op in ("in", "not in"):
            return f"{self.field} {self.op} ({', '.join(_show(v) for v in self.value)})"
        return f"{self.field}{self.op}{self.value}"


def _show(v: Any) -> str:
    s = str(v)
    return f'"{s}"' if "," in s or s != s.strip() else s


def _split_set(raw: str, source: str) -> tuple[str, ...]:
    """Comma-separated values; double or single quotes keep commas and spaces inside a value."""
    out: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    quoted = False
    for ch in raw:
        if quote:
            if ch == quote:
                quote = None
            else:
                buf.append(ch)
        elif ch in "\"'" and not "".join(buf).strip():
            quote, quoted, buf = ch, True, []
        elif ch == ",":
            out.append("".join(buf) if quoted else "".join(buf).strip())
            buf, quoted = [], False
        else:
            if not (quoted and ch.isspace()):
                buf.append(ch)
    if quote:
        raise QueryError(f"bad filter {source!r}: unclosed quote")
    out.append("".join(buf) if quoted else "".join(buf).strip())
    if any(v == "" for v in out):
        raise QueryError(f"bad filter {source!r}: empty value in the set")
    return tuple(out)


def parse_filter(text: str) -> FilterClause:
    """One clause from its text; a malformed one raises a one-line :class:`QueryError`."""
    m = _SET_RE.match(text)
    if m:
        op = "not in" if m.group("op").lower().startswith("not") else "in"
        return FilterClause(m.group("field"), op, _split_set(m.group("values"), text))
    m = _CMP_RE.match(text)
    if not m:
        raise QueryError(
            f"bad filter {text!r}: use FIELD=VALUE, FIELD!=VALUE, FIELD>=VALUE (also <=, >, <) or "
            "FIELD in (A, B), e.g. aspect=symptoms or charttime>=2150-01-01"
        )
    value = m.group("value")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if not value.strip():
        raise QueryError(f"bad filter {text!r}: field and value must be non-empty")
    op = "=" if m.group("op") == "==" else m.group("op")
    if value.lstrip()[:1] in ("<", ">", "=") and not (op == "=" and value.lstrip()[:1] == "="):
        # "date>>2150" or "n=>3": a mistyped operator, not a value starting with ">"
        raise QueryError(f"bad filter {text!r}: the value starts with {value.lstrip()[0]!r}; "
                         "operators are =, !=, >=, <=, >, < and in (...)")
    if op in _RANGE_OPS and _ISO_PREFIX_RE.match(value.strip()) and not _valid_date(value.strip()):
        raise QueryError(f"bad filter {text!r}: {m.group('field')} bound {value.strip()!r} is not a valid date")
    return FilterClause(m.group("field"), op, value)


def _valid_date(bound: str) -> bool:
    """Whether an ISO date (or a leading part of one) names a real time: 2150-02-30 and 2150-13 do not."""
    full = bound.replace(" ", "T")
    # the parts the bound leaves out are filled with the first month, day, hour, ... to be parsed
    full += "0001-01-01T00:00:00"[len(full):] if len(full) < 19 else ""
    try:
        datetime.fromisoformat(full)
    except ValueError:
        return False
    return True


def parse_filters(texts: Iterable[str]) -> list[FilterClause]:
    return [parse_filter(t) for t in texts]


Filters = Union[Mapping[str, Any], Sequence[Union[FilterClause, str]], None]


def as_clauses(filters: Filters) -> list[FilterClause]:
    """Any accepted filter form as clauses: a {field: value} dict (equality), clause strings, clauses."""
    if not filters:
        return []
    if isinstance(filters, Mapping):
        return [FilterClause(str(k), "=", v) for k, v in filters.items()]
    if isinstance(filters, (str, FilterClause)):
        filters = [filters]
    out = []
    for f in filters:
        if isinstance(f, FilterClause):
            out.append(f)
        elif isinstance(f, str):
            out.append(parse_filter(f))
        else:
            raise QueryError(f"bad filter {f!r}: expected FIELD=VALUE text or a FilterClause")
    return out


# -- values -------------------------------------------------------------------------------------
def as_number(v: Any) -> float | None:
    """A stored value or bound as a number: a JSON number, or text written as one (see _NUMBER_RE); finite only."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        x = float(v)
    elif isinstance(v, str) and _NUMBER_RE.match(v):
        x = float(v)
    else:
        return None
    return x if math.isfinite(x) else None


def text_form(v: Any) -> str:
    """How a filter value is spelled as text: a JSON number or boolean as JSON writes it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def date_value(v: Any) -> str | None:
    """A stored calendar date in the form dates compare in (``T`` before the time; no fraction or zone), else None."""
    if not isinstance(v, str):
        return None
    m = _DATE_VALUE_RE.match(v)
    return m.group(1).replace(" ", "T") if m else None


def date_bound(v: Any) -> str | None:
    """A filter value that names a date or a leading part of one (2150, 2150-01, ..., to the second), in the form
    dates compare in; None for anything else (2150-13 names no month)."""
    if not isinstance(v, str) or not _ISO_PREFIX_RE.match(v) or not _valid_date(v):
        return None
    return v.replace(" ", "T").split(".")[0]


def date_prefixes(bound: str) -> list[str]:
    """The bound cut to each precision a shorter stored date can have: such a date is on the bound when it equals one."""
    return [bound[:n] for n in _DATE_LENGTHS if n < len(bound)]


def _date_cmp(value: str, bound: str) -> int:
    """-1, 0 or 1: ``value`` before, on, or after ``bound`` at the precision both have."""
    n = min(len(value), len(bound))
    a, b = value[:n], bound[:n]
    return (a > b) - (a < b)


def value_key(v: Any) -> str:
    """What a filter tells stored values apart by: text exactly (case and blanks kept), a JSON number by its value
    (7 and 7.0 are one), a boolean by itself. Columns keep one code per key."""
    if isinstance(v, str):
        return "s:" + v
    if isinstance(v, bool):
        return "b:" + text_form(v)
    if (x := as_number(v)) is not None:
        return "n:" + repr(x)
    return "o:" + repr(v)


def equality_keys(w: Any) -> list[str]:
    """The keys (:func:`value_key`) of the stored values that equal filter value ``w``, dates aside: the text ``w``
    spells, the number it writes (a JSON number), the boolean it names."""
    t = text_form(w)
    keys = ["s:" + t]
    if (x := as_number(w)) is not None:
        keys.append("n:" + repr(x))
    if t in ("true", "false"):
        keys.append("b:" + t)
    return keys


# -- evaluation ---------------------------------------------------------------------------------
def _equal(field: str, value: Any, wanted: Any) -> bool:
    if value_key(value) in equality_keys(wanted):
        return True
    b, v = (date_bound(wanted), date_value(value)) if reads_dates(field) else (None, None)
    return bool(b and v) and _date_cmp(v, b) == 0


def bound_kinds(field: str, bound: Any) -> tuple[float | None, str | None]:
    """A range bound as a number and as a date (each None when it is not one): capr's own fields (TEXT_FIELDS)
    read neither, and only fields that hold dates (reads_dates) read dates."""
    if field in TEXT_FIELDS:
        return None, None
    return as_number(bound), date_bound(bound) if reads_dates(field) else None


def _order(field: str, value: Any, bound: Any) -> int | None:
    """How ``value`` compares with a range bound (-1, 0, 1); None when the bound says nothing about it: a number
    bound compares with numbers, a date bound with dates, any other bound with text."""
    nb, db = bound_kinds(field, bound)
    if nb is not None and (nv := as_number(value)) is not None:
        return (nv > nb) - (nv < nb)
    if db is not None and (dv := date_value(value)) is not None:
        return _date_cmp(dv, db)
    if nb is None and db is None and isinstance(value, str) and isinstance(bound, str):
        return (value > bound) - (value < bound)
    return None


def value_matches(clause: FilterClause, value: Any) -> bool:
    """Whether one stored value passes the clause; missing values (None) never do."""
    if value is None:
        return False
    if clause.op in ("=", "!=", "in", "not in"):
        hit = any(_equal(clause.field, value, w) for w in clause.values)
        return hit if clause.op in ("=", "in") else not hit
    order = _order(clause.field, value, clause.value)
    if order is None:
        return False
    return {">=": order >= 0, "<=": order <= 0, ">": order > 0, "<": order < 0}[clause.op]


_MAX_CHAR = "\U0010ffff"


def _sorted_rows(pairs: list[tuple[str, int]]) -> tuple[list[str], np.ndarray]:
    pairs.sort()
    return [k for k, _ in pairs], np.array([i for _, i in pairs], dtype=np.int64)


class ValueTable:
    """A column's distinct values prepared for ranges: numbers as a float array, dates (in the form they compare in)
    and text in sorted order. A range is then a vectorised comparison plus a few bisections, not a Python test per
    distinct value (a charttime column has one value per note). Built once per column and kept by the caller; the
    answers equal :func:`value_matches` (tested)."""

    def __init__(self, values: Sequence[Any]) -> None:
        n = len(values)
        self.present = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        self.nums = np.array([x if (x := as_number(v)) is not None else np.nan for v in values], dtype=np.float64) \
            if n else np.zeros(0)
        self.date_keys, self.date_rows = _sorted_rows([(d, i) for i, v in enumerate(values) if (d := date_value(v))])
        self.text_keys, self.text_rows = _sorted_rows([(v, i) for i, v in enumerate(values) if isinstance(v, str)])

    def _take(self, rows: np.ndarray, good: np.ndarray, keep: bool = True) -> None:
        if len(rows):
            good[rows] = keep

    def _on_prefixes(self, bound: str, good: np.ndarray, keep: bool = True) -> None:
        """Marks the dates shorter than ``bound`` that it starts with (on the bound at their own precision)."""
        keys = self.date_keys
        for p in date_prefixes(bound):
            self._take(self.date_rows[bisect_left(keys, p):bisect_right(keys, p)], good, keep)

    def date_eq(self, bound: str, good: np.ndarray) -> None:
        """Dates on ``bound`` (a :func:`date_bound`) at the precision both have."""
        keys = self.date_keys
        self._take(self.date_rows[bisect_left(keys, bound):bisect_left(keys, bound + _MAX_CHAR)], good)
        self._on_prefixes(bound, good)

    def _date_range(self, op: str, b: str, good: np.ndarray) -> None:
        # at the precision both have: v >= b ⟺ v >= b or v is a leading part of b; v <= b ⟺ v < b + (a character
        # above all others); v > b ⟺ v >= b + that character; v < b ⟺ v < b and v is no leading part of b
        keys, rows = self.date_keys, self.date_rows
        cut = {">=": (bisect_left(keys, b), None), "<": (0, bisect_left(keys, b)),
               "<=": (0, bisect_left(keys, b + _MAX_CHAR)), ">": (bisect_left(keys, b + _MAX_CHAR), None)}[op]
        part = np.zeros(len(good), dtype=bool)
        self._take(rows[cut[0]:cut[1]], part)
        if op in (">=", "<"):
            self._on_prefixes(b, part, keep=op == ">=")
        good |= part

    def range(self, op: str, bound: Any, field: str = "") -> np.ndarray:
        good = np.zeros(len(self.present), dtype=bool)
        nb, db = bound_kinds(field, bound)
        if nb is not None:
            with np.errstate(invalid="ignore"):
                good |= {">=": self.nums >= nb, "<=": self.nums <= nb, ">": self.nums > nb, "<": self.nums < nb}[op]
        if db is not None:
            self._date_range(op, db, good)
        if nb is None and db is None and isinstance(bound, str):
            keys, rows = self.text_keys, self.text_rows
            cut = {">=": (bisect_left(keys, bound), None), "<": (0, bisect_left(keys, bound)),
                   "<=": (0, bisect_right(keys, bound)), ">": (bisect_right(keys, bound), None)}[op]
            self._take(rows[cut[0]:cut[1]], good)
        return good


class CodeLookup(Protocol):
    """Filter key → code of a column's distinct values (the dict :func:`column_lookup` builds, or a lazier one)."""

    def get(self, key: str, default: int | None = None) -> int | None: ...


def column_lookup(values: Sequence[Any]) -> dict[str, int]:
    """:func:`value_key` → position of each present value of a column's distinct values."""
    # text is keyed inline: a column of patient ids has as many values as patients, and this runs on a cold search
    return {("s:" + v) if type(v) is str else value_key(v): i for i, v in enumerate(values) if v is not None}


def column_mask(clause: FilterClause, values: Sequence[Any], codes: np.ndarray,
                normalize: Callable[[Any], Any] | None = None, lookup: CodeLookup | None = None,
                table: Callable[[], ValueTable] | None = None, check: bool = True) -> np.ndarray:
    """Rows of a categorical column (distinct ``values`` + per-row ``codes``) that pass ``clause``.
    The clause is decided per distinct value, then the codes index that table: equality and sets are dict hits in
    ``lookup`` (:func:`column_lookup`; a one-patient filter on an index of 100k patients is one vectorised
    comparison over the codes), and ranges and dates are bisections in ``table`` (a function returning the column's
    cached :class:`ValueTable`); each is built here when not given. ``check=False``: the caller checked a range bound
    against the whole column already (:func:`check_range_bound_in_parts`), of which ``values`` are a part."""
    if normalize is not None:
        clause = FilterClause(clause.field, clause.op,
                              tuple(normalize(v) for v in clause.value) if clause.op in ("in", "not in") else normalize(clause.value))
    cached: list[ValueTable] = []

    def get_table() -> ValueTable:
        if not cached:
            cached.append(table() if table is not None else ValueTable(values))
        return cached[0]

    if clause.op in _RANGE_OPS:
        if check:
            check_range_bound(clause, get_table())
        good = get_table().range(clause.op, clause.value, clause.field)
    else:
        lookup = lookup if lookup is not None else column_lookup(values)
        good = np.zeros(len(values), dtype=bool)
        good[[c for w in clause.values for k in equality_keys(w) if (c := lookup.get(k)) is not None]] = True
        if reads_dates(clause.field):
            for b in filter(None, map(date_bound, clause.values)):
                get_table().date_eq(b, good)
        if clause.op in ("!=", "not in"):
            good = ~good & np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    if not good.any():
        return np.zeros(len(codes), dtype=bool)
    return good[np.asarray(codes)]


def _only_kind(table: ValueTable, held: np.ndarray | None = None) -> str | None:
    """"dates" or "numbers" when every value the table holds (of those marked in ``held``, one flag per distinct
    value: those a live row has) is one; None when it holds words (or nothing)."""
    present = table.present if held is None else table.present & held
    n = int(present.sum())
    if not n:
        return None
    dates = np.zeros(len(present), dtype=bool)
    dates[table.date_rows] = True
    if int((dates & present).sum()) == n:
        return "dates"
    if int((np.isfinite(table.nums) & present).sum()) == n:
        return "numbers"
    return None


def check_range_bound(clause: FilterClause, table: ValueTable, held: np.ndarray | None = None) -> None:
    """A range bound that is neither a number nor a date, on a column that holds only dates (or only
    numbers), compares with nothing there: a QueryError naming the field and the value, not an empty answer.
    A column of words (category>=R) is compared as text. ``held``: the distinct values a live row has (one
    flag per value; None: all): a deleted document's values neither decide nor are shown."""
    if not text_bound(clause):
        return
    kind = _only_kind(table, held)
    example = next((k for k, r in zip(table.date_keys, table.date_rows) if held is None or held[r]), "")
    if (error := bound_kind_error(clause, kind, example)) is not None:
        raise error


def text_bound(clause: FilterClause) -> bool:
    """Whether a range clause's bound is text (neither a number nor a date) on a field that may hold only dates or
    only numbers: :func:`bound_kind_error` then says whether the field's values make it a mistake."""
    bound = str(clause.value).strip()
    return (clause.op in _RANGE_OPS and clause.field not in TEXT_FIELDS and as_number(bound) is None
            and not _ISO_PREFIX_RE.match(bound))


def bound_kind_error(clause: FilterClause, kind: str | None, example: str = "") -> QueryError | None:
    """The error for a text bound (:func:`text_bound`) on a field whose live values are all ``kind`` ("dates",
    "numbers"; None: words too), ``example`` one of its dates; None when the bound compares as text."""
    bound = str(clause.value).strip()
    if kind == "dates" and reads_dates(clause.field):
        return QueryError(f"bad filter {str(clause)!r}: {clause.field} holds dates (e.g. {example}) and {bound!r} is "
                          "not one; give a date or its start: 2150, 2150-01, 2150-01-31, 2150-01-31T08:30")
    if kind == "numbers":
        return QueryError(f"bad filter {str(clause)!r}: {clause.field} holds numbers and {bound!r} is not one")
    return None


def check_range_bound_in_parts(clause: FilterClause,
                               parts: Iterable[ValueTable | tuple[ValueTable, np.ndarray | None]]) -> None:
    """:func:`check_range_bound` over a column kept in parts (an index's segments, each with its cached table and,
    optionally, the flags of the values its live rows have): the bound is refused only when the whole column's
    live values are only dates (or only numbers), as one table of every value would; a part of words (or of the
    other kind) makes it a text comparison everywhere, as in a rebuild."""
    pairs = [p if isinstance(p, tuple) else (p, None) for p in parts]
    held = [(t, h) for t, h in pairs if (t.present if h is None else t.present & h).any()]
    kinds = {_only_kind(t, h) for t, h in held}
    if len(kinds) == 1 and None not in kinds:
        check_range_bound(clause, *held[0])


def is_range(clause: FilterClause) -> bool:
    return clause.op in _RANGE_OPS


def named_values(clause: FilterClause) -> list[Any]:
    """The values of an ``=``, ``!=``, ``in`` or ``not in`` clause that must be held by some passage: a value that
    names something (a patient, a category) and matches nothing is almost always a typo, and a typo'd patient id
    must be noticed — in ``!=`` and ``not in`` too, where it would silently exclude nobody. A date on a field read
    as dates names a day (a month, a year), an interval like a range's, and a day without notes is an answer."""
    if clause.op in _RANGE_OPS:
        return []
    return [w for w in clause.values if not (reads_dates(clause.field) and date_bound(w))]


__all__ = ["FilterClause", "Filters", "IDENTIFIER_FIELDS", "TEXT_FIELDS", "ValueTable", "as_clauses", "as_number", "bound_kinds",
           "check_range_bound", "check_range_bound_in_parts", "column_lookup", "column_mask", "date_bound", "date_prefixes",
           "date_value", "equality_keys", "is_identifier_field", "is_range", "known_field", "named_values", "parse_filter", "parse_filters",
           "reads_dates", "bound_kind_error", "text_bound", "text_form", "value_key", "value_matches"]
