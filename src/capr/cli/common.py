"""What every `capr` command shares: the Typer app, consoles, progress displays, error handling and the
backend connection options. Commands only parse options and render; the logic is in the library."""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from capr.corpus import ReadReport
from capr.corpus.files import SourcePosition
from capr.errors import CaprError, QueryError
from capr.index.directory import DEFAULT_LOCK_WAIT_S, WriterBusy
from capr.records import DEFAULT_MAX_DOC_CHARS
from capr.models.encoder import EncoderConfig, parse_backend
from capr.store import BackendOptions, Capability

app = typer.Typer(add_completion=False, no_args_is_help=True, help="capr: clinical and health answer-passage retrieval.")


out = Console(soft_wrap=True)


err = Console(stderr=True, soft_wrap=True)


WAIT_OPTION = typer.Option(DEFAULT_LOCK_WAIT_S, "--wait", min=0, metavar="SECONDS",
                           help="How long to wait while another process writes this index (0: give up at once).")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is so that a writer aborts as on Ctrl-C: no LOCK or temporary folder
    is left behind, and the index keeps its current generation."""


TERMINATE_GRACE_S = 30.0  # after SIGTERM, the most a process gets to unwind before it is ended as by SIG_DFL
_terminating = threading.Event()


def terminating() -> bool:
    """Whether this process was sent SIGTERM (see terminate_cleanly): an error that surfaces after it may be the
    interrupted work's, not the input's, and is reported as the termination."""
    return _terminating.is_set()


def terminate_cleanly() -> None:
    """SIGTERM unwinds like SIGINT; a second SIGTERM during that cleanup ends the process at once.

    The Terminated raised where the process is can fail to end it. Python drops an exception raised inside a
    finalizer or ``__del__`` (an index's generation pin is released by one): such a lost Terminated is delivered
    again a moment later, outside the finalizer. Code running when it lands may turn it into another error (seen
    when it landed inside an index's loading: "the index is damaged"): ``terminating()`` lets the CLI report the
    termination instead, and whatever still runs TERMINATE_GRACE_S after the signal is ended."""
    import os
    import signal
    import sys

    def handler(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not _terminating.is_set():
            _terminating.set()
            # from another thread: the SIGTERM it sends then meets SIG_DFL (or, after a lost Terminated, the
            # handler again) and ends the process if the unwinding has not
            watchdog = threading.Timer(TERMINATE_GRACE_S, os.kill, (os.getpid(), signal.SIGTERM))
            watchdog.daemon = True  # never what keeps the process from exiting
            watchdog.start()
        raise Terminated()

    previous_hook = sys.unraisablehook

    def unraisable(info) -> None:
        if not isinstance(info.exc_value, Terminated):
            previous_hook(info)
            return
        signal.signal(signal.SIGTERM, handler)  # the handler runs in the main thread, and so does this hook
        try:  # sent from another thread: sent from here, the new Terminated would be raised in this hook and dropped
            again = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM))
            again.daemon = True
            again.start()
        except RuntimeError:  # the interpreter is already shutting down: nothing is left to unwind
            pass

    sys.unraisablehook = unraisable
    signal.signal(signal.SIGTERM, handler)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def write_json(payload: Any, indent: int | None = 1, ensure_ascii: bool = False) -> None:
    """Every command's ``--json`` output, on standard output: strict JSON only. A number that is not finite (NaN,
    Infinity: not JSON, and no score or metric a user can trust) is an error, not written."""
    try:
        text = json.dumps(payload, indent=indent, ensure_ascii=ensure_ascii, allow_nan=False)
    except ValueError as e:
        raise CaprError(f"the result holds a number that is not finite ({e}); nothing was written") from None
    sys.stdout.write(text + "\n")


def _progress(transient: bool = False, counted: bool = True) -> Progress:
    """A progress display; ``counted``: tasks count items (N/M), else they show a percentage."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn() if counted else TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[note]}"),
        console=err,
        transient=transient,
        # a pipe or a log file is not a terminal: live frames there are noise (spinner glyphs, one
        # line per refresh); the summary lines printed after the work still go out
        disable=not err.is_terminal,
    )


def _item_progress(label: str):
    """A function that yields the items of a sized sequence, advancing a transient progress bar."""

    def progress(items):
        with _progress(transient=True) as p:
            task = p.add_task(label, total=len(items), note="")
            for item in items:
                yield item
                p.advance(task)

    return progress


def _run_guarded(fn):
    """Runs a command body; user errors become one clean line, never a traceback."""
    try:
        return fn()
    except WriterBusy as e:
        _fail(f"{e} (--wait SECONDS waits longer)")
    except CaprError as e:
        if terminating():  # the interrupted work's error, not the input's
            _fail("terminated", 143)
        _fail(str(e))
    except Terminated:
        _fail("terminated", 143)
    except KeyboardInterrupt:
        _fail("interrupted", 130)


class _WriteProgress:
    """Feeds IndexWriter's phases (reading, encoding, writing) into one rich progress display: how far the source
    has been read (when that can be known, see SourcePosition), passages per second and the time left. Where there
    is no display (a log, a pipe), each segment written is one line with the same."""

    def __init__(self, progress: Progress | None, label: str, position: SourcePosition | None = None) -> None:
        self.p = progress
        self.position = position
        self.read_task = progress.add_task(label, total=_PERMILLE if position else None, note="") if progress else None
        self.enc_task = None
        self.passages = 0
        # when this run wrote its first passage: (time, passages written before it, fraction of the source read), so
        # that a resumed build's rate and time left count only what it writes
        self._start: tuple[float, int, float] | None = None
        self._shown = 0.0

    def _speed(self) -> str:
        """Passages per second this run, and the time left by how far the source has been read since it began."""
        t0, before, frac0 = self._start or (time.monotonic(), 0, 0.0)
        secs = max(time.monotonic() - t0, 1e-9)
        rate = (self.passages - before) / secs
        frac = self.position.fraction() if self.position else None
        left = f", about {_duration(secs * (1 - frac) / (frac - frac0))} left" if frac and frac > frac0 else ""
        return f"{self.passages:,} passages, {rate:,.0f}/s{left}"

    def __call__(self, what: str | int) -> None:
        if isinstance(what, str) and what.startswith(("segment ", "resuming")) and (self.p is None or self.p.disable):
            err.print(f"  {escape(what if what.startswith('resuming') else what.split(':')[0] + ': ' + self._speed())}")
        if self.p is None:
            return
        if isinstance(what, int):  # passages a backend wrote
            self.p.update(self.read_task, advance=what, note="")
        elif what.startswith("encoding"):
            total = int(what.split()[1])
            self.enc_task = self.p.add_task("encoding passages", total=total, note="")
        else:
            self.p.update(self.read_task, note=what)

    def advance_encoding(self, n: int) -> None:
        if self.p is not None and self.enc_task is not None:
            self.p.advance(self.enc_task, n)

    def read(self, n_passages: int) -> None:
        if self._start is None:
            self._start = (time.monotonic(), n_passages, (self.position.fraction() or 0.0) if self.position else 0.0)
        self.passages = n_passages
        now = time.monotonic()
        if self.p is None or now - self._shown < 0.5:
            return
        self._shown = now
        frac = self.position.fraction() if self.position else None
        done = {"completed": int(frac * _PERMILLE)} if frac is not None else {}
        self.p.update(self.read_task, note=self._speed(), **done)


_PERMILLE = 1000


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _print_write_summary(verb: str, store, report: ReadReport, secs: float) -> None:
    c = store.stats()
    terms = f" ({c['vocabulary']} terms)" if "vocabulary" in c else ""
    where = f"collection [bold]{escape(store.name)}[/] on {escape(store.uri)}" if getattr(store, "uri", None) else \
        f"index at {escape(store.name)}"
    err.print(f"{verb} → {where} now has [bold]{c['documents']}[/] documents, [bold]{c['passages']}[/] passages{terms} "
              f"in {secs:.1f}s; {report.summary()}")
    for e in report.skipped[:50]:
        err.print(f"  [yellow]skipped[/] {escape(str(e))}")
    if len(report.skipped) > 50:
        err.print(f"  … and {len(report.skipped) - 50} more")
    for note in report.notes + report.unfilterable_notes():
        err.print(f"  [yellow]note:[/] {escape(note)}")


def _encoder_config(dense: bool, model: str, query_model: Optional[str], backend: str, max_length: int) -> EncoderConfig | None:
    if not dense:
        return None
    return EncoderConfig(model=model, query_model=query_model, backend=parse_backend(backend), max_length=max_length)


ENCODER_BACKENDS = ("torch", "onnx", "onnx-int8", "static")


BACKEND_HELP = "Index backend: embedded (an index directory, default) or milvus (a collection on the Milvus at --uri)."


URI_HELP = "Milvus: a Milvus Lite file (*.db) or http(s)://host:19530 (standalone or cluster; https = TLS)."


TOKEN_HELP = "Milvus token ('user:password' or an API key); prefer $CAPR_MILVUS_TOKEN (command lines are visible in ps)."


MAX_DOC_HELP = "Refuse documents longer than this many characters (a bad record: --skip-bad skips it)."
CA_HELP = "Milvus TLS: PEM file of a private CA that signed the server certificate (with an https:// --uri)."


# The connection options of every command that reads or writes an index (one definition, see BackendOptions).
BACKEND_OPTION = typer.Option("embedded", "--backend", help=BACKEND_HELP + " INDEX_DIR is then the collection name.")
URI_OPTION = typer.Option(None, "--uri", help=URI_HELP)
TOKEN_OPTION = typer.Option(None, "--token", "--milvus-token", envvar="CAPR_MILVUS_TOKEN", help=TOKEN_HELP)
TLS_CA_OPTION = typer.Option(None, "--tls-ca", help=CA_HELP)


def split_backend(backend: str, encoder_backend: Optional[str]) -> tuple[str, str]:
    """(index backend, encoder backend). ``--backend`` names the index backend (embedded | milvus); before
    issue 7 it named the encoder on `capr index` and `capr eval`, so an encoder name there still means the
    encoder (the two sets of names do not overlap) and a note points to ``--encoder-backend``."""
    if backend in ENCODER_BACKENDS:
        if encoder_backend and encoder_backend != backend:
            raise CaprError(f"--backend {backend} (an encoder) conflicts with --encoder-backend {encoder_backend}")
        err.print(f"[yellow]note:[/] --backend {backend} names an encoder; it is now spelled --encoder-backend {backend} "
                  "(--backend is the index backend: embedded | milvus)")
        return "embedded", backend
    if backend not in ("embedded", "milvus"):
        raise CaprError(f"unknown --backend {backend!r}: index backends are embedded, milvus "
                        f"(encoders go to --encoder-backend: {', '.join(ENCODER_BACKENDS)})")
    return backend, encoder_backend or "torch"


def backend_options(backend: str, uri: Optional[str], token: Optional[str], tls_ca: Optional[Path],
                    encoder_backend: Optional[str] = None, lock_wait_s: float = 0.0) -> BackendOptions:
    """The connection options every command shares (the encoder backend rides along for the old spelling)."""
    store_backend, enc_backend = split_backend(backend, encoder_backend)
    opts = BackendOptions(backend=store_backend, uri=uri, token=token, tls_ca=tls_ca, lock_wait_s=lock_wait_s)
    opts.encoder_backend = enc_backend
    return opts


def write_to_store(store, documents: Iterable, label: str, report: ReadReport | None = None, quiet: bool = False,
                   max_doc_chars: int = DEFAULT_MAX_DOC_CHARS, source: Path | None = None) -> float:
    """Adds documents to any store with a progress display (of how far ``source`` has been read, when given);
    returns the seconds it took."""
    t0 = time.time()
    position = SourcePosition(source) if source is not None and Path(source).is_file() else None
    with (_progress(counted=position is None) if not quiet else nullcontext()) as progress:
        store.add(documents, progress=_WriteProgress(progress, label, position), report=report,
                  max_doc_chars=max_doc_chars)
    return time.time() - t0


def _parse_filters(filters: list[str]) -> list:
    """--filter clauses: FIELD=VALUE, FIELD!=VALUE, FIELD>=VALUE (<=, >, <), FIELD in (A, B) (capr.filters)."""
    from capr.filters import parse_filters

    return parse_filters(filters)


def _open_cdv_store(store, model_dir: Path):
    """The store's CDV vectors under this model (computed now for documents that have none yet), kept beside the
    embedded index (the only backend with whole documents)."""
    if Capability.documents not in store.capabilities:
        raise QueryError(f"--cdv needs the '{Capability.documents.value}' capability (whole documents), "
                         f"which the {store.backend.value} backend does not have")
    index = store.index
    from capr.cdv import CDVModel
    from capr.cdv.store import CDVStore

    model = CDVModel.load(model_dir)
    with _progress(transient=True) as p:
        task = p.add_task("CDV document vectors", total=None, note="")

        def tick(done: int, total: int) -> None:
            p.update(task, completed=done, total=total)

        return CDVStore.open(index, model, progress=tick)


def demo_corpus_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("capr") / "demo" / "corpus"))
