"""The index directory: generations committed by atomically replacing the CURRENT pointer.

    DIR/CURRENT            "gen-000007"   (replaced with write-temp + fsync + rename)
    DIR/gen-000007/        manifest.json (settings, the segments it uses), live/ (per-segment live masks)
    DIR/segments/seg-000003/  an immutable segment: stores, lexical/, columns/, vectors
    DIR/.gen-000008.tmp-N  a write in progress (or a killed one: removed by the next writer)

A reader only ever sees a complete generation; a writer killed at any moment
leaves CURRENT pointing at the previous one.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from capr.errors import IndexError_
from capr.index.atomic import fsync_dir, write_bytes

CURRENT = "CURRENT"
_GEN_RE = re.compile(r"^gen-(\d{6})$")
_TMP_RE = re.compile(r"^\.gen-\d{6}\.tmp-(\d+)$")
_SEG_RE = re.compile(r"^seg-\d{6}$")
_SEG_TMP_RE = re.compile(r"^\.seg-\d{6}\.tmp-(\d+)$")


def is_index_dir(root: Path) -> bool:
    return (root / CURRENT).is_file()


def current_generation(root: Path) -> Path:
    root = Path(root)
    if not root.exists():
        raise IndexError_(f"{root}: no such index directory")
    if not is_index_dir(root):
        raise IndexError_(f"{root}: not a capr index (no {CURRENT} file); build one with `capr index`")
    try:
        name = (root / CURRENT).read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as e:
        raise IndexError_(f"{root}: the index is damaged: {CURRENT}: cannot be read ({e})") from None
    gen = root / name
    if not _GEN_RE.match(name) or not gen.is_dir():
        raise IndexError_(f"{root}: {CURRENT} names {name!r}, which is missing; the index is corrupt")
    return gen


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_TRASH_RE = re.compile(r"^\.trash-.*-(\d+)-\d+$")
_trash_seq = itertools.count()


def _discard(p: Path, background: bool) -> None:
    """Delete a folder; with ``background``, rename it out of the way (one system call, under the writer's lock)
    and delete it in a daemon thread, so a commit in a serving process does not wait for dozens of unlinks, each
    of which gives up the GIL to the searches running beside it. A trash folder left by an exit is deleted by the
    next ``remove_stale``."""
    if not background:
        shutil.rmtree(p, ignore_errors=True)
        return
    trash = p.with_name(f".trash-{p.name}-{os.getpid()}-{next(_trash_seq)}")
    try:
        os.rename(p, trash)
    except OSError:
        shutil.rmtree(p, ignore_errors=True)
        return
    threading.Thread(target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True}, daemon=True).start()


def remove_stale(root: Path, background: bool = False) -> None:
    """Delete what no current generation needs: older generations, unreferenced segments,
    and half-written generations or segments of writers that have died."""
    current = (root / CURRENT).read_text().strip() if is_index_dir(root) else None
    for p in root.iterdir():
        m = _TMP_RE.match(p.name) or _TRASH_RE.match(p.name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
        elif _GEN_RE.match(p.name) and p.name != current:
            _discard(p, background)
    segdir = root / "segments"
    if not segdir.is_dir():
        return
    used: set[str] = set()
    if current:
        try:
            used = set(json.loads((root / current / "manifest.json").read_text())["segments"])
        except (OSError, ValueError, KeyError):
            return  # never delete segments while the current manifest cannot be read
    for p in segdir.iterdir():
        m = _SEG_TMP_RE.match(p.name) or _TRASH_RE.match(p.name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
        elif _SEG_RE.match(p.name) and p.name not in used:
            _discard(p, background)


@contextmanager
def write_lock(root: Path) -> Iterator[None]:
    with open(root / "LOCK", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IndexError_(f"{root}: another process is writing this index") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def prepare_root(root: Path) -> None:
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise IndexError_(f"{root}: exists and is not a directory")
    foreign = [p for p in root.iterdir() if p.name not in ("LOCK", "segments") and not _TMP_RE.match(p.name)] if root.is_dir() else []
    if foreign and not is_index_dir(root):
        raise IndexError_(f"{root}: directory is not empty and is not a capr index; refusing to overwrite it")
    root.mkdir(parents=True, exist_ok=True)


def new_generation(root: Path) -> tuple[Path, str]:
    nums = [int(m.group(1)) for p in root.iterdir() if (m := _GEN_RE.match(p.name))]
    name = f"gen-{max(nums, default=0) + 1:06d}"
    tmp = root / f".{name}.tmp-{os.getpid()}"
    tmp.mkdir()
    return tmp, name


def commit_generation(root: Path, tmp: Path, name: str, background_cleanup: bool = False) -> Path:
    fsync_dir(tmp)
    final = root / name
    os.replace(tmp, final)
    fsync_dir(root)
    write_bytes(root / CURRENT, (name + "\n").encode())
    remove_stale(root, background_cleanup)
    return final
