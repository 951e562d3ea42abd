"""Views over several segments: one term matrix with a shared vocabulary, one column per field."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from capr.index.lexical import TermMatrix
from capr.index.store import Column


def merge_matrices(mats: Sequence[TermMatrix], live: np.ndarray) -> TermMatrix:
    if len(mats) == 1:
        m = mats[0]
        return TermMatrix(m.vocab, m.indptr, m.indices, m.tf, m.doc_len, live)
    vocab: dict[str, int] = {}
    rows, cols, tfs, lens = [], [], [], []
    offset = 0
    for m in mats:
        terms = sorted(m.vocab, key=m.vocab.__getitem__)
        remap = np.fromiter((vocab.setdefault(t, len(vocab)) for t in terms), dtype=np.int64, count=len(terms))
        local_cols = np.repeat(np.arange(len(terms), dtype=np.int64), np.diff(np.asarray(m.indptr)))
        cols.append(remap[local_cols])
        rows.append(np.asarray(m.indices, dtype=np.int64) + offset)
        tfs.append(np.asarray(m.tf))
        lens.append(np.asarray(m.doc_len))
        offset += len(m.doc_len)
    csc = sp.csc_matrix((np.concatenate(tfs), (np.concatenate(rows), np.concatenate(cols))), shape=(offset, len(vocab)))
    csc.sort_indices()
    return TermMatrix(vocab, csc.indptr.astype(np.int64), csc.indices.astype(np.int32), csc.data.astype(np.float32), np.concatenate(lens), live)


def merge_columns(cols: Sequence[Column | None], sizes: Sequence[int]) -> Column:
    if len(cols) == 1 and cols[0] is not None:
        return cols[0]
    values: list = []
    index: dict[str, int] = {}

    def code(v) -> int:
        k = Column._key(v) if v is not None else "\x00missing"
        if k not in index:
            index[k] = len(values)
            values.append(v)
        return index[k]

    parts = []
    for col, n in zip(cols, sizes):
        if col is None:
            parts.append(np.full(n, code(None), dtype=np.int32))
        else:
            remap = np.asarray([code(v) for v in col.values], dtype=np.int32)
            parts.append(remap[np.asarray(col.codes)])
    return Column(values, np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32))
