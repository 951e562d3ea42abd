"""capr's HTTP service (FastAPI): search with evidence sentences, documents, similar cases, and a web page."""

from capr.service.app import create_app
from capr.service.config import ServiceConfig, load_tokens

__all__ = ["ServiceConfig", "create_app", "load_tokens"]
