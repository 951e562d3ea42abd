"""Significance of a difference between two systems measured on the same queries."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def paired_randomisation_p(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, rounds: int = 10000,
                           seed: int = 0) -> float:
    """Two-sided paired randomisation test: the share of ``rounds`` random sign flips of the per-query differences
    whose mean is at least as far from 0 as the observed mean (Smucker et al., 2007)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if not len(d) or not np.any(d):
        return 1.0
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(rounds, len(d)))
    observed = abs(d.mean())
    return float((np.abs((signs * d).mean(axis=1)) >= observed - 1e-12).mean())
