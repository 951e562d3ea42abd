"""Readers beside writers, writers beside writers, and writers that die: what each sees (issue 37).

Every test runs real processes on a real index directory: a writer process committing in a loop while this
process opens and searches, a reader process holding a generation while this process merges it away, `capr`
commands waiting for the writer lock, SIGTERM and SIGKILL mid-write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from capr.errors import CaprError
from capr.index import IndexWriter, build_index, compact_index, load_index
from capr.index.segment import SEGMENTS
from capr.records import Document
from capr.search import search


def _docs(n: int, start: int = 0) -> list[Document]:
    return [Document(f"d{i}", f"Note {i}", f"ASSESSMENT: patient {i} has gout and atrial fibrillation. "
                     f"PLAN: colchicine {i % 7} mg, apixaban, follow up in {i % 9} weeks.") for i in range(start, start + n)]


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}


def _capr(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "capr", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), **kw)


def _leftovers(root: Path) -> list[str]:
    names = [p.name for p in root.iterdir()] if root.is_dir() else []
    if (root / SEGMENTS).is_dir():
        names += [p.name for p in (root / SEGMENTS).iterdir()]
    return [n for n in names if ".tmp-" in n or n.startswith(".trash-")]


# ------------------------------------------------------------------ readers beside a writer
_WRITER_LOOP = textwrap.dedent("""
    import sys, time
    from capr.index import IndexWriter
    from capr.records import Document
    root, seconds = sys.argv[1], float(sys.argv[2])
    end, i = time.time() + seconds, 0
    while time.time() < end:
        with IndexWriter(root, mode="update") as w:  # each commit merges small segments and drops old ones
            w.add(Document(f"w{i % 25}", f"Note w{i}", f"ASSESSMENT: gout flare {i}. PLAN: colchicine and apixaban."))
        i += 1
    print(i)
""")


def test_readers_never_see_false_damage_while_a_writer_commits(tmp_path):
    """A reader that chose a generation a writer then deletes opens the new one instead: no search reports a
    damaged index while the index is fine (before: `the index is damaged: gen-…/live/seg-….npy: missing`)."""
    root = tmp_path / "idx"
    build_index(_docs(40), root)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER_LOOP, str(root), "6"], stdout=subprocess.PIPE, text=True,
                              env=_env())
    errors, opened = [], 0
    try:
        while writer.poll() is None:
            try:
                index = load_index(root)
                time.sleep(0.1)  # a reader that does more before it searches (a CLI loading its models)
                hits = search(index, "gout colchicine", k=5)
                [h.passage.text for h in hits]  # stored records: read lazily from the segments
                index.close()
                opened += 1
            except CaprError as e:
                errors.append(str(e))
    finally:
        commits = int(writer.communicate()[0] or 0)
    assert commits >= 5 and opened >= 5, (commits, opened)
    assert errors == []
    assert load_index(root).counts["documents"] == 40 + min(commits, 25)


_HOLDING_READER = textwrap.dedent("""
    import sys
    from capr.index import load_index
    from capr.search.searcher import search
    index = load_index(sys.argv[1])  # opened, nothing searched yet: its segments' files are read on first use
    print(index.gen.name, flush=True)
    sys.stdin.readline()
    hits = search(index, "gout colchicine", k=3)
    print(" ".join(h.pid for h in hits), flush=True)
""")


def test_a_generation_a_reader_holds_is_kept_until_it_lets_go(tmp_path):
    """Another process reading generation N keeps N and its segments on disk through a compaction that makes
    them obsolete; the next write after that reader is gone deletes them."""
    root = tmp_path / "idx"
    build_index(_docs(10), root)
    for start in (10, 20):
        with IndexWriter(root, mode="update", merge_policy=None) as w:
            for d in _docs(10, start):
                w.add(d)
    reader = subprocess.Popen([sys.executable, "-c", _HOLDING_READER, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    held = reader.stdout.readline().strip()
    assert held == load_index(root).gen.name
    held_segments = load_index(root).manifest["segments"]
    compacted = compact_index(root)  # one new segment: every segment the reader's generation names is obsolete
    assert compacted.gen.name != held and len(compacted.segments) == 1
    assert (root / held).is_dir() and all((root / SEGMENTS / s).is_dir() for s in held_segments)
    out, err = reader.communicate("go\n", timeout=120)
    assert reader.returncode == 0, err
    assert len(out.split()) == 3
    with IndexWriter(root, mode="update") as w:
        w.add(_docs(1, 100)[0])
    assert not (root / held).exists() and not any((root / SEGMENTS / s).exists() for s in held_segments)
    assert sorted(p.name for p in (root / SEGMENTS).iterdir()) == load_index(root).manifest["segments"]


# ------------------------------------------------------------------ writers beside a writer
def test_cli_writers_wait_for_the_lock(tmp_path):
    """`capr add` waits for another writer (--wait), succeeds once it is done, and names what it waited for
    when it gives up."""
    root = tmp_path / "idx"
    build_index(_docs(5), root)
    batch = tmp_path / "more.jsonl"
    batch.write_text("".join(json.dumps({"id": f"m{i}", "text": f"PLAN: metformin {i} mg."}) + "\n" for i in range(3)))
    holder = IndexWriter(root, mode="update")
    try:
        t0 = time.monotonic()
        gave_up = _capr("add", str(root), str(batch), "--wait", "1")
        _, err = gave_up.communicate(timeout=120)
        assert gave_up.returncode == 2 and time.monotonic() - t0 >= 1.0
        assert f"another process is writing this index (pid {os.getpid()}); gave up after waiting 1 s" in err
        assert err.count("\n") == 1, err
        waiting = _capr("add", str(root), str(batch), "--wait", "120")
        time.sleep(1.5)
        assert waiting.poll() is None  # still waiting
        holder.add(_docs(1, 50)[0])
        holder.commit()
    finally:
        holder.abort()
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    index = load_index(root)
    assert index.counts["documents"] == 9  # both writes: neither lost the other's
    assert all(index.has_document(d) for d in ("d50", "m0", "m2"))


def test_an_add_that_waited_counts_only_its_own_documents(tmp_path):
    """The summary of a `capr add` that waited for another writer counts its own new and replacing documents
    against the generation it updated, not the other writer's documents as its own."""
    root = tmp_path / "idx"
    build_index(_docs(5), root)
    batch = tmp_path / "more.jsonl"
    batch.write_text("".join(json.dumps({"id": d, "text": f"PLAN: metformin {d}."}) + "\n" for d in ("d1", "m0", "m1")))
    holder = IndexWriter(root, mode="update")
    try:
        waiting = _capr("add", str(root), str(batch), "--wait", "120")
        time.sleep(1.5)
        assert waiting.poll() is None  # still waiting
        for doc in _docs(2, 50):
            holder.add(doc)
        holder.commit()
    finally:
        holder.abort()
    _, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert "added 3 document(s) (2 new, 1 replacing the same id)" in err, err
    assert load_index(root).counts["documents"] == 9


def test_two_cli_adds_at_once_both_succeed(tmp_path):
    root = tmp_path / "idx"
    build_index(_docs(5), root)
    procs = []
    for k in range(2):
        batch = tmp_path / f"b{k}.jsonl"
        batch.write_text("".join(json.dumps({"id": f"b{k}-{i}", "text": f"PLAN: drug {k} {i}."}) + "\n" for i in range(20)))
        procs.append(_capr("add", str(root), str(batch)))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert load_index(root).counts["documents"] == 45


# ------------------------------------------------------------------ writers that die
def _big_corpus(path: Path, n: int = 60000) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"n{i}", "text": f"ASSESSMENT: patient {i} has gout. PLAN: colchicine, {i % 9} weeks."}) + "\n")
    return path


def _wait_mid_write(proc: subprocess.Popen, root: Path) -> None:
    deadline = time.time() + 120
    while time.time() < deadline and not _leftovers(root) and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None, "the write finished before it could be stopped; make the input bigger"


def test_sigterm_during_index_is_as_clean_as_ctrl_c(tmp_path):
    """SIGTERM mid-write: the write is abandoned (exit 143, one line), the new folder removed whole — no LOCK, no
    `.seg-*.tmp-*` — and into an existing index, the previous generation stays current with nothing left over."""
    big = _big_corpus(tmp_path / "big.jsonl")
    fresh = tmp_path / "fresh"
    proc = _capr("index", "--lexical-only", str(big), "--out", str(fresh))
    _wait_mid_write(proc, fresh)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "terminated" in err and "Traceback" not in err, err
    assert not fresh.exists()

    root = tmp_path / "idx"
    build_index(_docs(5), root)
    before = load_index(root).gen.name
    proc = _capr("index", "--lexical-only", str(big), "--out", str(root), "--replace")
    _wait_mid_write(proc, root)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143
    assert load_index(root).gen.name == before and not _leftovers(root)
    assert sorted(p.name for p in (root / SEGMENTS).iterdir()) == load_index(root).manifest["segments"]


def test_the_analysis_process_ends_quietly_when_the_writer_dies_in_the_middle_of_a_message():
    """A writer killed while it sends a batch of texts leaves half a message in the pipe: the analysis process ends
    cleanly (exit 0), not with a traceback that would reach the user's terminal after the one-line "terminated"."""
    import multiprocessing
    import struct

    from capr.index.analysis import _serve
    from capr.text.analyzer import AnalyzerConfig

    ctx = multiprocessing.get_context("spawn")  # as the writer starts it
    for cut in ("header", "body"):
        writer, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, AnalyzerConfig().to_dict()), daemon=True)
        proc.start()
        child.close()
        writer.send(["a first batch of text"])
        partial = struct.pack("!i", 1000)[:2] if cut == "header" else struct.pack("!i", 1000) + b"\x80\x04"
        os.write(writer.fileno(), partial)
        writer.close()
        proc.join(timeout=60)
        assert proc.exitcode == 0, (cut, proc.exitcode)


def test_a_sigterm_landing_in_a_finalizer_is_not_lost(tmp_path):
    """Python drops an exception raised in a finalizer (an index releases its generation pin in one): a SIGTERM
    that lands there still ends the process, a moment later, instead of letting it go on as if none had come."""
    root = tmp_path / "idx"
    build_index(_docs(5), root)
    script = textwrap.dedent(f"""
        import sys, time, weakref
        from capr.cli.common import terminate_cleanly
        from capr.index import load_index
        from capr.search.searcher import search
        terminate_cleanly()
        class Holder: pass
        holder = Holder()
        weakref.finalize(holder, lambda: (print("in finalizer", flush=True), time.sleep(3)))
        del holder
        for _ in range(100):  # work after the finalizer: must not happen
            index = load_index({str(root)!r})
            search(index, "gout", k=3)
            index.close()
            print("went on", flush=True)
            time.sleep(0.1)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert proc.stdout.readline().strip() == "in finalizer"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Terminated" in err, (proc.returncode, err[-2000:])
    assert "went on" not in out


def _sigterm_when_ready(script: str) -> tuple[subprocess.CompletedProcess, float]:
    """Runs ``script``, sends SIGTERM once it prints "ready", and returns how it ended and how long that took."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.monotonic() - t0


def test_a_sigterm_turned_into_another_error_is_reported_as_the_termination():
    """Code running when SIGTERM lands may turn the Terminated into its own error (an index being loaded said
    "the index is damaged"): a command then says "terminated" (exit 143), not that error."""
    proc, _ = _sigterm_when_ready("""
        import time
        from capr.cli.common import _run_guarded, terminate_cleanly
        from capr.errors import IndexError_
        terminate_cleanly()
        def load():
            try:
                print("ready", flush=True)
                time.sleep(30)
            except BaseException as e:  # as a C extension may: any exception becomes its own
                raise IndexError_(f"idx: the index is damaged: manifest.json: not a capr manifest ({e!r})")
        try:
            _run_guarded(load)
        except SystemExit:
            raise
        except BaseException as e:  # typer.Exit, as the app ends a command with it
            raise SystemExit(getattr(e, "exit_code", 1))
    """)
    assert proc.returncode == 143 and "terminated" in proc.stderr and "damaged" not in proc.stderr, proc.stderr


def test_a_process_that_goes_on_after_sigterm_is_ended_after_the_grace_period():
    """Whatever swallows the Terminated, the process ends TERMINATE_GRACE_S after the signal, as SIG_DFL ends it."""
    proc, took = _sigterm_when_ready("""
        import time
        import capr.cli.common as common
        common.TERMINATE_GRACE_S = 2.0
        common.terminate_cleanly()
        try:  # "ready" inside: the signal may come before the sleep starts
            print("ready", flush=True)
            time.sleep(30)
        except KeyboardInterrupt:
            pass
        print("went on", flush=True)
        time.sleep(30)
        print("still here", flush=True)
    """)
    assert proc.returncode == -signal.SIGTERM and "went on" in proc.stdout and "still here" not in proc.stdout
    assert 1.5 < took < 20


def test_a_pin_released_by_the_collector_inside_a_locked_section_does_not_deadlock(tmp_path):
    """A snapshot's pin is released by a finalizer, and the cyclic collector may run it at any allocation, also in
    the thread that holds the pins' lock (as inside pin_generation): the release waits for that section's end
    instead of for ever (a `capr serve` stopped answering in the soak that way)."""
    script = textwrap.dedent(f"""
        import gc
        from capr.index import build_index, load_index
        from capr.index import directory
        from capr.records import Document
        build_index([Document("a", "", "gout and colchicine")], {str(tmp_path / "idx")!r})
        index = load_index({str(tmp_path / "idx")!r})
        index.cycle = index  # garbage only the cyclic collector frees
        del index
        gc.disable()
        with directory._pins_locked():
            gc.collect()  # the finalizer runs here, in the lock holder's own thread
            print("pinned inside", len(directory._pins))
        print("pinned after", len(directory._pins))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert proc.returncode == 0 and proc.stdout.split("\n")[:2] == ["pinned inside 1", "pinned after 0"], proc.stderr


def test_what_a_killed_writer_leaves_is_harmless(tmp_path):
    """kill -9 leaves a LOCK (with the dead writer's pid) and a half-written segment: the next writer takes the
    lock at once and deletes the leftovers, even when the dead writer's pid now belongs to a live process."""
    big = _big_corpus(tmp_path / "big.jsonl")
    root = tmp_path / "idx"
    build_index(_docs(5), root)
    proc = _capr("add", str(root), str(big))
    _wait_mid_write(proc, root)
    proc.kill()
    proc.wait()
    assert (root / "LOCK").read_text().strip() == str(proc.pid) and _leftovers(root)
    reused = root / SEGMENTS / ".seg-000099.tmp-1"  # pid 1 is alive: a pid the kernel gave to someone else since
    reused.mkdir()
    t0 = time.monotonic()
    with IndexWriter(root, mode="update") as w:
        w.add(_docs(1, 7)[0])
    assert time.monotonic() - t0 < 30
    assert not _leftovers(root)
    assert load_index(root).counts["documents"] == 6


def test_an_index_built_again_under_the_same_path_is_pinned_afresh(tmp_path):
    """A snapshot of a deleted index folder still alive in this process must not stand in for a pin of the new
    index's generation of the same name: another process reading that one keeps it through this process's
    compaction."""
    import shutil

    root = tmp_path / "idx"
    build_index(_docs(10), root)
    old = load_index(root)  # kept alive across the rebuild
    shutil.rmtree(root)
    build_index(_docs(10, 10), root)  # gen-000001 again: the old snapshot's pin names a deleted file
    reader = subprocess.Popen([sys.executable, "-c", _HOLDING_READER, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    held = reader.stdout.readline().strip()
    assert held == old.gen.name
    with IndexWriter(root, mode="update") as w:
        w.add(_docs(1, 20)[0])
    compact_index(root)
    assert (root / held).is_dir()
    out, err = reader.communicate("go\n", timeout=120)
    assert reader.returncode == 0 and len(out.split()) == 3, err
    old.close()


@pytest.mark.parametrize("cut", [KeyboardInterrupt, PermissionError])
def test_a_commit_cut_short_after_current_moved_keeps_its_segments(tmp_path, monkeypatch, cut):
    """Ctrl-C or SIGTERM (or a failed unlink) while a commit deletes what it made obsolete: CURRENT already names
    the new generation, so the write stands — its new and merged segments are not removed as an aborted
    write's would be (the soak found `segments/seg-…: missing` after a SIGTERM there)."""
    from capr.index import directory as dirs

    root = tmp_path / "idx"
    build_index(_docs(5), root)
    with IndexWriter(root, mode="update") as w:
        w.add(_docs(1, 5)[0])

    def interrupted(*args, **kwargs):
        raise cut()

    writer = IndexWriter(root, mode="update")  # opened before the clean-up breaks
    writer.add(_docs(1, 6)[0])
    monkeypatch.setattr(dirs, "remove_stale", interrupted)
    if cut is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            writer.commit()
    else:
        writer.commit()  # the write is committed: said so, not reported as failed
    monkeypatch.undo()
    index = load_index(root)
    index.check_files()
    assert index.counts["documents"] == 7 and search(index, "gout")
    with IndexWriter(root, mode="update") as w:  # and the lock was let go
        w.add(_docs(1, 7)[0])
    assert not _leftovers(root)
