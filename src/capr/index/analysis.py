"""The half of building a segment that needs no more than plain data about each document — storing it (the compressed
document store) and analysing its passages (term frequencies) — so that another process can do it: :class:`SegmentSink`
does it in the writer's process, :class:`SinkProcess` in a child process beside it (`capr index` on a machine with two
or more cores), while the writer reads, admits and segments the next documents. Both write the same files."""

from __future__ import annotations

import array
import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from capr.corpus.passages import index_text
from capr.errors import CaprError
from capr.index.docstore import DocRecord, DocStoreWriter
from capr.index.lexical import TermMatrix
from capr.index.postings import LEXICAL, write_postings
from capr.text.analyzer import Analyzer, AnalyzerConfig

_BATCH = 512  # documents sent to the child process at once


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
        m = sp.coo_matrix((np.ones(len(ids), dtype=np.float32), (rows, ids)), shape=(n, len(self.vocab))).tocsc()
        m.sum_duplicates()
        m.sort_indices()
        return TermMatrix(self.vocab, m.indptr.astype(np.int64), m.indices.astype(np.int32, copy=False),
                          m.data.astype(np.float32, copy=False), doc_len)


class SegmentSink:
    """Stores the documents of one segment (capr.index.docstore) and analyses their passages' index texts (the
    passage, with its document's title in front when the index includes titles)."""

    def __init__(self, folder: Path, analyzer: Analyzer, include_title: bool) -> None:
        self.folder = Path(folder)
        self.store = DocStoreWriter(self.folder)
        self.counter = TermCounter(analyzer)
        self.include_title = include_title

    def add(self, record: DocRecord) -> None:
        self.store.add(record)
        _doc_id, title, text, _meta, _sections, passages = record
        count, titled = self.counter.add, self.include_title
        for _pid, _aspect, _heading, start, end, _sents in passages:
            count(index_text(title, text[start:end], titled))

    def finish(self) -> dict[str, int]:
        """Writes the document store and the postings into the folder; returns the store's stream sizes."""
        sizes = self.store.close()
        write_postings(self.folder / LEXICAL, self.counter.matrix())
        return sizes

    def abort(self) -> None:
        self.store.abort()


def _serve(conn: Any, analyzer_config: dict[str, Any], include_title: bool) -> None:
    """The child's loop: ("open", folder) starts a segment, a list of document records is added to it, "finish" writes
    it and answers its sizes, None ends the child. An error goes back to the writer as text."""
    analyzer = Analyzer(AnalyzerConfig.from_dict(analyzer_config))
    sink: SegmentSink | None = None
    while True:
        try:
            msg = conn.recv()
        except EOFError:  # the writer is gone (killed): nothing more to do
            return
        try:
            if msg is None:
                return
            if isinstance(msg, list):
                for record in msg:
                    sink.add(record)
            elif msg[0] == "open":
                sink = SegmentSink(Path(msg[1]), analyzer, include_title)
            else:
                conn.send(("ok", sink.finish()))
                sink = None
        except BaseException as e:  # noqa: BLE001 - said to the writer, which raises it there
            if sink is not None:
                sink.abort()
            if isinstance(e, OSError):  # a full disk, a read-only folder: the writer reports it as its own
                conn.send(("oserror", (e.errno, e.strerror, e.filename)))
            else:
                conn.send(("error", f"{type(e).__name__}: {e}"))
            return


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class SinkProcess:
    """A child process building the sink of each segment a writer builds, one segment at a time: ``open(folder)``,
    ``add(record)`` (sent in batches), ``finish()``."""

    def __init__(self, analyzer_config: AnalyzerConfig, include_title: bool) -> None:
        ctx = multiprocessing.get_context("spawn")  # not fork: the writer may run threads (a progress display)
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, analyzer_config.to_dict(), include_title), daemon=True,
                                 name="capr-segment-sink")
        self._proc.start()
        child.close()
        self._batch: list[DocRecord] = []

    def _send(self, msg: Any) -> None:
        try:
            self._conn.send(msg)
        except OSError:
            self._answer()  # the child stopped on an error: raise it, else say it ended
            raise CaprError("the process storing and analysing documents ended unexpectedly") from None

    def _answer(self) -> Any:
        """The child's answer to "finish" (its stream sizes); the error it stopped on, raised here."""
        try:
            status, value = self._conn.recv()
        except (OSError, EOFError):
            raise CaprError("the process storing and analysing documents ended unexpectedly") from None
        if status == "oserror":
            raise OSError(*value)
        if status != "ok":
            raise CaprError(f"storing and analysing documents failed: {value}")
        return value

    def open(self, folder: Path) -> None:
        self._send(("open", str(folder)))

    def add(self, record: DocRecord) -> None:
        self._batch.append(record)
        if len(self._batch) >= _BATCH:
            self._send(self._batch)
            self._batch = []

    def finish(self) -> dict[str, int]:
        if self._batch:
            self._send(self._batch)
            self._batch = []
        self._send(("finish",))
        return self._answer()

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
