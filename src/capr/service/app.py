"""The capr HTTP service: search, evidence, documents and cases over one index directory.

    app = create_app("idx/notes", ServiceConfig(tokens=("…",)))
    uvicorn.run(app)                     # or: capr serve --index idx/notes

The app factory: the served state (``capr.service.state.ServiceState``), the outermost guard (``guard``), the error
shapes (``errors``), and the routers (``routers/``), each included with the token rule of its kind (``security``).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from capr._version import __version__
from capr.records import Retriever
from capr.service.config import CONFIG_ENV, HostPolicy, ServiceConfig, load_tokens
from capr.service.errors import add_error_handlers, server_paths
from capr.service.guard import GuardMiddleware
from capr.service.routers import cases, documents, health, page, search
from capr.service.security import read_access, write_access
from capr.service.state import IndexHolder, ServiceState, StoreHolder
from capr.service.warmup import warm_up


def create_app(index_dir: str | Path, config: ServiceConfig | None = None, store: Any = None) -> FastAPI:
    """The FastAPI application serving the index at ``index_dir``, or ``store`` (any other backend, e.g. a
    Milvus collection). Both are searched by the same Searcher; what a backend cannot do is refused naming
    the capability it lacks."""
    config = config or ServiceConfig()
    if config.switch_interval_ms:
        import sys

        sys.setswitchinterval(config.switch_interval_ms / 1e3)
    if store is not None:
        holder: IndexHolder | StoreHolder = StoreHolder(store)
    else:
        holder = IndexHolder(index_dir, watch=config.watch_index, write_wait_s=config.write_wait_s)
    state = ServiceState(holder, config, private=server_paths(index_dir))

    app = FastAPI(
        title="capr",
        version=__version__,
        description="Clinical answer-passage retrieval: search with evidence sentences, documents, similar cases.",
        docs_url=None,  # Swagger UI loads its code from a CDN: neither reachable offline nor allowed by the CSP
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.service = state
    # the parts tests and operators reach for by name
    app.state.holder, app.state.config, app.state.readiness = holder, config, state.readiness
    app.state.auth_throttle = state.throttle
    app.add_middleware(GuardMiddleware, max_body_bytes=config.max_body_bytes, hosts=HostPolicy(config.allowed_hosts))
    add_error_handlers(app)

    reads = read_access(config.auth_reads)
    routers = [(page.router, {}), (health.public, {}), (health.router, reads), (search.router, reads),
               (cases.router, reads), (documents.reads, reads), (documents.writes, write_access())]
    for router, access in routers:
        app.include_router(router, **access)
    app.mount("/static", StaticFiles(directory=page.STATIC_DIR), name="static")
    # the routes as declared (FastAPI may keep included routers whole in app.routes): a 405 lists their methods
    app.state.api_routes = [r for router, _ in routers for r in router.routes if isinstance(r, APIRoute)]
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]

    if config.warm_up:
        threading.Thread(target=warm_up, args=(state,), name="capr-warm-up", daemon=True).start()
    else:
        state.readiness.finish()
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The spec, saying what depends on how the server was started: the retrievers this index can run and the
    re-rankers a request may name."""
    if app.openapi_schema is None:
        state: ServiceState = app.state.service
        spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        props = spec["components"]["schemas"]["SearchRequest"]["properties"]
        if not state.holder.store.has_dense:  # dense and hybrid need vectors this index does not have
            lexical = [Retriever.bm25.value, Retriever.tfidf.value]
            props["retriever"] = {**{k: v for k, v in props["retriever"].items() if k not in ("$ref", "allOf")},
                                  "type": "string", "enum": lexical}
        prop = props["reranker"]
        enabled = list(state.config.rerankers)
        prop["anyOf"] = [{"type": "string", "enum": enabled}, {"type": "null"}] if enabled else [{"type": "null"}]
        prop["description"] = f"Re-ranker enabled on this server: {', '.join(enabled)}." if enabled else \
            "No re-ranker is enabled on this server (capr serve --reranker SPEC)."
        app.openapi_schema = spec
    return app.openapi_schema


def app_from_env() -> FastAPI:
    """Factory for uvicorn worker processes (``capr serve --workers N``): settings come from
    $CAPR_SERVICE_CONFIG, tokens from $CAPR_API_TOKENS or the token file it names."""
    spec = json.loads(os.environ[CONFIG_ENV])
    tokens = load_tokens(spec.get("token_file"))
    return create_app(spec["index_dir"], ServiceConfig.from_public_dict(spec["config"], tokens))
