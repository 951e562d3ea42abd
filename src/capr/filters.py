"""Metadata filters with comparisons and sets: one parser and one evaluator for the CLI, the Python
API, the HTTP service and the Milvus backend.

Syntax (one clause per ``--filter``; clauses are ANDed)::

    subject_id=10006            equality (case-insensitive, as capr's filters always were)
    category!=Radiology         inequality
    charttime>=2150-01-01       ranges: >=, <=, >, <
    category in (Discharge summary, Radiology)     sets; "not in (...)" too; quote values holding commas

Ranges compare numbers when both sides parse as numbers, otherwise strings. A bound that is an ISO
date or a prefix of one (``2150``, ``2150-01``, ``2150-01-01``, ``2150-01-01T08``) compares against the
same-length prefix of an ISO timestamp, so ``charttime<=2150-01-01`` includes that whole day and
``charttime=2150-01`` means "in January 2150" — what a clinician means by a date bound.

A passage whose document lacks the field passes no clause on it, ``!=`` and ``not in`` included: as
SQL's NULL, ``category!=Radiology`` keeps the notes that have a category other than Radiology (Milvus'
translation below keeps the same meaning). A range bound that is neither a number nor a date on a field
that holds only dates (or numbers) is an error naming the field and the value, not an empty answer.

A plain ``{field: value}`` dict (the older API) still means equality on each field.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

import numpy as np

from capr.errors import QueryError

OPS = ("=", "!=", ">=", "<=", ">", "<", "in", "not in")
_RANGE_OPS = (">=", "<=", ">", "<")

_FIELD = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_SET_RE = re.compile(rf"^\s*(?P<field>{_FIELD})\s+(?P<op>not\s+in|in)\s*\((?P<values>.*)\)\s*$", re.I | re.S)
_CMP_RE = re.compile(rf"^\s*(?P<field>{_FIELD})\s*(?P<op>>=|<=|!=|==|=|>|<)\s*(?P<value>.*?)\s*$", re.S)
# an ISO date or a leading part of one (year, year-month, date, date+hour, +minute, +second)
_ISO_PREFIX_RE = re.compile(r"^\d{4}(-\d{2}(-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?)?)?$")
_ISO_VALUE_RE = re.compile(r"^\d{4}-\d{2}")
# a stored value that is a calendar date (a month, as FHIR allows, or a day, maybe with a time): only such a value
# is "on" the day, month or year an equality names. An identifier shaped like one (patient 2041-17, an accession
# 2041-17-03) is compared exactly.
_DATE_VALUE_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01])([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?)?"
                            r"(Z|[+-]\d{2}:?\d{2})?$")
# fields that name a patient, a stay or a record: a filter value with no match gets no "close" spellings there,
# which would list other patients' ids to a client that named one it may not know. Besides these names (and *_id,
# *Id), any field holding one of the words: a CSV's PatientID column is read as "patientid", and a patient's name,
# MRN or birth date identifies the patient as well as the id does
IDENTIFIER_FIELDS = frozenset({"id", "path", "title"})
IDENTIFIER_WORDS = ("patient", "subject", "encounter", "mrn", "birth", "ssn", "dob")


def is_identifier_field(name: str) -> bool:
    low = name.lower()
    return (low in IDENTIFIER_FIELDS or low.endswith("_id") or name.endswith(("Id", "ID"))
            or any(w in low for w in IDENTIFIER_WORDS))


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


# -- evaluation ---------------------------------------------------------------------------------
def _key(v: Any) -> str:
    return str(v).strip().lower()


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        x = float(str(v).strip())
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _comparable(value: Any, bound: Any) -> tuple[Any, Any] | None:
    """The two sides in the form a range compares them; None when they cannot be compared."""
    nb, nv = _number(bound), _number(value)
    if nb is not None and nv is not None:
        return nv, nb
    b, v = str(bound).strip(), str(value).strip()
    if _ISO_PREFIX_RE.match(b) and _ISO_VALUE_RE.match(v):
        b, v = b.replace(" ", "T"), v.replace(" ", "T")
        return v[: len(b)], b  # a date bound covers its whole day (month, year, hour)
    if _ISO_VALUE_RE.match(b) or nb is not None:
        return None  # a date or number bound says nothing about "12" or "Radiology": no match, not a string order
    return v.lower(), b.lower()


def value_matches(clause: FilterClause, value: Any) -> bool:
    """Whether one stored value passes the clause; missing values (None) never do."""
    if value is None:
        return False
    if clause.op in ("=", "!=", "in", "not in"):
        hit = any(_equal(value, w) for w in clause.values)
        return hit if clause.op in ("=", "in") else not hit
    pair = _comparable(value, clause.value)
    if pair is None:
        return False
    v, b = pair
    return {">=": v >= b, "<=": v <= b, ">": v > b, "<": v < b}[clause.op]


def _equal(value: Any, wanted: Any) -> bool:
    if _key(value) == _key(wanted):
        return True
    b, v = str(wanted).strip().replace(" ", "T"), str(value).strip().replace(" ", "T")
    # charttime=2150-01-01 means "on that day"; identifiers and numbers keep exact equality
    return bool(_ISO_PREFIX_RE.match(b) and _DATE_VALUE_RE.match(v) and len(v) > len(b) and v[: len(b)] == b)


_MAX_CHAR = "\U0010ffff"


class ValueTable:
    """A column's distinct values prepared for ranges: numbers as a float array, ISO timestamps and all
    values (lower-cased) in sorted order. A range is then a vectorised comparison plus two bisections,
    not a Python test per distinct value (a charttime column has one value per note). Built once per
    column and kept by the caller; the answers equal :func:`value_matches` (tested)."""

    def __init__(self, values: Sequence[Any]) -> None:
        n = len(values)
        strs = ["" if v is None else str(v).strip() for v in values]
        self.present = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        self.nums = np.array([x if (x := _number(v)) is not None else np.nan for v in values], dtype=np.float64) \
            if n else np.zeros(0)
        iso = [(s.replace(" ", "T"), i) for i, (s, v) in enumerate(zip(strs, values)) if v is not None and _ISO_VALUE_RE.match(s)]
        iso.sort()
        self.iso_keys = [k for k, _ in iso]
        self.iso_rows = np.array([i for _, i in iso], dtype=np.int64)
        dates = [(k, i) for k, i in iso if _DATE_VALUE_RE.match(k)]
        self.date_keys = [k for k, _ in dates]
        self.date_rows = np.array([i for _, i in dates], dtype=np.int64)
        low = sorted((s.lower(), i) for i, (s, v) in enumerate(zip(strs, values)) if v is not None)
        self.str_keys = [k for k, _ in low]
        self.str_rows = np.array([i for _, i in low], dtype=np.int64)

    def _take(self, rows: np.ndarray, good: np.ndarray) -> None:
        if len(rows):
            good[rows] = True

    def prefix_eq(self, bound: str, good: np.ndarray) -> None:
        """Dates starting with ``bound`` (charttime=2150-01-01: that day)."""
        b = bound.strip().replace(" ", "T")
        self._take(self.date_rows[bisect_left(self.date_keys, b):bisect_left(self.date_keys, b + _MAX_CHAR)], good)

    def range(self, op: str, bound: Any) -> np.ndarray:
        good = np.zeros(len(self.present), dtype=bool)
        b = str(bound).strip()
        nb = _number(b)
        if nb is not None:
            with np.errstate(invalid="ignore"):
                good |= {">=": self.nums >= nb, "<=": self.nums <= nb, ">": self.nums > nb, "<": self.nums < nb}[op]
        if _ISO_PREFIX_RE.match(b):
            # v[:len(b)] >= b ⟺ v >= b, and v[:len(b)] <= b ⟺ v < b + (a character above all others)
            b = b.replace(" ", "T")
            keys, rows = self.iso_keys, self.iso_rows
            cut = {">=": (bisect_left(keys, b), None), "<": (0, bisect_left(keys, b)),
                   "<=": (0, bisect_left(keys, b + _MAX_CHAR)), ">": (bisect_left(keys, b + _MAX_CHAR), None)}[op]
            self._take(rows[cut[0]:cut[1]], good)
        elif not (_ISO_VALUE_RE.match(b) or nb is not None):
            lb, keys, rows = b.lower(), self.str_keys, self.str_rows
            cut = {">=": (bisect_left(keys, lb), None), "<": (0, bisect_left(keys, lb)),
                   "<=": (0, bisect_right(keys, lb)), ">": (bisect_right(keys, lb), None)}[op]
            self._take(rows[cut[0]:cut[1]], good)
        return good


def column_mask(clause: FilterClause, values: Sequence[Any], codes: np.ndarray,
                normalize: Callable[[Any], Any] | None = None, lookup: Mapping[str, int] | None = None,
                table: Callable[[], ValueTable] | None = None, check: bool = True) -> np.ndarray:
    """Rows of a categorical column (distinct ``values`` + per-row ``codes``) that pass ``clause``.
    The clause is decided per distinct value, then the codes index that table: with ``lookup``
    (lower-cased value → code) equality and sets are a dict hit (a one-patient filter on an index of
    100k patients is one vectorised comparison over the codes); with ``table`` (a function returning the
    column's cached :class:`ValueTable`) ranges and date-prefix equality are bisections; without either,
    each distinct value is tested in Python. ``check=False``: the caller checked a range bound against the whole
    column already (:func:`check_range_bound_in_parts`), of which ``values`` are a part (one segment's)."""
    if normalize is not None:
        clause = FilterClause(clause.field, clause.op,
                              tuple(normalize(v) for v in clause.value) if clause.op in ("in", "not in") else normalize(clause.value))
    if clause.op in _RANGE_OPS and check:
        check_range_bound(clause, table() if table is not None else ValueTable(values))
    iso_eq = [w for w in clause.values if _ISO_PREFIX_RE.match(str(w).strip())] if clause.op in ("=", "!=", "in", "not in") else []
    if lookup is not None and clause.op in ("=", "!=", "in", "not in") and (not iso_eq or table is not None):
        good = np.zeros(len(values), dtype=bool)
        good[[c for w in clause.values if (c := lookup.get(_key(w))) is not None]] = True
        if iso_eq:
            t = table()
            for w in iso_eq:
                t.prefix_eq(str(w), good)
        if clause.op in ("!=", "not in"):
            present = table().present if table is not None else np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
            good = ~good & present
    elif table is not None and clause.op in _RANGE_OPS:
        good = table().range(clause.op, clause.value)
    else:
        good = np.fromiter((value_matches(clause, v) for v in values), dtype=bool, count=len(values))
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
    dates[table.iso_rows] = True
    if int((dates & present).sum()) == n:
        return "dates"
    if int((np.isfinite(table.nums) & present).sum()) == n:
        return "numbers"
    return None


def check_range_bound(clause: FilterClause, table: ValueTable, held: np.ndarray | None = None) -> None:
    """A range bound that is neither a number nor a date, on a column that holds only dates (or only
    numbers), compares with nothing there: a QueryError naming the field and the value, not an empty answer.
    A column of words (category>=R) is compared as strings. ``held``: the distinct values a live row has (one
    flag per value; None: all): a deleted document's values neither decide nor are shown."""
    bound = str(clause.value).strip()
    if _number(bound) is not None or _ISO_PREFIX_RE.match(bound):
        return
    kind = _only_kind(table, held)
    if kind == "dates":
        example = next(k for k, r in zip(table.iso_keys, table.iso_rows) if held is None or held[r])
        raise QueryError(f"bad filter {str(clause)!r}: {clause.field} holds dates (e.g. {example}) and "
                         f"{bound!r} is not one; give a date or its start: 2150, 2150-01, 2150-01-31, 2150-01-31T08:30")
    if kind == "numbers":
        raise QueryError(f"bad filter {str(clause)!r}: {clause.field} holds numbers and {bound!r} is not one")


def check_range_bound_in_parts(clause: FilterClause,
                               parts: Iterable[ValueTable | tuple[ValueTable, np.ndarray | None]]) -> None:
    """:func:`check_range_bound` over a column kept in parts (an index's segments, each with its cached table and,
    optionally, the flags of the values its live rows have): the bound is refused only when the whole column's
    live values are only dates (or only numbers), as one table of every value would; a part of words (or of the
    other kind) makes it a string comparison everywhere, as in a rebuild."""
    pairs = [p if isinstance(p, tuple) else (p, None) for p in parts]
    held = [(t, h) for t, h in pairs if (t.present if h is None else t.present & h).any()]
    kinds = {_only_kind(t, h) for t, h in held}
    if len(kinds) == 1 and None not in kinds:
        check_range_bound(clause, *held[0])


def is_range(clause: FilterClause) -> bool:
    return clause.op in _RANGE_OPS


# -- Milvus -------------------------------------------------------------------------------------
def _quote(value: Any) -> str:
    s = str(value)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _literal(value: Any) -> str:
    """Equality literals keep the value's type (as the Milvus backend always did); strings are strings."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    return _quote(value)


def _range_literal(value: Any) -> str:
    # a numeric bound compares with numbers (counts such as note_seq are stored as numbers);
    # anything else, dates included, as a string
    s = str(value).strip()
    if _number(s) is None or _ISO_PREFIX_RE.match(s):
        return _quote(s)
    return str(int(s)) if s.lstrip("-").isdigit() else repr(float(s))


def _is_date_bound(value: Any) -> bool:
    return isinstance(value, str) and bool(_ISO_PREFIX_RE.match(value.strip()))


def milvus_expr(clauses: Iterable[FilterClause], builtin: Iterable[str] = ("aspect", "doc_id", "title", "heading")) -> str:
    """A Milvus boolean expression with the embedded index's meaning: built-in fields by name, any other
    in the ``metadata`` JSON field. Written without ``not (...)``, which Milvus Lite 2.5 cannot run on
    JSON paths: a date bound's whole day is ``[day, day + "~")`` ("~" sorts after every character of an
    ISO timestamp), and ``!=`` on metadata is ``< or >``, so a note without the key never passes (as in
    the embedded index; Milvus' own ``!=`` would let it through)."""
    builtin = set(builtin)
    parts = []
    for c in clauses:
        meta = c.field not in builtin
        ref = f"metadata[{_quote(c.field)}]" if meta else c.field
        # built-in fields are VARCHAR columns: their literals are always strings
        lit = _literal if meta else _quote

        # a date bound covers the values that start with it and go on with a separator, not with a digit
        # (2041 is not 20415); whether "-17" after it is a month, a string comparison cannot tell
        def eq(v: Any) -> str:
            if _is_date_bound(v):
                b = str(v).strip().replace(" ", "T")
                return (f"({ref} == {_quote(b)} or ({ref} >= {_quote(b + ' ')} and {ref} < {_quote(b + '0')}) "
                        f"or ({ref} >= {_quote(b + ':')} and {ref} < {_quote(b + '~')}))")
            return f"{ref} == {lit(v)}"

        def ne(v: Any) -> str:
            if _is_date_bound(v):
                b = str(v).strip().replace(" ", "T")
                return (f"({ref} < {_quote(b)} or ({ref} > {_quote(b)} and {ref} < {_quote(b + ' ')}) "
                        f"or ({ref} >= {_quote(b + '0')} and {ref} < {_quote(b + ':')}) or {ref} >= {_quote(b + '~')})")
            return f"({ref} < {lit(v)} or {ref} > {lit(v)})" if meta else f"{ref} != {lit(v)}"

        if c.op == "=":
            parts.append(eq(c.value))
        elif c.op == "!=":
            parts.append(ne(c.value))
        elif c.op == "in":
            if any(_is_date_bound(v) for v in c.value):
                parts.append("(" + " or ".join(eq(v) for v in c.value) + ")")
            else:
                parts.append(f"{ref} in [{', '.join(lit(v) for v in c.value)}]")
        elif c.op == "not in":
            if meta or any(_is_date_bound(v) for v in c.value):
                parts.append(" and ".join(ne(v) for v in c.value))
            else:
                parts.append(f"{ref} not in [{', '.join(lit(v) for v in c.value)}]")
        else:
            value = str(c.value).strip()
            if _is_date_bound(value):
                b = value.replace(" ", "T")
                op, bound = {">=": (">=", b), "<": ("<", b), "<=": ("<", b + "~"), ">": (">=", b + "~")}[c.op]
                parts.append(f"{ref} {op} {_quote(bound)}")
            else:
                parts.append(f"{ref} {c.op} {_range_literal(value)}")
    return " and ".join(parts)


__all__ = ["FilterClause", "Filters", "IDENTIFIER_FIELDS", "ValueTable", "as_clauses", "check_range_bound", "column_mask",
           "check_range_bound_in_parts", "is_identifier_field", "known_field", "is_range", "milvus_expr", "parse_filter",
           "parse_filters", "value_matches"]
