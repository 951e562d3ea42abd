"""The served index: an immutable snapshot for readers, one writer at a time.

A loaded ``Index`` is a consistent, read-only generation. Each request takes the current snapshot
once and uses only it, so a search never sees half of a write. Writes are serialised by a lock,
build and commit a new generation on disk (atomic: a crash leaves the previous one current), and
only then swap the snapshot reference. Readers never wait for writers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from capr.errors import CaprError
from capr.index import Index, IndexWriter
from capr.index.directory import CURRENT, WriterBusy
from capr.store.embedded import EmbeddedStore
from capr.records import Document
from capr.service.config import AuthThrottle, ServiceConfig, TokenSet

if TYPE_CHECKING:
    from capr.cases import CasePipeline
    from capr.cases.similar import CaseFinder

log = logging.getLogger("capr.service")
T = TypeVar("T")


class WriteBusy(CaprError):
    """Another process kept the index's writer lock for longer than the service waits."""


def warm(index: Index) -> Index:
    """Build the lazy structures before readers see the snapshot, so the first search after a write does not
    pay for them (and concurrent first searches do not all build them). All of them are per segment and kept
    by segments shared with the previous snapshot, so after a write only the new segments' are built; the
    per-generation part (BM25 length norms, deleted rows) is a few vector operations (issue 19)."""
    if index.segments:
        bm25 = index.bm25()
        for si, seg in enumerate(index.segments):
            seg.preload()  # id maps, columns: kept by the segment, so only new segments load anything
            bm25.norm(si)
    if index.has_dense:
        index.vectors()
    return index


class Readiness:
    """Whether the service has loaded what its searches need (``starting`` → ``ok``, or ``failed``).
    Searches and writes wait for it, so none pays for a model load or loads a model a second time."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.status = "starting"
        self.error: str | None = None
        self.took_s: float | None = None
        self._t0 = time.perf_counter()

    @property
    def ready(self) -> bool:
        return self.status == "ok"

    def finish(self, error: str | None = None) -> None:
        self.took_s = round(time.perf_counter() - self._t0, 3)
        self.status, self.error = ("failed", error) if error else ("ok", None)
        self._done.set()

    def wait(self) -> None:
        self._done.wait()


def _pointer_signature(root: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(root / CURRENT)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns  # CURRENT is replaced by rename: a new inode per commit


def _current_name(root: Path) -> str | None:
    try:
        return (root / CURRENT).read_text().strip()
    except OSError:
        return None


class IndexHolder:
    def __init__(self, root: str | Path, watch: bool = True, write_wait_s: float = 30.0) -> None:
        self.root = Path(root)
        self.watch = watch
        self.write_wait_s = write_wait_s
        self._lock = threading.Lock()  # held by the one writer (or refresher) of this process
        self._sig = _pointer_signature(self.root)
        self._snap = warm(Index.load(self.root))
        self._store = EmbeddedStore.of(self._snap)
        self._vocab: tuple[str, dict[str, list[str]]] = ("", {})

    # -- reading --------------------------------------------------------------------------
    @property
    def index(self) -> Index:
        """The current snapshot. With ``watch``, a generation committed by another process
        (`capr add`, another worker) is picked up: one stat of CURRENT per call."""
        if self.watch and _pointer_signature(self.root) != self._sig:
            self._refresh()
        return self._snap

    @property
    def store(self) -> EmbeddedStore:
        """The current snapshot behind the Store protocol (what requests read through)."""
        snap = self.index
        store = self._store
        if store.index is not snap:
            store = self._store = EmbeddedStore.of(snap)
        return store

    def _refresh(self) -> None:
        # Non-blocking: while this process writes or another request refreshes, keep serving
        # the snapshot at hand rather than queueing readers behind a load.
        if not self._lock.acquire(blocking=False):
            return
        try:
            sig = _pointer_signature(self.root)
            if sig != self._sig:
                new = Index.load(self.root, previous=self._snap)
                self._install(new, sig)
                log.info("picked up generation %s committed by another process", new.manifest["generation"])
        except CaprError as e:
            log.warning("could not load the new generation (%s); still serving %s", type(e).__name__, self.generation)
        finally:
            self._lock.release()

    @property
    def generation(self) -> str:
        return str(self._snap.manifest["generation"])

    def load_encoder(self) -> None:
        """Loads the query encoder of the snapshot served; snapshots installed later with the same model share it
        (``_install``). Under the lock, so no snapshot without it is installed while it loads."""
        with self._lock:
            if self._snap.has_dense:
                self._snap.encoder()

    def vocabulary(self, store: EmbeddedStore, field: str) -> list[str]:
        """Sorted distinct entities (document titles) or aspects of live passages, cached per generation."""
        index = store.index
        gen = str(index.manifest["generation"])
        cached_gen, cache = self._vocab
        if cached_gen != gen:
            cache = {}
            self._vocab = (gen, cache)
        if field not in cache:
            if field == "aspect":
                values = index.aspects()
            else:  # per segment: no merged title column per generation
                values = sorted({" ".join(str(v).split()) for v in index.live_values("title") if v}, key=str.lower)
            cache[field] = values
        return cache[field]

    # -- writing --------------------------------------------------------------------------
    def _open_writer(self) -> IndexWriter:
        # another process (a second worker, `capr add`) holding the writer lock is worth waiting for
        try:
            return IndexWriter(self.root, mode="update", base=self._snap, background_cleanup=True,
                               lock_wait_s=self.write_wait_s)
        except WriterBusy:
            raise WriteBusy(f"the index is being written by another process for more than {self.write_wait_s:.0f} s") from None

    def write(self, fn: Callable[[IndexWriter], T]) -> tuple[T, Index]:
        """Runs ``fn(writer)`` and commits; returns fn's result and the new snapshot, now current."""
        with self._lock:
            writer = self._open_writer()
            try:
                result = fn(writer)
                new = writer.commit()
            except BaseException:
                writer.abort()
                raise
            sig = _pointer_signature(self.root)
            if _current_name(self.root) != new.manifest["generation"]:
                sig = None  # another process committed right after this write: pick it up next request
            self._install(new, sig)
            return result, new

    def _install(self, new: Index, sig: tuple[int, int] | None) -> None:
        old = self._snap
        if old.has_dense and new.manifest.get("dense") == old.manifest.get("dense"):
            # The encoder is the same model: reuse the loaded one instead of loading it again per
            # generation (Index keeps it in a private slot; this is the one place that shares it).
            new._encoder = old._encoder
        warm(new)
        self._snap = new  # one reference assignment: readers see the old or the new snapshot, whole
        self._sig = sig
        # The old snapshot is not closed: requests still running on it finish on it; its memory maps
        # are released when the last reference goes.


class _StoreWriter:
    """What the service's write functions call on a store without generations: ``base.has_document``,
    ``add``, ``delete`` (each applied at once; the backend acknowledges it before the response)."""

    def __init__(self, store: Any) -> None:
        self.base = store

    def add(self, doc: Document) -> int:
        return self.base.add([doc])

    def delete(self, doc_id: str) -> None:
        self.base.delete([doc_id])


class StoreHolder:
    """IndexHolder's interface for a backend without generations (a Milvus collection): reads see what the
    backend has committed; writes are serialised here."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._lock = threading.Lock()  # capr's meta row (counts, fields) is read-modify-write

    @property
    def index(self) -> Any:
        return self.store

    @property
    def generation(self) -> str:
        return self.store.generation_info()["generation"]

    def load_encoder(self) -> None:
        load = getattr(self.store, "encoder", None)  # a backend without one encodes queries elsewhere
        if self.store.has_dense and load is not None:
            load()

    def vocabulary(self, store: Any, field: str) -> list[str]:
        # aspects come from the collection; entities (distinct titles) would need a scan
        return sorted(store.aspects()) if field == "aspect" else []

    def write(self, fn: Callable[[_StoreWriter], T]) -> tuple[T, Any]:
        with self._lock:
            return fn(_StoreWriter(self.store)), self.store


@dataclass
class ServiceState:
    """What one app serves and remembers between requests (``app.state.service``): the index snapshot holder, the
    settings, readiness, the tokens and their throttle, and what is loaded once per snapshot or per event loop."""

    holder: IndexHolder | StoreHolder
    config: ServiceConfig
    private: Callable[[str], str]  # a message as a client may read it (no server paths)
    readiness: Readiness = field(default_factory=Readiness)
    tokens: TokenSet = field(init=False)
    throttle: AuthThrottle = field(init=False)
    # one model instance per re-ranker; torch inference is not re-entrant across request threads
    rerank_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # one CapacityLimiter per event loop (a TestClient runs its own)
    _limiters: dict[int, Any] = field(default_factory=dict, init=False, repr=False)
    _case_pipes: dict[int, CasePipeline] = field(default_factory=dict, init=False, repr=False)
    _case_finders: dict[int, CaseFinder] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.tokens = TokenSet(self.config.tokens)
        self.throttle = AuthThrottle.from_config(self.config)

    def search_limiter(self, loop_id: int) -> Any:
        """The event loop's limit on searches computed at once (``search_concurrency``; 0: one per CPU core)."""
        limiter = self._limiters.get(loop_id)
        if limiter is None:
            import anyio

            limiter = self._limiters[loop_id] = anyio.CapacityLimiter(self.config.search_concurrency or os.cpu_count() or 1)
        return limiter

    def case_pipeline(self, store: Any) -> CasePipeline:
        """What `capr cases` runs on this snapshot (capr.cases.config.case_config): one pipeline per snapshot, the
        cross-encoder shared between them."""
        from capr.cases import CasePipeline
        from capr.cases.config import case_config

        pipe = self._case_pipes.get(id(store.index))
        if pipe is None:
            pipe = CasePipeline(store.index, case_config(store.index.has_dense, self.config.cases_model))
            old = next(iter(self._case_pipes.values()), None)
            if old is not None:
                pipe._cross = old._cross
            self._case_pipes.clear()
            self._case_pipes[id(store.index)] = pipe
        return pipe

    def case_finder(self, store: Any) -> CaseFinder:
        """One finder (document maps, patient mask) per snapshot."""
        from capr.cases.similar import CaseFinder

        finder = self._case_finders.get(id(store.index))
        if finder is None:
            self._case_finders.clear()
            finder = self._case_finders[id(store.index)] = CaseFinder(store.index)
        return finder
