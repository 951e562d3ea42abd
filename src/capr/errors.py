"""Errors that reach users: each names the input at fault and why."""

from __future__ import annotations


class CaprError(Exception):
    """Base class; the CLI prints these as one clean line, never as a traceback."""


class BadInputError(CaprError):
    """A source file or record that cannot be read."""

    def __init__(self, source: str, reason: str, record: str | None = None) -> None:
        self.source = source
        self.record = record
        self.reason = reason
        where = f"{source} [{record}]" if record else source
        super().__init__(f"{where}: {reason}")


class QueryError(CaprError):
    """A query that cannot be answered as asked (empty, unknown aspect or filter field)."""


class IndexError_(CaprError):
    """A missing, foreign or corrupt index directory."""


class WriteError(CaprError):
    """A write to an index that failed part-way (disk full, file too large, I/O error). Nothing of it
    was committed: the previous generation stays current."""
