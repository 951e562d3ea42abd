"""Crash-safe file writes: write a temporary file, fsync it, rename it over the target."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, IO

import numpy as np


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, writer: Callable[[IO[bytes]], None]) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            writer(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def write_synced(path: Path, writer: Callable[[IO[bytes]], None]) -> None:
    """Writes and fsyncs a file in place, without a temporary name: for files inside a folder that is itself
    still temporary (a segment or generation being prepared), which becomes visible only by its own rename
    after a directory fsync. Saves a rename and a directory fsync per file on every commit."""
    with open(path, "wb") as fh:
        writer(fh)
        fh.flush()
        os.fsync(fh.fileno())


def write_bytes(path: Path, data: bytes, atomic: bool = True) -> None:
    (write_atomic if atomic else write_synced)(path, lambda fh: fh.write(data))


def write_json(path: Path, obj: Any, atomic: bool = True) -> None:
    write_bytes(path, json.dumps(obj, ensure_ascii=False, indent=1).encode("utf-8"), atomic)


def write_npy(path: Path, array: np.ndarray, atomic: bool = True) -> None:
    (write_atomic if atomic else write_synced)(path, lambda fh: np.save(fh, np.asarray(array), allow_pickle=False))
