"""The half of building a segment that needs no more than plain data about each document: storing it (the compressed
document store) and analysing its passages (term frequencies), in :class:`SegmentSink`."""

from __future__ import annotations

import array
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from capr.corpus.passages import index_text
from capr.index.docstore import DocRecord, DocStoreWriter
from capr.index.lexical import TermMatrix
from capr.index.postings import LEXICAL, write_postings
from capr.text.analyzer import Analyzer

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
