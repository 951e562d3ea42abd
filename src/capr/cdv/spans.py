"""Free passage boundaries from sentence scores: a span opens at a sentence whose score reaches θ_open and grows
while scores stay at or above θ_close — answers are not bound to the document's own sections. `free_spans` cuts a
whole document into spans; `grow_span` grows the span around one seed sentence (search: the best sentence of a
retrieved passage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass
class BoundaryConfig:
    open: float = 0.8  # θ_open
    close: float = 0.4  # θ_close (≤ θ_open); 0.4 was best on MedQuAD-train dev documents (experiments/cdv_boundaries_dev.py)
    # relative: thresholds apply to scores min-max scaled within the document (0 = its worst sentence, 1 = its
    # best), so they carry over between models whose cosines live on different scales; absolute: raw scores
    relative: bool = True

    def __post_init__(self) -> None:
        if self.close > self.open:
            raise ValueError(f"θ_close ({self.close}) must not exceed θ_open ({self.open})")


@dataclass
class Span:
    first: int  # sentence indices, end exclusive
    end: int
    score: float  # mean raw sentence score over the span


def scaled(scores: np.ndarray) -> np.ndarray:
    lo, hi = float(np.min(scores)), float(np.max(scores))
    return (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)


def free_spans(scores: Sequence[float] | np.ndarray, config: BoundaryConfig | None = None) -> list[Span]:
    """Spans in document order."""
    config = config or BoundaryConfig()
    raw = np.asarray(scores, dtype=np.float64)
    if raw.size == 0:
        return []
    s = scaled(raw) if config.relative else raw
    spans, i, n = [], 0, len(s)
    while i < n:
        if s[i] >= config.open:
            j = i + 1
            while j < n and s[j] >= config.close:
                j += 1
            # a span opened mid-way may start a little earlier: take preceding sentences above θ_close
            k = i
            while k > 0 and s[k - 1] >= config.close and (not spans or k - 1 >= spans[-1].end):
                k -= 1
            spans.append(Span(k, j, float(raw[k:j].mean())))
            i = j
        else:
            i += 1
    return spans


def grow_span(scores: Sequence[float] | np.ndarray, seed: int, config: BoundaryConfig | None = None) -> Span:
    """The span around sentence `seed` (a retrieved passage's best sentence): it stands alone unless it reaches
    θ_open, and then extends to both sides while neighbours stay at or above θ_close — across section borders."""
    config = config or BoundaryConfig()
    raw = np.asarray(scores, dtype=np.float64)
    s = scaled(raw) if config.relative else raw
    first, end = seed, seed + 1
    if s[seed] >= config.open:
        while first > 0 and s[first - 1] >= config.close:
            first -= 1
        while end < len(s) and s[end] >= config.close:
            end += 1
    return Span(first, end, float(raw[first:end].mean()))


def char_f1(pred: tuple[int, int], gold: tuple[int, int]) -> float:
    """Character-overlap F1 of two [start, end) spans."""
    overlap = max(0, min(pred[1], gold[1]) - max(pred[0], gold[0]))
    if overlap == 0:
        return 0.0
    p = overlap / max(1, pred[1] - pred[0])
    r = overlap / max(1, gold[1] - gold[0])
    return 2 * p * r / (p + r)


__all__ = ["BoundaryConfig", "Span", "char_f1", "free_spans", "grow_span", "scaled"]
