"""The Milvus backend's filters: capr's filter clauses (capr.filters) as Milvus boolean expressions, aspect values
read as the corpus aspects they select (as the embedded index reads them), and the embedded backend's error for a
value no passage has."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from capr.errors import QueryError
from capr.filters import FilterClause, as_clauses, known_field, milvus_expr
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
        if c.op not in ("=", "in"):
            continue  # an empty range is an answer, not a typo
        if count(milvus_expr(normalized([c], aspect_counts, analyzer), BUILTIN)) == 0:
            shown = f"{c.field}={c.value!r}" if c.op == "=" else str(c)
            if c.field == "aspect":
                raise QueryError(no_aspect_message(c.values[0], shown, aspect_counts))
            raise QueryError(f"no passage has {shown}")


def restricted(keys: np.ndarray) -> str:
    """An expression selecting the given passages (by ``seq``)."""
    return f"seq in [{', '.join(str(int(k)) for k in keys)}]"


def restrict(flt: str, keys: np.ndarray) -> str:
    """The filter expression narrowed to the given passages."""
    return f"({flt}) and {restricted(keys)}" if flt else restricted(keys)
