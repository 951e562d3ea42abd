"""CAPR training: bi-, poly- and cross-encoders from self-supervised labels, on the one training loop
(capr.train.loop) that the CDV, TSDAE and case cross-encoder trainers share.

The names below load on first use: commands that only check their options against ``capr.train.args`` (stats,
labels, eval) must not import torch through this package."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {"KIND_DEFAULTS": "capr.train.args", "ModelKind": "capr.train.args", "TrainArgs": "capr.train.args",
          "LoopArgs": "capr.train.loop", "TrainingLoop": "capr.train.loop", "TrainResult": "capr.train.loop",
          "train": "capr.train.trainer"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'capr.train' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)


__all__ = ["KIND_DEFAULTS", "LoopArgs", "ModelKind", "TrainArgs", "TrainResult", "TrainingLoop", "train"]
