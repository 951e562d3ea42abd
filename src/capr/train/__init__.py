"""CAPR training: bi-, poly- and cross-encoders from self-supervised labels, on the one training loop
(capr.train.loop) that the CDV, TSDAE and case cross-encoder trainers share."""

from capr.train.args import KIND_DEFAULTS, ModelKind, TrainArgs
from capr.train.loop import LoopArgs, TrainingLoop, TrainResult
from capr.train.trainer import train

__all__ = ["KIND_DEFAULTS", "LoopArgs", "ModelKind", "TrainArgs", "TrainResult", "TrainingLoop", "train"]
