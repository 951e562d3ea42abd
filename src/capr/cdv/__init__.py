"""CDV — contextual discourse vectors: a BiLSTM over a document's sentence embeddings decodes, for every
sentence, which entity and which aspect it talks about. Passage score = mean sentence score; free passage
boundaries and score curves come from the same sentence scores."""

from capr.cdv.args import CDVArgs
from capr.cdv.model import CDVModel, sentence_scores
from capr.cdv.trainer import train_cdv

__all__ = ["CDVArgs", "CDVModel", "sentence_scores", "train_cdv"]
