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
    (write_atomic if atomic else write_synced)(path, lambda fh: _save_npy(fh, np.asarray(array)))


def _save_npy(fh: IO[bytes], array: np.ndarray) -> None:
    """``np.save``, with the system's reason when the disk is full: numpy reports a short write as "N requested and M
    written", with no errno; writing on where it stopped makes the system say why (no space, a file-size limit)."""
    try:
        np.save(fh, array, allow_pickle=False)
    except OSError as e:
        if e.errno is not None:
            raise
        fh.flush()
        os.write(fh.fileno(), b"\0")  # raises the system's error where numpy's write was cut short
        raise
