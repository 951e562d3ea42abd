"""Persistent passage index: lexical retrieval, passage and document stores, metadata filters."""

from capr.index.index import Index, load_index
from capr.index.writer import IndexWriter, build_index, compact_index
from capr.text.bm25 import BM25Params
from capr.index.merge import MergePolicy
from capr.records import Retriever
from capr.text.analyzer import Analyzer, AnalyzerConfig

__all__ = ["Analyzer", "AnalyzerConfig", "BM25Params", "Index", "IndexWriter", "Retriever", "MergePolicy", "build_index",
           "compact_index", "load_index"]
