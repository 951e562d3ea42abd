"""Evaluation: ranking metrics and benchmarks."""

from capr.eval.benchmarks import Protocol, QueryField, load_medquad_cdv, run_benchmark
from capr.eval.metrics import METRICS, evaluate

__all__ = ["METRICS", "Protocol", "QueryField", "evaluate", "load_medquad_cdv", "run_benchmark"]
