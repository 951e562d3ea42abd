"""BM25 as capr scores it, the one definition: Lucene's variant (bm25s' ``lucene`` method), without the constant
(k1 + 1) numerator, which changes no ranking.

    idf(t)      = ln(1 + (N − df + 0.5) / (df + 0.5))
    norm(p)     = k1 · (1 − b + b · dl / avgdl)
    score(t, p) = idf(t) · tf / (tf + norm(p))

The index scores passages with it (one matrix or a generation's segments), evidence scores a passage's sentences,
and sentence selection ranks a long passage's sentences; each passes arrays or scalars, and the arithmetic is the
same expression in the same order everywhere, so scores agree to the last bit wherever the inputs do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(slots=True)
class BM25Params:
    k1: float = 1.2
    b: float = 0.75


def idf(n: float, df: Any) -> Any:
    """Lucene's idf of terms held by ``df`` of ``n`` passages: float32 for arrays, float for scalars."""
    if isinstance(df, np.ndarray):
        return np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def length_norm(doc_len: Any, avgdl: float, params: BM25Params) -> Any:
    """k1 · (1 − b + b · dl / avgdl): float32 for arrays of lengths, float for one length."""
    k1, b = params.k1, params.b
    if isinstance(doc_len, np.ndarray):
        return (k1 * (1.0 - b + b * doc_len / avgdl)).astype(np.float32)
    return k1 * (1.0 - b + b * doc_len / avgdl)


def term_score(term_idf: Any, tf: Any, norm: Any) -> Any:
    """One term's contribution: idf · tf / (tf + norm) (arrays of postings or scalars)."""
    return term_idf * tf / (tf + norm)


__all__ = ["BM25Params", "idf", "length_norm", "term_score"]
