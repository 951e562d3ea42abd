"""Persistent passage index: lexical retrieval, passage and document stores, metadata filters."""

from capr.index.analyzer import Analyzer, AnalyzerConfig
from capr.index.index import Index, IndexWriter, build_index, compact_index, load_index
from capr.index.merge import MergePolicy
from capr.query import Retriever, query_text
from capr.index.lexical import BM25Params

__all__ = ["Analyzer", "AnalyzerConfig", "BM25Params", "Index", "IndexWriter", "Retriever", "MergePolicy", "build_index", "compact_index", "load_index", "query_text"]
