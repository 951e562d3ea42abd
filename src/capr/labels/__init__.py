"""Self-supervised labels from an unlabeled corpus: aspects from structure, entities from dictionary NER."""

from capr.labels.generate import LabelConfig, LabeledPassage, LabelGenerator, LabelStats, read_labels, write_labels

__all__ = ["LabelConfig", "LabeledPassage", "LabelGenerator", "LabelStats", "read_labels", "write_labels"]
