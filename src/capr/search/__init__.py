"""The search pipeline every caller runs: the parsed query, first-stage retrievers and their fusion, the entity's
tiers and the priors, the second stage, and the hits with their highlights and evidence (``Searcher``)."""

from capr.search.searcher import (EntityScope, Evidence, GroupBy, Hit, SearchOptions, SearchResult, Searcher,
                                  WordingPrior, search, search_each)

__all__ = ["EntityScope", "Evidence", "GroupBy", "Hit", "SearchOptions", "SearchResult", "Searcher", "WordingPrior",
           "search", "search_each"]
