"""The capr HTTP service: search, evidence, documents and cases over one index directory.

    app = create_app("idx/notes", ServiceConfig(tokens=("…",)))
    uvicorn.run(app)                     # or: capr serve --index idx/notes
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import traceback
import uuid
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable, Literal
from urllib.parse import quote

from fastapi import Depends, FastAPI, Query as QueryParam, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from capr._version import __version__
from capr.errors import BadInputError, CaprError, QueryError
from capr.search.profile import SearchProfile, supported_retrievers
from capr.records import Retriever
from capr.records import Document, Passage, Query
from capr.search.highlight import term_spans
from capr.search.second_stage import NO_RERANKER
from capr.search.searcher import Evidence, SearchOptions, Searcher
from capr.store.protocol import Capability, Store
from capr.service import schemas as S
from capr.service.config import CONFIG_ENV, AuthThrottle, HostPolicy, ServiceConfig, TokenSet, load_tokens
from capr.service.state import IndexHolder, Readiness, StoreHolder, WriteBusy

log = logging.getLogger("capr.service")
STATIC_DIR = Path(str(files("capr.service") / "static"))
WARM_UP_QUERY = "treatment of the symptoms"  # any question with a content word runs the whole default pipeline

# Sent with every response. The page loads only its own script and style (no inline code), so a
# passage that contains markup cannot run script even if it were ever inserted as HTML; and
# responses carry patient text, so nothing is cached.
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
]


class ApiError(StarletteHTTPException):
    """A client error with the request field at fault (reported as ``{"detail", "field"}``)."""

    def __init__(self, status_code: int, detail: str, field: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status_code, detail=detail, headers=headers)
        self.field = field


class BodyTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes", "body")


# ---------------------------------------------------------------------------------- middleware
class GuardMiddleware:
    """Outermost layer: the Host check, request size limit, security headers, one log line per request
    (method, route, status, latency — never a body, a query string or a header), and a last-resort 500
    that gives the client an error id and no stack trace."""

    def __init__(self, app: Callable, max_body_bytes: int, hosts: HostPolicy) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.hosts = hosts

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        state = {"status": 0, "started": False}

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        try:
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host")
            if not self.hosts.allows(None if host is None else host.decode("latin-1")):
                # before routing: a page served under another name (DNS rebinding) reads nothing, not even /health
                raise ApiError(421, f"this server does not answer to the host name {host.decode('latin-1')[:100]!r}: it answers "
                               "to localhost, 127.0.0.1 and [::1] (capr serve --allowed-hosts NAME adds names)", "host")
            length = headers.get(b"content-length")
            if length is not None:
                try:
                    declared = int(length)
                except ValueError:
                    raise ApiError(400, "invalid Content-Length header", "content-length") from None
                if declared > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            received = 0

            async def receive_wrapper() -> dict:
                nonlocal received
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_body_bytes:  # chunked bodies carry no Content-Length
                        raise BodyTooLarge(self.max_body_bytes)
                return message

            await self.app(scope, receive_wrapper, send_wrapper)
        except ApiError as e:
            if not state["started"]:
                await _send_json(send_wrapper, e.status_code, {"detail": e.detail, "field": e.field})
        except Exception as e:  # noqa: BLE001 - the last resort; everything else is handled inside
            error_id = uuid.uuid4().hex[:12]
            # Frames only: an exception's message may quote request text (patient data).
            log.error("unhandled %s (error id %s)\n%s", type(e).__name__, error_id, "".join(traceback.format_tb(e.__traceback__)))
            if not state["started"]:
                await _send_json(send_wrapper, 500, {"detail": f"internal server error (error id {error_id})", "field": None})
        finally:
            # the route template ("/documents/{doc_id:path}"), never the concrete path: no ids, no text;
            # without a route (404, 413 before routing), only the first path segment
            route = scope.get("route")
            path = getattr(route, "path", None) or "/" + str(scope.get("path", "")).lstrip("/").split("/", 1)[0][:40]
            log.info("%s %s %d %.1fms", scope.get("method", "?"), path, state["status"], (time.perf_counter() - t0) * 1e3)


async def _send_json(send: Callable, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------------- helpers
def _loc(loc: tuple | list) -> str:
    return ".".join(str(x) for x in loc)


def _doc_url(doc_id: str) -> str:
    return "/documents/" + quote(doc_id, safe="")


def _spans(p: Passage, terms: set[str], index: Store) -> list[tuple[int, int]]:
    return [(a + p.start, b + p.start) for a, b in term_spans(p.text, terms, index.analyzer)]


def _clean(s: str | None) -> str | None:
    return s.strip() if s and s.strip() else None


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": S.ErrorOut, "description": "The query cannot be answered as asked (the message names the problem)."},
    413: {"model": S.ErrorOut, "description": "Request body too large."},
    422: {"model": S.ValidationErrorOut, "description": "Invalid request (the message names the field)."},
}
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": S.ErrorOut, "description": "Missing or malformed bearer token."},
    403: {"model": S.ErrorOut, "description": "Invalid token, or writes disabled (no tokens configured)."},
    429: {"model": S.ErrorOut, "description": "Too many failed token checks from this client: wait Retry-After seconds."},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": S.ErrorOut, "description": "No such document."}}
BUSY: dict[int | str, dict[str, Any]] = {503: {"model": S.ErrorOut, "description": "Another process is writing the index; retry."}}


# ---------------------------------------------------------------------------------- the app
def _server_paths(index_dir: str | Path) -> Callable[[str], str]:
    """A message as a client may read it: the server's path to the index (which can name a ward, a patient or a
    user's home) becomes the index's folder name."""
    path = Path(index_dir)
    spellings = sorted({str(path), str(path.absolute()), str(path.resolve())} - {"", "."}, key=len, reverse=True)

    def private(message: str) -> str:
        for spelled in spellings:
            message = message.replace(spelled, path.name or "index")
        return message

    return private


def create_app(index_dir: str | Path, config: ServiceConfig | None = None, store: Any = None) -> FastAPI:
    """The FastAPI application serving the index at ``index_dir``, or ``store`` (any other backend, e.g. a
    Milvus collection). Both are searched by the same Searcher; what a backend cannot do is refused naming
    the capability it lacks."""
    config = config or ServiceConfig()
    if config.switch_interval_ms:
        import sys

        sys.setswitchinterval(config.switch_interval_ms / 1e3)
    if store is not None:
        holder: Any = StoreHolder(store)
    else:
        holder = IndexHolder(index_dir, watch=config.watch_index, write_wait_s=config.write_wait_s)
    readiness = Readiness()
    tokens = TokenSet(config.tokens)
    private = _server_paths(index_dir)
    bearer = HTTPBearer(auto_error=False, description="An API token from $CAPR_API_TOKENS or --token-file.")

    app = FastAPI(
        title="capr",
        version=__version__,
        description="Clinical answer-passage retrieval: search with evidence sentences, documents, similar cases.",
        docs_url=None,  # Swagger UI loads its code from a CDN: neither reachable offline nor allowed by the CSP
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.holder = holder
    app.state.config = config
    app.state.readiness = readiness
    app.add_middleware(GuardMiddleware, max_body_bytes=config.max_body_bytes, hosts=HostPolicy(config.allowed_hosts))

    throttle = AuthThrottle.from_config(config)
    app.state.auth_throttle = throttle

    def check_token(request: Request, creds: HTTPAuthorizationCredentials | None) -> None:
        if not request.headers.get("authorization"):
            raise ApiError(401, "missing bearer token: send 'Authorization: Bearer <token>'", "authorization",
                           headers={"WWW-Authenticate": "Bearer"})
        # per client address (behind a reverse proxy: the proxy's, unless uvicorn is told to trust it)
        client = request.client.host if request.client else "unknown"
        if throttle.retry_after(client) > 0:
            # decided before the token is looked at, so a blocked client learns nothing of the tokens it sends
            # (a valid one would otherwise stand out at full speed); each try lengthens the block, and Retry-After
            # is the whole wait from now
            raise _too_many(throttle.failed(client))
        if creds is not None and tokens and tokens.matches(creds.credentials):
            throttle.succeeded(client)
            return
        if creds is None:
            _refused(client, 401, "the Authorization header must use the Bearer scheme", {"WWW-Authenticate": "Bearer"})
        if not tokens:
            raise ApiError(403, "writes are disabled: the server has no API tokens (set CAPR_API_TOKENS or --token-file)",
                           "authorization")
        _refused(client, 403, "invalid token")

    def _refused(client: str, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        wait = throttle.failed(client)
        if wait:
            log.warning("client %s: too many failed token checks; refused for %.0f s", client, wait)
            headers = {**(headers or {}), "Retry-After": _seconds(wait)}
        raise ApiError(status, detail, "authorization", headers=headers)

    def _seconds(wait: float) -> str:
        return str(max(1, math.ceil(wait)))

    def _too_many(wait: float) -> ApiError:
        secs = _seconds(wait)
        return ApiError(429, f"too many failed authentication attempts from this client; retry after {secs} s",
                        "authorization", headers={"Retry-After": secs})

    def require_write(request: Request, creds: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
        check_token(request, creds)

    def require_read(request: Request, creds: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:
        check_token(request, creds)

    read_deps = [Depends(require_read)] if config.auth_reads else []
    read_errors = {**ERRORS, **(AUTH_ERRORS if config.auth_reads else {})}
    write_deps = [Depends(require_write)]
    write_errors = {**ERRORS, **AUTH_ERRORS, **BUSY}

    # -- error shapes -----------------------------------------------------------------------
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # pydantic's "input" is left out: it would echo (patient) text back; loc names the field
        items = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "invalid"), "type": e.get("type", "value_error")}
                 for e in exc.errors()]
        first = items[0] if items else {"loc": [], "msg": "invalid request"}
        return JSONResponse(status_code=422, content={"detail": items, "message": f"{_loc(first['loc'])}: {first['msg']}"})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            # GET and DELETE /documents/{id} are two routes: Allow must list the methods of both
            path = request.scope.get("path", "")
            methods = {m for r in app.routes if isinstance(r, APIRoute) and r.path_regex.match(path) for m in r.methods}
            headers["Allow"] = ", ".join(sorted(methods))
        return JSONResponse(status_code=exc.status_code, headers=headers or None,
                            content={"detail": private(str(exc.detail)), "field": getattr(exc, "field", None)})

    @app.exception_handler(QueryError)
    @app.exception_handler(BadInputError)
    async def _query(request: Request, exc: CaprError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": private(str(exc)), "field": None})

    @app.exception_handler(WriteBusy)
    async def _busy(request: Request, exc: WriteBusy) -> JSONResponse:
        return JSONResponse(status_code=503, headers={"Retry-After": "5"}, content={"detail": private(str(exc)), "field": None})

    @app.exception_handler(CaprError)
    async def _capr(request: Request, exc: CaprError) -> JSONResponse:
        # an index problem (corrupt or missing files), not the client's fault
        error_id = uuid.uuid4().hex[:12]
        log.error("%s (error id %s): %s", type(exc).__name__, error_id, exc)
        return JSONResponse(status_code=500, content={"detail": f"index error (error id {error_id})", "field": None})

    # -- page -------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    # -- health, stats, vocabulary ----------------------------------------------------------
    @app.get("/health", response_model=S.HealthResponse, tags=["service"],
             responses={503: {"model": S.HealthResponse, "description": "Starting (models loading), or a model failed to load."}})
    def health() -> JSONResponse:
        """Readiness and the generation served (no token needed, no content): 200 once the models and caches searches
        need are loaded and a query has been answered; 503 while starting (or when a model failed to load)."""
        index = holder.store
        c = index.stats()
        body = S.HealthResponse(status=readiness.status, ready=readiness.ready, error=readiness.error,
                                generation=index.generation_info()["generation"], documents=c["documents"],
                                passages=c["passages"], auth_reads=config.auth_reads)
        return JSONResponse(body.model_dump(), status_code=200 if readiness.ready else 503,
                            headers=None if readiness.ready else {"Retry-After": "1"})

    @app.get("/stats", response_model=S.StatsResponse, dependencies=read_deps, responses=read_errors, tags=["service"])
    def stats() -> S.StatsResponse:
        index = holder.store
        c = index.stats()
        info = index.generation_info()
        profile = SearchProfile.of(index)
        return S.StatsResponse(
            generation=info["generation"], created=info["created"], documents=c["documents"],
            passages=c["passages"], vocabulary=c.get("vocabulary", 0), segments=info["segments"], fields=index.fields(),
            aspects=len(holder.vocabulary(index, "aspect")), has_dense=index.has_dense,
            retrievers=[r.value for r in supported_retrievers(index)],
            rerankers=list(dict.fromkeys([*config.rerankers, *filter(None, [profile.reranker])])),
            default_retriever=profile.retriever.value, default_reranker=profile.reranker,
            auth_reads=config.auth_reads, writes_enabled=bool(tokens),
        )

    @app.get("/vocabulary", response_model=S.VocabularyResponse, dependencies=read_deps, responses=read_errors, tags=["search"])
    def vocabulary(
        field: Literal["entity", "aspect"] = QueryParam("aspect", description="entity (document titles) or aspect"),
        prefix: str = QueryParam("", max_length=100, description="Case-insensitive; prefix matches first, then substring matches."),
        limit: int = QueryParam(20, ge=1, le=100),
    ) -> S.VocabularyResponse:
        """Autocomplete values for the entity and aspect fields."""
        values = holder.vocabulary(holder.store, field)
        p = " ".join(prefix.split()).lower()
        starts = [v for v in values if v.lower().startswith(p)]
        inside = [v for v in values if p and p in v.lower() and not v.lower().startswith(p)]
        matched = starts + inside
        return S.VocabularyResponse(field=field, prefix=prefix, values=matched[:limit], total=len(matched))

    # -- search -----------------------------------------------------------------------------
    rerank_lock = threading.Lock()

    def open_searcher(index: Any, asked: str | None) -> Searcher:
        """The Searcher `capr search` would use (the index's profile, its second stage loaded once per process), with
        a second stage asked for by name only among those this server enables (a model folder is the operator's
        choice, not a client's)."""
        recorded = SearchProfile.of(index).reranker
        if asked and asked != NO_RERANKER and asked not in config.rerankers and asked != recorded:
            enabled = f"enabled: {', '.join(config.rerankers)}" if config.rerankers else "none is enabled (capr serve --reranker SPEC)"
            raise ApiError(400, f"re-ranker {asked!r} is not enabled on this server; {enabled}", "reranker")
        # (capr.search.profile.loaded_reranker loads a model once under its own lock; rerank_lock guards inference only,
        # so a search without a second stage never waits behind another request's re-ranking)
        return Searcher.open(index, reranker=asked)

    search_slots = config.search_concurrency or os.cpu_count() or 1
    limiters: dict[int, Any] = {}  # one CapacityLimiter per event loop (a TestClient runs its own)

    @app.post("/search", response_model=S.SearchResponse, dependencies=read_deps, responses=read_errors, tags=["search"])
    async def search(req: S.SearchRequest) -> S.SearchResponse:
        """Top-k passages for a free-text question or an ⟨entity, aspect⟩ pair, each with its
        query-term highlights and, with ``evidence``, a score per sentence."""
        import asyncio

        import anyio

        key = id(asyncio.get_running_loop())
        limiter = limiters.get(key)
        if limiter is None:
            limiter = limiters[key] = anyio.CapacityLimiter(search_slots)
        # at most search_slots searches compute at once; the others wait here, holding no thread (issue 19)
        return await anyio.to_thread.run_sync(_search, req, limiter=limiter)

    def _search(req: S.SearchRequest, warming: bool = False) -> S.SearchResponse | JSONResponse:
        if not warming:
            readiness.wait()  # the warm-up loads the models once; a search during it waits rather than loading them again
        t0 = time.perf_counter()
        index = holder.store  # one snapshot for the whole request
        q = Query("api", text=_clean(req.text), entity=_clean(req.entity), aspect=_clean(req.aspect))
        evidence = Evidence.none
        if req.evidence:
            # an explicitly dense retriever gets dense sentence scores; the default keeps the cheap lexical ones
            evidence = Evidence.dense if req.retriever in (Retriever.dense, Retriever.hybrid) else Evidence.lexical
        try:
            searcher = open_searcher(index, req.reranker)
            options = SearchOptions(k=req.k, retriever=req.retriever, filters=req.filters or None, expand=req.expand,
                                    aspect_boost=req.aspect_boost, group_by=req.group_by, entity_scope=req.entity_scope,
                                    entity_synonyms=req.entity_synonyms, rerank_depth=config.rerank_depth,
                                    rerank_share=req.rerank_share, evidence=evidence)
            if searcher.reranker is not None:
                with rerank_lock:  # one model instance; torch inference is not re-entrant across request threads
                    result = searcher.search(q, options)
            else:
                result = searcher.search(q, options)
        except QueryError as e:  # the library names the field at fault
            raise ApiError(400, str(e), e.field or "text") from None
        payload = {
            "query": {"text": q.text, "entity": q.entity, "aspect": q.aspect}, "retriever": result.options.retriever.value,
            "fusion": result.fusion_shown(), "reranker": result.reranker, "evidence_method": result.evidence_method if result.hits else None,
            "generation": index.generation_info()["generation"], "notices": result.notices,
            "results": [{**h.to_dict(), "document_url": _doc_url(h.passage.doc_id)} for h in result.hits],
        }
        payload["took_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        try:
            # Hit.to_dict has SearchResult's fields and JSON types (a test holds it to the schema): serialising it
            # directly skips building and re-validating ~50 models per response, a tenth of a search's CPU (issue 19)
            return JSONResponse(payload)
        except (TypeError, ValueError):  # a metadata value JSON cannot hold, or a non-finite score: the model decides
            return S.SearchResponse(**payload)

    # -- cases ------------------------------------------------------------------------------
    case_pipes: dict[int, Any] = {}  # one pipeline per index snapshot; the cross-encoder is shared

    def _case_pipeline(store) -> Any:
        from capr.cases import CasePipeline
        from capr.cases.config import case_config

        pipe = case_pipes.get(id(store.index))
        if pipe is None:
            try:
                # what `capr cases` runs on this index (capr.cases.config.case_config)
                pipe = CasePipeline(store.index, case_config(store.index.has_dense, config.cases_model))
            except QueryError as e:
                raise ApiError(400, str(e), "index") from None
            old = next(iter(case_pipes.values()), None)
            if old is not None:
                pipe._cross = old._cross
            case_pipes.clear()
            case_pipes[id(store.index)] = pipe
        return pipe

    @app.post("/cases", response_model=S.CaseResponse, dependencies=read_deps, responses=read_errors, tags=["cases"])
    def cases(req: S.CaseRequest) -> S.CaseResponse:
        """Rank candidate hypotheses for a patient description by their most similar case (the similar-case pipeline,
        as `capr cases` runs it on this index: the cross-encoder of ``--cases-model``, else the dense scorer on an
        index with vectors, else BM25); each hypothesis with its best supporting passages."""
        from capr.cases.config import CaseScorer

        t0 = time.perf_counter()
        store = holder.store
        if Capability.postings not in store.capabilities:
            raise ApiError(400, f"similar-case ranking needs the '{Capability.postings.value}' capability (capr's term "
                                f"matrix), which the {store.backend.value} backend does not have", "description")
        try:
            store.compile_filter(req.filters)
        except QueryError as e:
            raise ApiError(400, str(e), "filters") from None
        pipe = _case_pipeline(store)
        try:
            res = pipe.rank(req.description, req.hypotheses, filters=req.filters or None)
        except QueryError as e:
            raise ApiError(400, str(e), e.field or "description") from None
        scorer = pipe.config.scorer
        stage = scorer.value  # the Support field holding that scorer's score
        out = []
        for h in res.hypotheses:
            terms = set(store.analyzer(h.hypothesis))
            sups = [s for s in h.supports if getattr(s, stage) is not None][: req.k]
            out.append(S.HypothesisOut(
                hypothesis=h.hypothesis, rank=h.rank, score=round(h.score, 4), candidates=h.candidates,
                notice=h.notice,
                passages=[S.SupportOut(pid=s.passage.pid, doc_id=s.passage.doc_id, title=s.passage.title,
                                       aspect=s.passage.aspect, score=round(float(getattr(s, stage)), 4),
                                       start=s.passage.start, end=s.passage.end, text=s.passage.text,
                                       highlights=_spans(s.passage, terms, store),
                                       document_url=_doc_url(s.passage.doc_id))
                          for s in sups],
            ))
        method = "similar-case-cross-encoder" if scorer is CaseScorer.cross else f"similar-case-{scorer.value}"
        return S.CaseResponse(method=method, generation=store.generation_info()["generation"],
                              took_ms=round((time.perf_counter() - t0) * 1e3, 2), hypotheses=out)

    case_finders: dict[int, Any] = {}  # one finder (document maps, patient mask) per index snapshot

    @app.post("/cases/similar", response_model=S.SimilarCasesResponse, dependencies=read_deps, responses=read_errors,
              tags=["cases"])
    def cases_similar(req: S.SimilarCasesRequest) -> S.SimilarCasesResponse:
        """Patients like this one: the findings read from the description, the differential diagnosis (conditions
        whose profiles, passages and similar coded cases match them, each with the findings for and against it), and
        the most similar cases with the diagnoses they carry and the sentences that make them similar."""
        from capr.cases.similar import CaseFinder

        t0 = time.perf_counter()
        store = holder.store
        if Capability.postings not in store.capabilities:
            raise ApiError(400, f"similar cases need the '{Capability.postings.value}' capability (capr's term "
                                f"matrix), which the {store.backend.value} backend does not have", "description")
        finder = case_finders.get(id(store.index))
        if finder is None:
            case_finders.clear()
            finder = case_finders[id(store.index)] = CaseFinder(store.index)
        try:
            res = finder.similar(req.description, k=req.k, retriever=req.retriever, evidence=req.evidence,
                                 labelled_only=req.labelled_only, diagnoses=req.diagnoses)
        except QueryError as e:
            raise ApiError(400, str(e), e.field or "retriever") from None
        return S.SimilarCasesResponse(
            retriever=res.retriever, generation=store.generation_info()["generation"],
            took_ms=round((time.perf_counter() - t0) * 1e3, 2), notices=res.notices,
            findings=res.findings.to_dict() if res.findings is not None else None,
            diagnoses=[S.LikelyDiagnosisOut(**d.to_dict()) for d in res.diagnoses],
            cases=[S.SimilarCaseOut(**c.to_dict(), document_url=_doc_url(c.doc_id)) for c in res.cases])

    # -- documents --------------------------------------------------------------------------
    @app.get("/documents/{doc_id:path}", response_model=S.DocumentOut, dependencies=read_deps,
             responses={**read_errors, **NOT_FOUND}, tags=["documents"])
    def get_document(doc_id: str) -> S.DocumentOut:
        index = holder.store
        if not index.has_document(doc_id):
            raise ApiError(404, f"no document with id {doc_id!r}", "doc_id")
        d = index.document(doc_id)
        sections = None if d.sections is None else [S.SectionOut(heading=s.heading, aspect=s.aspect, start=s.start, end=s.end,
                                                                 section_id=s.section_id) for s in d.sections]
        return S.DocumentOut(doc_id=d.doc_id, title=d.title, text=d.text, metadata=d.metadata, sections=sections)

    @app.post("/documents", response_model=S.AddResponse, status_code=201, dependencies=write_deps,
              responses=write_errors, tags=["documents"])
    def add_document(doc: S.DocumentIn) -> S.AddResponse:
        """Add a document (an existing id is replaced). Returns once the new generation is committed
        to disk and served."""
        readiness.wait()  # the new snapshot takes over the encoder the warm-up loads

        def write(writer) -> tuple[int, bool]:
            replaced = writer.base is not None and writer.base.has_document(doc.doc_id)
            n = writer.add(Document(doc_id=doc.doc_id, title=doc.title, text=doc.text, metadata=dict(doc.metadata)))
            if n == 0:
                raise ApiError(422, "the document yields no passages (its text has no words)", "text")
            return n, replaced

        (n, replaced), index = holder.write(write)
        return S.AddResponse(doc_id=doc.doc_id, passages=n, replaced=replaced, generation=index.generation_info()["generation"])

    @app.delete("/documents/{doc_id:path}", response_model=S.DeleteResponse, dependencies=write_deps,
                responses={**write_errors, **NOT_FOUND}, tags=["documents"])
    def delete_document(doc_id: str) -> S.DeleteResponse:
        if not holder.store.has_document(doc_id):
            raise ApiError(404, f"no document with id {doc_id!r}", "doc_id")
        readiness.wait()
        try:
            _, index = holder.write(lambda w: w.delete(doc_id))
        except QueryError:  # deleted by a concurrent request between the check and the write
            raise ApiError(404, f"no document with id {doc_id!r}", "doc_id") from None
        return S.DeleteResponse(doc_id=doc_id, deleted=True, generation=index.generation_info()["generation"])

    def openapi() -> dict[str, Any]:
        # The re-rankers a request may name depend on how the server was started: say so in the spec.
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            props = spec["components"]["schemas"]["SearchRequest"]["properties"]
            if not holder.store.has_dense:  # dense and hybrid need vectors this index does not have
                lexical = [Retriever.bm25.value, Retriever.tfidf.value]
                props["retriever"] = {**{k: v for k, v in props["retriever"].items() if k not in ("$ref", "allOf")},
                                      "type": "string", "enum": lexical}
            prop = props["reranker"]
            enabled = list(config.rerankers)
            prop["anyOf"] = [{"type": "string", "enum": enabled}, {"type": "null"}] if enabled else [{"type": "null"}]
            prop["description"] = f"Re-ranker enabled on this server: {', '.join(enabled)}." if enabled else \
                "No re-ranker is enabled on this server (capr serve --reranker SPEC)."
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    def warm_up() -> None:
        """Loads what the default search needs — the query encoder, the index's recorded second stage, the entity
        synonym table — and answers one query with it, so the first search after /health says ready is as fast as
        the next (issue 35)."""
        try:
            holder.load_encoder()
            open_searcher(holder.store, None)  # loads the index's recorded second stage, if any
        except Exception as e:  # noqa: BLE001 - reported by /health (503), and logged
            log.error("warm-up failed: cannot load a model: %s: %s", type(e).__name__, e)
            readiness.finish(f"cannot load a model: {type(e).__name__}: {e}")
            return
        try:
            from capr.labels.synonyms import entity_synonyms

            entity_synonyms()
        except Exception as e:  # noqa: BLE001 - ⟨entity, aspect⟩ searches report it themselves; the rest work
            log.warning("warm-up: the entity synonym table did not load (%s: %s)", type(e).__name__, e)
        try:
            _search(S.SearchRequest(text=WARM_UP_QUERY), warming=True)
        except (ApiError, CaprError) as e:  # e.g. an index with no live passage: loaded all the same
            log.info("warm-up query not answered (%s); the models are loaded", type(e).__name__)
        except Exception as e:  # noqa: BLE001
            log.error("warm-up failed: %s", type(e).__name__)
            readiness.finish(f"the warm-up search failed: {type(e).__name__}")
            return
        readiness.finish()
        log.info("ready in %.1f s (models loaded, warm-up query answered)", readiness.took_s)

    if config.warm_up:
        threading.Thread(target=warm_up, name="capr-warm-up", daemon=True).start()
    else:
        readiness.finish()
    return app


def app_from_env() -> FastAPI:
    """Factory for uvicorn worker processes (``capr serve --workers N``): settings come from
    $CAPR_SERVICE_CONFIG, tokens from $CAPR_API_TOKENS or the token file it names."""
    spec = json.loads(os.environ[CONFIG_ENV])
    tokens = load_tokens(spec.get("token_file"))
    return create_app(spec["index_dir"], ServiceConfig.from_public_dict(spec["config"], tokens))
