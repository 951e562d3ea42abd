"""capr: clinical and health answer-passage retrieval."""

from capr._version import __version__
from capr.corpus import Format, ReadReport, read_documents  # noqa: E402
from capr.corpus.segment import SegmenterConfig  # noqa: E402
from capr.errors import BadInputError, CaprError, QueryError  # noqa: E402
from capr.index import AnalyzerConfig, BM25Params, Index, build_index, load_index  # noqa: E402
from capr.records import Document, Passage, Qrel, Query, Run, ScoredPassage, Section, Sentence  # noqa: E402
from capr.search import Hit, SearchOptions, Searcher  # noqa: E402

__all__ = [
    "AnalyzerConfig", "BM25Params", "BadInputError", "CaprError", "Document", "Format", "Index", "Passage",
    "Qrel", "Query", "QueryError", "ReadReport", "Run", "ScoredPassage", "Searcher", "SearchOptions", "Hit", "Section",
    "SegmenterConfig", "Sentence",
    "build_index", "load_index", "read_documents",
]
