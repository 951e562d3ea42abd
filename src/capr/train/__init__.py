"""CAPR training: bi-, poly- and cross-encoders from self-supervised labels."""

from capr.train.args import ModelKind, TrainArgs
from capr.train.trainer import TrainResult, train

__all__ = ["ModelKind", "TrainArgs", "TrainResult", "train"]
