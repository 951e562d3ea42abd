"""The Milvus backend's filters: capr's filter clauses (capr.filters) as Milvus boolean expressions, aspect values
read as the corpus aspects they select (as the embedded index reads them), and the embedded backend's error for a
value no passage has."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from capr.errors import QueryError
from capr.filters import FilterClause, as_clauses, bound_kind_error, known_field, named_values, text_bound
from capr.store.milvus_expr import filter_keys, kind_counts, milvus_expr, without_filter_keys
from capr.store.milvus_schema import BUILTIN
from capr.text.aspects import filter_aspect, no_aspect_message


def normalized(clauses: list[FilterClause], aspect_counts: dict[str, int | None], analyzer: Any) -> list[FilterClause]:
    """Aspect values as the corpus aspects they select (capr.text.aspects.filter_aspect)."""
    if not any(c.field == "aspect" for c in clauses):
        return clauses
    reader = analyzer if aspect_counts else None  # no aspects recorded: none for a value to read as (nor an analyzer)

    def norm(v: object) -> str:
        return filter_aspect(v, aspect_counts, reader)

    return [FilterClause(c.field, c.op, tuple(norm(v) for v in c.value) if c.op in ("in", "not in")
                         else norm(c.value)) if c.field == "aspect" else c for c in clauses]


def compile_expr(filters: Any, fields: Iterable[str], aspect_counts: dict[str, int | None], analyzer: Any) -> str:
    """A Milvus expression for a {field: value} dict or range/set clauses (capr.filters)."""
    clauses = [known_field(c, list(fields)) for c in as_clauses(filters)]
    return milvus_expr(normalized(clauses, aspect_counts, analyzer), BUILTIN)


def explain_empty(count: Callable[[str], int], filters: Any, fields: Iterable[str],
                  aspect_counts: dict[str, int | None], analyzer: Any) -> None:
    """The embedded backend's error for a filter value no passage has, found only when a filtered search comes back
    empty: ``count(expr)`` of each equality/set clause then, nothing extra on the common path."""
    for c in (known_field(c, list(fields)) for c in as_clauses(filters)):
        if c.op in ("=", "in"):  # an empty range is an answer, not a typo
            check_held(count, c, aspect_counts, analyzer)


def check_held(count: Callable[[str], int], clause: FilterClause, aspect_counts: dict[str, int | None],
               analyzer: Any) -> None:
    """Each value ``clause`` names is held by some passage, else the embedded backend's error for it."""
    for w in named_values(clause):
        if count(milvus_expr(normalized([FilterClause(clause.field, "=", w)], aspect_counts, analyzer), BUILTIN)) == 0:
            shown = f"{clause.field}={w!r}"
            if clause.field == "aspect":
                raise QueryError(no_aspect_message(w, shown, aspect_counts))
            raise QueryError(f"no passage has {shown}")


def check_clauses(count: Callable[[str], int], example: Callable[[str, str], str], filters: Any, fields: Iterable[str],
                  aspect_counts: dict[str, int | None], analyzer: Any) -> None:
    """Refuses, as the embedded index does, a value that a ``!=``, ``not in`` or many-valued ``in`` names and no
    passage has (one count per such value; that of an ``=`` is refused when the search comes back empty:
    :func:`explain_empty`) and a text range bound on a field of dates or numbers. ``example(field, expr)``: one
    stored value of ``field`` among the rows ``expr`` selects."""
    for c in (known_field(c, list(fields)) for c in as_clauses(filters)):
        if text_bound(c) and c.field not in BUILTIN:
            n = {what: count(expr) for what, expr in kind_counts(c.field).items()}
            kind = None if not n["present"] else "dates" if n["dates"] == n["present"] else \
                "numbers" if n["numbers"] == n["present"] else None
            shown = example(c.field, kind_counts(c.field)["dates"]) if kind == "dates" else ""
            if (error := bound_kind_error(c, kind, shown)) is not None:
                raise error
        elif c.op in ("!=", "not in") or len(c.values) > 1:
            check_held(count, c, aspect_counts, analyzer)


def restricted(keys: np.ndarray) -> str:
    """An expression selecting the given passages (by ``seq``)."""
    return f"seq in [{', '.join(str(int(k)) for k in keys)}]"


def restrict(flt: str, keys: np.ndarray) -> str:
    """The filter expression narrowed to the given passages."""
    return f"({flt}) and {restricted(keys)}" if flt else restricted(keys)


__all__ = ["check_clauses", "check_held", "compile_expr", "explain_empty", "filter_keys", "kind_counts", "milvus_expr",
           "normalized", "restrict", "restricted", "without_filter_keys"]
