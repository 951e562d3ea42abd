"""The search pipeline every caller runs: the options and the index's search profile, resolved in one place
(``config``), the parsed query, first-stage retrievers and their fusion, the entity's tiers and the priors, the second
stage, and the hits with their highlights and evidence (``present``), composed by ``Searcher``."""

from capr.search.config import EntityScope, Evidence, GroupBy, SearchOptions, SearchProfile, WordingPrior
from capr.search.present import Hit, SearchResult
from capr.search.runs import search_each
from capr.search.searcher import Searcher, search

__all__ = ["EntityScope", "Evidence", "GroupBy", "Hit", "SearchOptions", "SearchProfile", "SearchResult", "Searcher",
           "WordingPrior", "search", "search_each"]
