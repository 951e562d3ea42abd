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
    """A query that cannot be answered as asked (empty, unknown aspect or filter field). ``field`` names the part of
    the request at fault (``text``, ``aspect``, ``filters``, ``retriever``, ``evidence``, ``reranker``, …) when it is
    known, so a caller (the service) reports it without checking the request first."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def about(self, field: str) -> "QueryError":
        """This error, naming ``field`` unless it names one already."""
        self.field = self.field or field
        return self


class IndexError_(CaprError):
    """A missing, foreign or corrupt index directory."""


class WriteError(CaprError):
    """A write to an index that failed part-way (disk full, file too large, I/O error). Nothing of it
    was committed: the previous generation stays current."""
