"""The part of building a segment that needs no more than plain data about each document: storing it (the compressed
document store) and analysing its passages (term frequencies), in :class:`SegmentSink`. The analysis can run in a
child process beside the writer (:class:`CounterProcess`, `capr index` on a machine with two or more cores) while the
writer reads, admits, segments and stores the next documents; the files are the same either way."""

from __future__ import annotations

import array
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np

from capr.corpus.passages import index_text
from capr.errors import CaprError
from capr.index.docstore import DocRecord, DocStoreWriter
from capr.index.lexical import TermMatrix
from capr.index.postings import LEXICAL, write_postings
from capr.text.analyzer import Analyzer, AnalyzerConfig

_BATCH = 2048  # passage texts sent to the child process at once


class TermCounter:
    """Analyses passage texts one by one (each distinct word once per segment) and counts term frequencies at the
    end, vectorised: one (row, term) entry per word, summed by scipy's conversion to columns (a stable counting sort,
    so each term's rows come out ascending). Term ids are numbered in the order their first word comes, as analysing
    passage by passage and counting term by term numbers them."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self.vocab: dict[str, int] = {}
        self._word_ids: dict[str, int] = {}  # folded word → its term id, -1 for a stopword
        self._ids = array.array("i")  # every word's term id (-1: a stopword), passage after passage
        self._words = array.array("i")  # words per passage

    @property
    def n_passages(self) -> int:
        return len(self._words)

    def add(self, text: str) -> None:
        words = self.analyzer.folded_words(text)
        ids, wids = self._ids, self._word_ids
        at = len(ids)
        try:
            ids.extend(map(wids.__getitem__, words))
        except KeyError:  # words not seen yet in this segment: analyse them, in first-seen order
            del ids[at:]
            missing = [w for w in dict.fromkeys(words) if w not in wids]
            vocab = self.vocab
            for w, t in zip(missing, self.analyzer.analyze_unseen(missing)):
                wids[w] = -1 if t is None else vocab.setdefault(t, len(vocab))
            ids.extend(map(wids.__getitem__, words))
        self._words.append(len(words))

    def matrix(self) -> TermMatrix:
        n = self.n_passages
        ids = np.frombuffer(self._ids, dtype=np.int32)
        rows = np.repeat(np.arange(n, dtype=np.int32), np.frombuffer(self._words, dtype=np.int32))
        kept = ids >= 0
        rows, ids = rows[kept], ids[kept]
        doc_len = np.bincount(rows, minlength=n).astype(np.float32)
        import scipy.sparse as sp  # at build time only

        m = sp.coo_matrix((np.ones(len(ids), dtype=np.float32), (rows, ids)), shape=(n, len(self.vocab))).tocsc()
        m.sum_duplicates()
        m.sort_indices()
        return TermMatrix(self.vocab, m.indptr.astype(np.int64), m.indices.astype(np.int32, copy=False),
                          m.data.astype(np.float32, copy=False), doc_len)


class SegmentSink:
    """Stores the documents of one segment (capr.index.docstore) and analyses their passages' index texts (the
    passage, with its document's title in front when the index includes titles): here, or in the writer's
    :class:`CounterProcess` when it has one (the texts go to it in batches)."""

    def __init__(self, folder: Path, analyzer: Analyzer, include_title: bool,
                 process: "CounterProcess | None" = None) -> None:
        self.folder = Path(folder)
        self.store = DocStoreWriter(self.folder)
        self.process = process
        self.counter = TermCounter(analyzer) if process is None else None
        self.include_title = include_title

    def add(self, record: DocRecord) -> None:
        self.store.add(record)
        _doc_id, title, text, _meta, _sections, passages = record
        count = self.counter.add if self.counter is not None else self.process.add
        titled = self.include_title
        for _pid, _aspect, _heading, start, end, _sents in passages:
            count(index_text(title, text[start:end], titled))

    def finish(self) -> dict[str, int]:
        """Writes the document store and the postings into the folder; returns the store's stream sizes."""
        sizes = self.store.close()
        if self.counter is not None:
            write_postings(self.folder / LEXICAL, self.counter.matrix())
        else:
            self.process.finish(self.folder)
        return sizes

    def abort(self) -> None:
        self.store.abort()
        if self.process is not None:
            self.process.discard()


def _serve(conn: Any, analyzer_config: dict[str, Any]) -> None:
    """The child's loop: a list of texts is added to the segment being counted; a folder ends the segment (its
    postings written there, the passages counted answered); "discard" forgets it; None ends the child. An error goes
    back to the writer as text (an OSError as its parts: the writer reports it as its own)."""
    # Ctrl-C reaches the whole process group: the writer handles it (and ends this process), so it is not an error
    # to print here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    analyzer = Analyzer(AnalyzerConfig.from_dict(analyzer_config))
    counter = TermCounter(analyzer)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the writer is gone (killed, perhaps in the middle of a message): nothing to do
            return
        try:
            if msg is None:
                return
            if isinstance(msg, list):
                for text in msg:
                    counter.add(text)
                continue
            if msg != "discard":
                write_postings(Path(msg) / LEXICAL, counter.matrix())
                conn.send(("ok", counter.n_passages))
            counter = TermCounter(analyzer)
        except BaseException as e:  # noqa: BLE001 - said to the writer, which raises it there
            if isinstance(e, OSError):
                conn.send(("oserror", (e.errno, e.strerror, e.filename)))
            else:
                conn.send(("error", f"{type(e).__name__}: {e}"))
            return


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CounterProcess:
    """A child process that analyses and counts the passages of the segments a writer builds, one segment at a time,
    while the writer reads, admits, segments and stores the next documents: ``add(text)`` (sent in batches),
    ``finish(folder)`` writes the segment's postings there."""

    def __init__(self, analyzer_config: AnalyzerConfig) -> None:
        ctx = multiprocessing.get_context("spawn")  # not fork: the writer may run threads (a progress display)
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, analyzer_config.to_dict()), daemon=True,
                                 name="capr-analysis")
        self._proc.start()
        child.close()
        self._batch: list[str] = []

    def _send(self, msg: Any) -> None:
        try:
            self._conn.send(msg)
        except OSError:
            self._answer()  # the child stopped on an error: raise it, else say it ended
            raise CaprError("the analysis process ended unexpectedly") from None

    def _answer(self) -> Any:
        """The child's answer to a finished segment; the error it stopped on, raised here."""
        try:
            status, value = self._conn.recv()
        except (OSError, EOFError):
            raise CaprError("the analysis process ended unexpectedly") from None
        if status == "oserror":
            raise OSError(*value)
        if status != "ok":
            raise CaprError(f"analysing passages failed: {value}")
        return value

    def add(self, text: str) -> None:
        self._batch.append(text)
        if len(self._batch) >= _BATCH:
            self._send(self._batch)
            self._batch = []

    def finish(self, folder: Path) -> int:
        if self._batch:
            self._send(self._batch)
            self._batch = []
        self._send(str(folder))
        return int(self._answer())

    def discard(self) -> None:
        """Forgets the segment being counted (abandoned)."""
        self._batch = []
        try:
            self._conn.send("discard")
        except OSError:
            pass

    def close(self) -> None:
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._conn.close()
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
