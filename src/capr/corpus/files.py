"""Opening source files: gzip transparently, with clear errors for empty, binary and non-UTF-8 input."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import IO

from capr.errors import BadInputError


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
