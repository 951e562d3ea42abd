"""capr's filter language (capr.filters) as Milvus boolean expressions, with the embedded index's meaning.

Milvus compares a JSON value only with a literal of its own type, has no CAST, and cannot run ``not (...)`` on JSON
paths (Milvus Lite 2.5). So each document's metadata row carries, next to every present value of a field ``F``,
what a filter needs and Milvus cannot compute (:func:`filter_keys`; :func:`without_filter_keys` takes them off
again when a row is read back):

- ``capr#k#F``: the value's kind — its date in the form dates compare in (``2150-01-05T08:00``) when the field is
  read as dates (capr.filters.reads_dates) and the value is one, else ``#s`` (text), ``#n`` (a JSON number),
  ``#btrue``/``#bfalse`` (a boolean). Every marker sorts before every date, and a missing value has no key: a
  clause that asks for the key fails there, as SQL's NULL does.
- ``capr#n#F``: the value as a number, for a JSON number or text written as one (numeric ranges).

``!=`` is written as ``< or >`` (Milvus' own ``!=`` lets a row without the key through), and a date bound's
whole day as ``[day, day + "~")`` ("~" sorts after every character of a date).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from capr.filters import FilterClause, as_number, bound_kinds, date_bound, date_prefixes, date_value, reads_dates, text_form

KEY_PREFIX = "capr#"
_AFTER = "~"  # sorts after every character of a date


def _kind_key(field: str) -> str:
    return f"{KEY_PREFIX}k#{field}"


def _number_key(field: str) -> str:
    return f"{KEY_PREFIX}n#{field}"


def filter_keys(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The keys a metadata row carries for filters (see the module's docstring)."""
    out: dict[str, Any] = {}
    for field, v in metadata.items():
        if v is None or not isinstance(v, (str, int, float, bool)) or field.startswith(KEY_PREFIX):
            continue
        if isinstance(v, bool):
            kind = "#b" + text_form(v)
        elif isinstance(v, str):
            kind = (date_value(v) if reads_dates(field) else None) or "#s"
        else:
            kind = "#n"
        out[_kind_key(field)] = kind
        if (x := as_number(v)) is not None:
            out[_number_key(field)] = x
    return out


def without_filter_keys(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if not k.startswith(KEY_PREFIX)}


def _quote(value: Any) -> str:
    s = str(value)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _number(x: float) -> str:
    return str(int(x)) if x.is_integer() and abs(x) < 2 ** 53 else repr(x)


def _any(parts: Iterable[str]) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def _all(parts: Iterable[str]) -> str:
    parts = list(parts)
    return parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"


def _differs(ref: str, literal: str) -> str:
    return f"({ref} < {literal} or {ref} > {literal})"


class _Field:
    """The expressions of one metadata field: its value, its kind key and its number key."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ref = f"metadata[{_quote(name)}]"
        self.kind = f"metadata[{_quote(_kind_key(name))}]"
        self.num = f"metadata[{_quote(_number_key(name))}]"
        self.dates = reads_dates(name)

    def present(self) -> str:
        return f'{self.kind} >= "#"'

    def is_text(self) -> str:
        return f'({self.kind} == "#s" or {self.kind} >= "0")'

    def equal(self, w: Any) -> str:
        t = text_form(w)
        parts = [f"{self.ref} == {_quote(t)}"]
        if (x := as_number(w)) is not None:
            parts.append(f'({self.kind} == "#n" and {self.num} == {_number(x)})')
        if t in ("true", "false"):
            parts.append(f'{self.kind} == "#b{t}"')
        if self.dates and (b := date_bound(w)):
            day = f"({self.kind} >= {_quote(b)} and {self.kind} < {_quote(b + _AFTER)})"
            parts += [day] + [f"{self.kind} == {_quote(p)}" for p in date_prefixes(b)]
        return _any(parts)

    def unequal(self, w: Any) -> str:
        """Present and not equal to ``w``: the negation of each part of :meth:`equal`, without ``not``."""
        t = text_form(w)
        parts = [self.present(), _any([f'{self.kind} == "#n"', f'{self.kind} == "#btrue"', f'{self.kind} == "#bfalse"',
                                        f"{self.ref} < {_quote(t)}", f"{self.ref} > {_quote(t)}"])]
        if (x := as_number(w)) is not None:
            parts.append(_any([_differs(self.kind, '"#n"'), _differs(self.num, _number(x))]))
        if t in ("true", "false"):
            parts.append(_differs(self.kind, f'"#b{t}"'))
        if self.dates and (b := date_bound(w)):
            before = _all([f"{self.kind} < {_quote(b)}"] + [_differs(self.kind, _quote(p)) for p in date_prefixes(b)])
            parts.append(_any([before, f"{self.kind} >= {_quote(b + _AFTER)}"]))
        return _all(parts)

    def ordered(self, op: str, bound: Any) -> str:
        nb, db = bound_kinds(self.name, bound)
        parts = []
        if nb is not None:
            parts.append(f"{self.num} {op} {_number(nb)}")
        if db is not None:
            k, lo, hi = self.kind, _quote(db), _quote(db + _AFTER)
            on = [f"{k} == {_quote(p)}" for p in date_prefixes(db)]
            parts.append({">=": _any([f"{k} >= {lo}"] + on), ">": f"{k} >= {hi}", "<=": f'({k} >= "0" and {k} < {hi})',
                          "<": _all([f'{k} >= "0"', f"{k} < {lo}"] + [_differs(k, _quote(p)) for p in date_prefixes(db)])}[op])
        if nb is None and db is None:
            parts.append(f"({self.is_text()} and {self.ref} {op} {_quote(bound)})")
        return _any(parts)


def kind_counts(field: str) -> dict[str, str]:
    """Expressions selecting the rows where a metadata field is present, is a date, is a number: counted, they say
    whether a text range bound is a mistake on it (capr.filters.bound_kind_error)."""
    f = _Field(field)
    return {"present": f.present(), "dates": f'{f.kind} >= "0"', "numbers": f"({f.num} >= 0 or {f.num} < 0)"}


def _builtin(c: FilterClause) -> str:
    """A clause on one of capr's own VARCHAR fields (aspect, doc_id, title, heading): text, compared exactly."""
    lits = [_quote(text_form(v)) for v in c.values]
    if c.op == "=":
        return f"{c.field} == {lits[0]}"
    if c.op == "!=":
        return f"{c.field} != {lits[0]}"
    if c.op in ("in", "not in"):
        return f"{c.field} {c.op} [{', '.join(lits)}]"
    return f"{c.field} {c.op} {lits[0]}"


def milvus_expr(clauses: Iterable[FilterClause], builtin: Iterable[str] = ("aspect", "doc_id", "title", "heading")) -> str:
    """A Milvus boolean expression with the embedded index's meaning: built-in fields by name, any other in the
    ``metadata`` JSON field through its filter keys (see the module's docstring)."""
    builtin = set(builtin)
    parts = []
    for c in clauses:
        if c.field in builtin:
            parts.append(_builtin(c))
            continue
        f = _Field(c.field)
        if c.op in ("=", "in"):
            parts.append(_any(f.equal(v) for v in c.values))
        elif c.op in ("!=", "not in"):
            parts.append(_all(f.unequal(v) for v in c.values))
        else:
            parts.append(f.ordered(c.op, c.value))
    return " and ".join(parts)


__all__ = ["KEY_PREFIX", "filter_keys", "kind_counts", "milvus_expr", "without_filter_keys"]
