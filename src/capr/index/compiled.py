"""BM25's scoring loop compiled with numba, for processes that live long enough to gain from it.

numpy scores a term's postings in several passes over temporaries (decode the gaps, gather the lengths, the
arithmetic, the scatter); the compiled loop reads each posting once, straight from the compact layout of
capr.index.postings. The arithmetic is numpy's, operation for operation in float32, so scores keep their bits.

numba is imported only by :func:`enable` — a service calls it at start — so a one-shot ``capr search`` does not
pay the import and compilation (a few hundred milliseconds) for the tens it would save. Without numba, or before
:func:`enable`, capr.index.scoring scores with numpy alone.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import numpy as np

log = logging.getLogger("capr.index")
_lock = threading.Lock()
_accumulate: Callable[..., None] | None = None
_sparse: tuple[Callable[..., int], Callable[..., None]] | None = None
_tried = False


def _compile() -> Callable[..., None]:
    from numba import njit

    @njit(cache=True, nogil=True)
    def accumulate(out: Any, first: int, gaps: Any, tf: Any, norm: Any, idf: Any) -> None:  # pragma: no cover
        row = first
        for i in range(tf.shape[0]):
            if i:
                row += gaps[i - 1]
            t = np.float32(tf[i])
            out[row] += idf * t / (t + norm[row])

    @njit(cache=True, nogil=True)
    def accumulate_touching(out: Any, first: int, gaps: Any, tf: Any, norm: Any, idf: Any, touched: Any,
                            n: int) -> int:  # pragma: no cover
        row = first
        for i in range(tf.shape[0]):
            if i:
                row += gaps[i - 1]
            if out[row] == 0.0:  # a term's score is > 0: a row is listed the first time a term adds to it
                touched[n] = row
                n += 1
            t = np.float32(tf[i])
            out[row] += idf * t / (t + norm[row])
        return n

    @njit(cache=True, nogil=True)
    def settle(best: Any, scratch: Any, touched: Any, n: int) -> None:  # pragma: no cover
        for i in range(n):
            row = touched[i]
            if scratch[row] > best[row]:
                best[row] = scratch[row]
            scratch[row] = 0.0

    return accumulate, accumulate_touching, settle


def enable() -> bool:
    """Compiles the loop (or loads it from numba's cache) for every layout a segment may have; True when it is
    in use from now on, False when numba is not installed."""
    global _accumulate, _sparse, _tried
    with _lock:
        if _accumulate is not None or _tried:
            return _accumulate is not None
        _tried = True
        try:
            kernel, touching, settle = _compile()
        except ImportError:
            return False
        try:
            out, norm = np.zeros(2, dtype=np.float32), np.ones(2, dtype=np.float32)
            best, touched = np.zeros(2, dtype=np.float32), np.zeros(4, dtype=np.int64)
            for gap_type in (np.uint8, np.uint16, np.uint32):
                for tf_type in (np.uint8, np.uint16, np.uint32):
                    # read-only, as a segment's memory-mapped arrays are: numba compiles per array type
                    gaps, tf = np.ones(1, dtype=gap_type), np.ones(2, dtype=tf_type)
                    gaps.setflags(write=False)
                    tf.setflags(write=False)
                    kernel(out, 0, gaps, tf, norm, np.float32(1.0))
                    out[:] = 0.0
                    settle(best, out, touched, touching(out, 0, gaps, tf, norm, np.float32(1.0), touched, 0))
        except Exception as e:  # noqa: BLE001 - numpy scores the same, only slower
            log.warning("the compiled BM25 loop did not compile (%s: %s); scoring with numpy", type(e).__name__, e)
            return False
        _accumulate, _sparse = kernel, (touching, settle)
        return True


def disable() -> None:
    """Back to numpy alone (tests compare the two)."""
    global _accumulate, _sparse, _tried
    with _lock:
        _accumulate, _sparse, _tried = None, None, False


def accumulator() -> Callable[..., None] | None:
    """``accumulate(out, first_row, gaps, tf, norm, idf)`` — adds one term's BM25 to ``out`` at its rows — once
    :func:`enable` succeeded, else None."""
    return _accumulate


def sparse_kernels() -> tuple[Callable[..., int], Callable[..., None]] | None:
    """``(accumulate_touching, settle)`` once :func:`enable` succeeded, else None.
    ``accumulate_touching(out, first_row, gaps, tf, norm, idf, touched, n) -> n``: :func:`accumulator`'s sum, and
    each row it makes nonzero appended to ``touched`` from ``n`` on; ``settle(best, scratch, touched, n)``: the
    larger of ``best`` and ``scratch`` into ``best`` at those rows, and ``scratch`` zeroed there again."""
    return _sparse


__all__ = ["accumulator", "disable", "enable", "sparse_kernels"]
