"""Listwise in-batch loss that knows a batch can hold several right answers."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def multi_positive_listwise_loss(scores: torch.Tensor, positives: torch.Tensor, targets: torch.Tensor,
                                 mask_other_positives: bool = True) -> torch.Tensor:
    """Cross-entropy of each query's own passage against every other candidate in the batch.

    scores:    [n_queries, n_candidates] logits
    positives: [n_queries, n_candidates] bool, True where the candidate also answers the query
    targets:   [n_queries] column of each query's own passage

    With masking, candidates that also answer the query (another passage of the same document and section
    type, a second note about the same disease) are left out of the softmax instead of being pushed down —
    plain MultipleNegativesRankingLoss punishes them as negatives.
    """
    if mask_other_positives:
        own = F.one_hot(targets, scores.shape[1]).bool()
        scores = scores.masked_fill(positives & ~own, float("-inf"))
    return F.cross_entropy(scores, targets)
