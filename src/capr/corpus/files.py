"""Opening source files: gzip transparently, with clear errors for empty, binary and non-UTF-8 input."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator

from capr.errors import BadInputError

if TYPE_CHECKING:
    from capr.corpus.report import ReadReport


def read_head(path: Path, n: int = 8192) -> bytes:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            return fh.read(n)
    except (OSError, EOFError) as e:
        raise BadInputError(str(path), f"cannot read file: {e}") from None


def check_text_file(path: Path) -> None:
    if not path.exists():
        raise BadInputError(str(path), "no such file or directory")
    if path.stat().st_size == 0:
        raise BadInputError(str(path), "file is empty")
    head = read_head(path)
    if b"\x00" in head:
        raise BadInputError(str(path), "binary file (contains NUL bytes), expected text")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        # the 8 KiB cut may split a multi-byte character: only complain about errors before the end
        if e.start < len(head) - 4:
            raise BadInputError(str(path), f"not UTF-8 text (invalid byte at offset {e.start})") from None
    if path.suffix != ".gz" and not head.strip():
        raise BadInputError(str(path), "file contains only whitespace")


def open_text(path: Path) -> IO[str]:
    check_text_file(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def read_text(path: Path) -> str:
    check_text_file(path)
    data = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInputError(str(path), f"not UTF-8 text (invalid byte at offset {e.start})") from None


def json_lines(path: Path, report: "ReadReport | None" = None) -> Iterator[tuple[str, Any]]:
    """("line N", parsed object) for every non-blank line. Invalid JSON goes to ``report.bad``
    (which raises unless skipping) or, without a report, raises at once."""
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield f"line {lineno}", json.loads(line)
            except json.JSONDecodeError as e:
                if report is None:
                    raise BadInputError(str(path), f"invalid JSON: {e.msg} (column {e.colno})", f"line {lineno}") from None
                report.bad(str(path), f"invalid JSON: {e.msg} (column {e.colno})", f"line {lineno}")
