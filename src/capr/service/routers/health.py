"""``/health`` (readiness, open to any client: no content) and ``/stats`` (what the index holds and how it searches)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from capr.search.config import SearchProfile, supported_retrievers
from capr.service import schemas as S
from capr.service.routers.common import State

public = APIRouter(tags=["service"])
router = APIRouter(tags=["service"])


@public.get("/health", response_model=S.HealthResponse,
            responses={503: {"model": S.HealthResponse, "description": "Starting (models loading), or a model failed to load."}})
def health(state: State) -> JSONResponse:
    """Readiness and the generation served (no token needed, no content): 200 once the models and caches searches
    need are loaded and a query has been answered; 503 while starting (or when a model failed to load)."""
    index = state.holder.store
    c = index.stats()
    readiness = state.readiness
    body = S.HealthResponse(status=readiness.status, ready=readiness.ready, error=readiness.error,
                            generation=index.generation_info()["generation"], documents=c["documents"],
                            passages=c["passages"], auth_reads=state.config.auth_reads)
    return JSONResponse(body.model_dump(), status_code=200 if readiness.ready else 503,
                        headers=None if readiness.ready else {"Retry-After": "1"})


@router.get("/stats", response_model=S.StatsResponse)
def stats(state: State) -> S.StatsResponse:
    index = state.holder.store
    c = index.stats()
    info = index.generation_info()
    profile = SearchProfile.of(index)
    config = state.config
    return S.StatsResponse(
        generation=info["generation"], created=info["created"], documents=c["documents"],
        passages=c["passages"], vocabulary=c.get("vocabulary", 0), segments=info["segments"], fields=index.fields(),
        aspects=len(state.holder.vocabulary(index, "aspect")), has_dense=index.has_dense,
        retrievers=[r.value for r in supported_retrievers(index)],
        rerankers=list(dict.fromkeys([*config.rerankers, *filter(None, [profile.reranker])])),
        default_retriever=profile.retriever.value, default_reranker=profile.reranker,
        auth_reads=config.auth_reads, writes_enabled=bool(state.tokens),
    )
