"""Reading an index's files: a file that is missing, truncated or not what capr wrote becomes one
:class:`DamagedIndexError` naming the index and the file, never a JSONDecodeError or a numpy ValueError
from deep inside a search (issue: damaged index copies gave tracebacks on every command)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from capr.errors import IndexError_


class DamagedIndexError(IndexError_):
    """A file of an index that cannot be read as capr wrote it: the index needs restoring or rebuilding."""

    def __init__(self, root: Path, rel: str, reason: str) -> None:
        self.root = root
        self.file = rel
        self.reason = reason
        super().__init__(f"{root}: the index is damaged: {rel}: {reason}")


def _index_root(path: Path) -> Path:
    """The index directory holding ``path`` (the nearest folder with a CURRENT file); a file of a segment or
    generation is named relative to it, which is what a user can find on disk."""
    for parent in path.parents:
        if (parent / "CURRENT").is_file():
            return parent
    return path.parent


def _reason(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError):
        return "missing"
    if isinstance(e, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(e, json.JSONDecodeError):
        return f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    if isinstance(e, OSError):
        return f"cannot be read ({e.strerror or e})"
    return str(e) or type(e).__name__


def damaged(path: Path, reason: str | BaseException) -> DamagedIndexError:
    """The error for a bad file ``path`` of an index (``reason``: text, or the exception reading it raised)."""
    path = Path(path)
    root = _index_root(path)
    try:
        rel = str(path.relative_to(root))
    except ValueError:
        rel = str(path)
    return DamagedIndexError(root, rel, reason if isinstance(reason, str) else _reason(reason))


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turns a failure to read or parse ``path`` into a :class:`DamagedIndexError`. ValueError covers what
    json and numpy raise on truncated or garbled content (EOF reading an array header, a bad magic string,
    an mmap longer than the file); EOFError is what pickled or compressed reads raise."""
    try:
        yield
    except DamagedIndexError:
        raise
    except (OSError, ValueError, EOFError) as e:
        raise damaged(path, e) from None


def read_json(path: Path) -> Any:
    with reading(path):
        return json.loads(Path(path).read_text(encoding="utf-8"))


def load_npy(path: Path, mmap_mode: str | None = None) -> np.ndarray:
    """An array file; ``mmap_mode="r"``: memory-mapped (numpy still reads and checks the header now)."""
    with reading(path):
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
