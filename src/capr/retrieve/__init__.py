"""Query construction and result presentation shared by the CLI and the service."""

from capr.retrieve.highlight import Snippet, snippet, term_spans

__all__ = ["Snippet", "snippet", "term_spans"]
