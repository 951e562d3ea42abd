"""`capr adapt`: self-supervised adaptation to a corpus, gated so that it never makes free-text questions worse."""

from capr.adapt.checks import DevCheck
from capr.adapt.gate import gate
from capr.adapt.pipeline import AdaptConfig, AdaptReport, KeepPolicy, adapt, config_for_more, read_report

__all__ = ["AdaptConfig", "AdaptReport", "DevCheck", "KeepPolicy", "adapt", "config_for_more", "gate", "read_report"]
