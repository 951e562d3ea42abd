"""Fusion of ranked lists (BM25 and dense): reciprocal-rank fusion or weighted min-max-normalised scores."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import numpy as np

Ranked = tuple[np.ndarray, np.ndarray]  # (rows, scores), any order


class FusionMethod(str, Enum):
    rrf = "rrf"
    weighted = "weighted"


@dataclass(slots=True)
class FusionConfig:
    method: FusionMethod = FusionMethod.rrf
    rrf_k: int = 60
    weights: tuple[float, ...] = (0.5, 0.5)  # per input list, for ``weighted`` (and RRF)
    depth: int = 100  # how many results each retriever contributes


def recorded_fusion(recorded: dict | None) -> FusionConfig | None:
    """The fusion an index records (``manifest.dense.fusion``: {"method", "weights"}), or None."""
    if not recorded:
        return None
    return FusionConfig(FusionMethod(recorded.get("method", "rrf")), weights=tuple(recorded["weights"]))


def _ranks(scores: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    # Equal scores rank by row id (insertion order), not by the order a retriever happened to return
    # them in: fusion is then deterministic, and the same on every index backend.
    order = np.argsort(-scores, kind="stable") if rows is None else np.lexsort((rows, -scores))
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


def _minmax(x: np.ndarray) -> np.ndarray:
    if len(x) == 0:
        return x.astype(np.float64)
    lo, hi = float(x.min()), float(x.max())
    return np.ones(len(x)) if hi == lo else (x - lo) / (hi - lo)


def fuse(lists: Sequence[Ranked], config: FusionConfig | None = None) -> Ranked:
    """Union of the rows of all lists with fused scores. A row missing from a list gets nothing from it
    (RRF) or that list's minimum, 0 after normalisation (weighted)."""
    config = config or FusionConfig()
    weights = config.weights if len(config.weights) == len(lists) else (1.0,) * len(lists)
    all_rows = np.unique(np.concatenate([r for r, _ in lists])) if lists else np.zeros(0, dtype=np.int64)
    fused = np.zeros(len(all_rows), dtype=np.float64)
    for (rows, scores), w in zip(lists, weights):
        if len(rows) == 0:
            continue
        pos = np.searchsorted(all_rows, rows)
        if FusionMethod(config.method) is FusionMethod.rrf:
            fused[pos] += w / (config.rrf_k + _ranks(np.asarray(scores, dtype=np.float64), np.asarray(rows)))
        else:
            fused[pos] += w * _minmax(np.asarray(scores, dtype=np.float64))
    return all_rows.astype(np.int64), fused.astype(np.float32)


def fuse_aligned(score_lists: Sequence[np.ndarray], config: FusionConfig | None = None) -> np.ndarray:
    """Fusion when every list scores the same candidates (a re-ranking pool)."""
    rows = np.arange(len(score_lists[0]), dtype=np.int64)
    _, fused = fuse([(rows, np.asarray(s)) for s in score_lists], config)
    return fused
