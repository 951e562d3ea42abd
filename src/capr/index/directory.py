"""The index directory: generations committed by atomically replacing the CURRENT pointer.

    DIR/CURRENT            "gen-000007"   (replaced with write-temp + fsync + rename)
    DIR/gen-000007/        manifest.json (settings, the segments it uses), live/ (per-segment live masks)
    DIR/segments/seg-000003/  an immutable segment: stores, lexical/, columns/, vectors
    DIR/.gen-000008.tmp-N  a write in progress (or a killed one: removed by the next writer)

A reader only ever sees a complete generation; a writer killed at any moment
leaves CURRENT pointing at the previous one.
"""

from __future__ import annotations

import collections
import fcntl
import itertools
import json
import os
import re
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from capr.errors import IndexError_
from capr.index.atomic import fsync_dir, write_bytes

CURRENT = "CURRENT"
_GEN_RE = re.compile(r"^gen-(\d{6})$")
_TMP_RE = re.compile(r"^\.gen-\d{6}\.tmp-(\d+)$")
_SEG_RE = re.compile(r"^seg-\d{6}$")
_SEG_TMP_RE = re.compile(r"^\.seg-\d{6}\.tmp-(\d+)$")


def is_index_dir(root: Path) -> bool:
    return (root / CURRENT).is_file()


def current_name(root: Path) -> str:
    """The generation CURRENT names (not checked to exist: see ``current_generation``)."""
    root = Path(root)
    if not root.exists():
        raise IndexError_(f"{root}: no such index directory")
    if not is_index_dir(root):
        raise IndexError_(f"{root}: not a capr index (no {CURRENT} file); build one with `capr index`")
    try:
        return (root / CURRENT).read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as e:
        raise IndexError_(f"{root}: the index is damaged: {CURRENT}: cannot be read ({e})") from None


def missing_generation(root: Path, name: str) -> IndexError_:
    return IndexError_(f"{root}: {CURRENT} names {name!r}, which is missing; the index is corrupt")


def current_generation(root: Path) -> Path:
    root = Path(root)
    name = current_name(root)
    gen = root / name
    if not _GEN_RE.match(name) or not gen.is_dir():
        raise missing_generation(root, name)
    return gen


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- reader pins ----------------------------------------------------------------------------------
# A reader holds a shared flock on its generation's manifest for as long as it uses the generation; a writer
# deletes an obsolete generation (and the segments only it names) only after taking that lock exclusively, so
# the files of a generation someone reads never vanish under it (Lucene's deletion policy, SQLite's shared
# locks). A process shares one pin per generation among its readers: flock locks of two descriptors conflict
# even inside one process, and a writer must not be held back by readers of its own process, which keep
# their memory maps and already loaded files (the service swaps generations; `capr add` drops its base).


class GenerationGone(IndexError_):
    """The generation a reader chose is being deleted (a writer made it obsolete): read CURRENT again."""


class _Pin:
    __slots__ = ("fh", "count")

    def __init__(self, fh) -> None:
        self.fh = fh
        self.count = 1


_pins: dict[str, _Pin] = {}
_pins_lock = threading.Lock()
# A reader's pin is released by a finalizer when its snapshot is garbage, and the cyclic collector runs at any
# allocation, also inside a locked section of the same thread: waiting for the lock there would wait for ever
# (a `capr serve` that stopped answering in the soak). Such a release is queued here and done by that section
# before it lets the lock go.
_pending_releases: collections.deque[Callable[[], None]] = collections.deque()
_pins_owner: int | None = None  # the thread inside a _pins_locked() section


@contextmanager
def _pins_locked() -> Iterator[None]:
    global _pins_owner
    with _pins_lock:
        _pins_owner = threading.get_ident()
        try:
            yield
        finally:
            while _pending_releases:
                _pending_releases.popleft()()
            _pins_owner = None


def pin_generation(gen: Path) -> Callable[[], None] | None:
    """Pins ``gen`` against deletion until the returned function is called (None: the generation's folder is
    gone, or the file system has no flock; the reader then finds out by reading it). Costs one open and one
    flock for the first reader of a generation in a process."""
    key = str(gen)
    with _pins_locked():
        pin = _own_pin(gen)
        if pin is not None:
            pin.count += 1
        else:
            try:
                fh = open(gen / "manifest.json", "rb")
            except OSError:
                return None
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                raise GenerationGone(f"{gen.parent}: generation {gen.name} is being deleted") from None
            except OSError:
                fh.close()
                return None
            pin = _pins[key] = _Pin(fh)
    released = False

    def release_locked() -> None:
        nonlocal released
        if released:
            return
        released = True
        pin.count -= 1
        if pin.count == 0:
            if _pins.get(key) is pin:
                del _pins[key]
            pin.fh.close()

    def release() -> None:
        if _pins_owner == threading.get_ident():  # a finalizer run inside this thread's own section
            _pending_releases.append(release_locked)
            return
        with _pins_locked():
            release_locked()
    return release


def _own_pin(gen: Path) -> _Pin | None:
    """This process's pin of ``gen``, unless its file is no longer the one at that path (an index folder deleted
    and built again under the same name while an old snapshot was still alive): one stat. Call under _pins_lock."""
    pin = _pins.get(str(gen))
    if pin is None:
        return None
    try:
        same = os.stat(gen / "manifest.json").st_ino == os.fstat(pin.fh.fileno()).st_ino
    except OSError:
        same = False
    if not same:
        del _pins[str(gen)]  # its holders still release (and close) it
        return None
    return pin


def _lock_for_deletion(gen: Path):
    """Exclusively locks an obsolete generation's manifest when no other process pins it: returns a function
    that ends the lock (after the folder is renamed away), or None when another process reads it."""
    with _pins_locked():
        own = _own_pin(gen)
        if own is not None:
            try:
                fcntl.flock(own.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fcntl.flock(own.fh, fcntl.LOCK_SH)  # a refused conversion drops the shared lock: take it again
                return None
            return lambda: fcntl.flock(own.fh, fcntl.LOCK_SH)
    try:
        fh = open(gen / "manifest.json", "rb")
    except OSError:
        return lambda: None  # no manifest: a half-deleted generation nobody can open
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    except OSError:
        pass  # no flock on this file system: nothing to honour
    return fh.close


_TRASH_RE = re.compile(r"^\.trash-.*-(\d+)-\d+$")
_trash_seq = itertools.count()


def _discard(p: Path, background: bool) -> None:
    """Delete a folder: rename it out of the way (one system call: no reader can open half of it), then delete
    it — with ``background``, in a daemon thread, so a commit in a serving process does not wait for dozens
    of unlinks, each of which gives up the GIL to the searches running beside it. A trash folder left by an
    exit is deleted by the next ``remove_stale``."""
    trash = p.with_name(f".trash-{p.name}-{os.getpid()}-{next(_trash_seq)}")
    try:
        os.rename(p, trash)
    except OSError:
        shutil.rmtree(p, ignore_errors=True)
        return
    if background:
        threading.Thread(target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True}, daemon=True).start()
    else:
        shutil.rmtree(trash, ignore_errors=True)


def _leftover(m: re.Match | None) -> bool:
    """A temporary or trash folder no live writer is using. Called under the writer lock, so a temporary
    folder of another process is a dead writer's (even when its pid was reused); a trash folder may still be
    being deleted by a live process's thread."""
    if m is None:
        return False
    pid = int(m.group(1))
    return pid != os.getpid() and (m.re is not _TRASH_RE or not _pid_alive(pid))


def remove_stale(root: Path, background: bool = False) -> None:
    """Delete what no reader can need: generations older than CURRENT that no other process pins, segments
    that no kept generation names, and half-written generations or segments of writers that have died.
    Called with the writer lock held."""
    current = (root / CURRENT).read_text().strip() if is_index_dir(root) else None
    kept = [current] if current else []
    for p in sorted(root.iterdir(), key=lambda q: q.name):
        if _leftover(_TMP_RE.match(p.name) or _TRASH_RE.match(p.name)):
            shutil.rmtree(p, ignore_errors=True)
        elif _GEN_RE.match(p.name) and p.name != current:
            unlock = _lock_for_deletion(p)
            if unlock is None:
                kept.append(p.name)
                continue
            try:
                _discard(p, background)
            finally:
                unlock()
    segdir = root / "segments"
    if not segdir.is_dir():
        return
    used: set[str] = set(journal_segments(root))  # an interrupted create's, kept for it to resume
    for name in kept:
        try:
            used.update(json.loads((root / name / "manifest.json").read_text())["segments"])
        except (OSError, ValueError, KeyError):
            return  # never delete segments while a kept manifest cannot be read
    for p in segdir.iterdir():
        if _leftover(_SEG_TMP_RE.match(p.name) or _TRASH_RE.match(p.name)):
            shutil.rmtree(p, ignore_errors=True)
        elif _SEG_RE.match(p.name) and p.name not in used:
            _discard(p, background)


# -- the journal of an interrupted create ---------------------------------------------------------
# A create that is given what it indexes (a build key) records each segment it finishes here; if it is killed (SIGKILL,
# out of memory, power loss) the same create run again continues after them instead of starting over. No generation
# names these segments, so readers never see them; every writer keeps them while the journal names them, and a create
# of something else, or a finished or abandoned one, removes the journal.
JOURNAL = "build.json"


def journal_path(root: Path) -> Path:
    return Path(root) / "segments" / JOURNAL


def read_journal(root: Path) -> dict | None:
    """The journal of an interrupted create, or None (none, or unreadable: a journal half-written by a killed writer
    is never read, since it is replaced whole, but a damaged one just means starting over)."""
    try:
        journal = json.loads(journal_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(journal, dict) and isinstance(journal.get("segments"), list) and \
        isinstance(journal.get("documents_read"), int)
    return journal if ok else None


def write_journal(root: Path, journal: dict) -> None:
    write_bytes(journal_path(root), json.dumps(journal, ensure_ascii=False).encode("utf-8"))


def remove_journal(root: Path) -> None:
    try:
        journal_path(root).unlink()
    except FileNotFoundError:
        pass


def journal_segments(root: Path) -> list[str]:
    journal = read_journal(root)
    return [str(s[0]) for s in journal["segments"]] if journal is not None else []


# -- the writer lock ------------------------------------------------------------------------------
DEFAULT_LOCK_WAIT_S = 30.0


class WriterBusy(IndexError_):
    """Another process held the writer lock for longer than the caller would wait."""


def _holder(fh) -> str:
    try:
        fh.seek(0)
        pid = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        pid = 0
    return f" (pid {pid})" if pid and _pid_alive(pid) else ""


@contextmanager
def write_lock(root: Path, wait_s: float = 0.0) -> Iterator[None]:
    """The one writer lock of an index: a flock on ROOT/LOCK, waited for up to ``wait_s`` seconds. The kernel
    ends it when its process dies however it dies, so a LOCK file left by a killed writer never blocks the
    next one; the holder writes its pid into it for the message of a writer that gave up waiting."""
    with open(root / "LOCK", "a+") as fh:
        deadline = time.monotonic() + max(0.0, wait_s)
        delay = 0.02
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    waited = f"; gave up after waiting {wait_s:g} s for it" if wait_s > 0 else ""
                    raise WriterBusy(f"{root}: another process is writing this index{_holder(fh)}{waited}") from None
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.5)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))
            fh.flush()
        except OSError:
            pass  # a read-only LOCK file: the pid only improves a message
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def check_root(root: Path) -> None:
    """Refuses a ``root`` an index cannot be written to (a file; a folder of other things), creating nothing: a
    command that works long before it writes the index (`capr adapt`) checks its --out first."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise IndexError_(f"{root}: exists and is not a directory")
    foreign = [p for p in root.iterdir() if p.name not in ("LOCK", "segments") and not _TMP_RE.match(p.name)] if root.is_dir() else []
    if foreign and not is_index_dir(root):
        raise IndexError_(f"{root}: directory is not empty and is not a capr index; refusing to overwrite it")


def prepare_root(root: Path) -> None:
    check_root(root)
    Path(root).mkdir(parents=True, exist_ok=True)


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
