"""``/search`` (top-k passages with highlights and evidence) and ``/vocabulary`` (entity and aspect autocomplete)."""

from __future__ import annotations

import time
from typing import Any, Literal

from fastapi import APIRouter
from fastapi import Query as QueryParam
from fastapi.responses import JSONResponse

from capr.errors import QueryError
from capr.records import Query
from capr.search.config import SearchProfile
from capr.search import SearchOptions, Searcher
from capr.search.second_stage import NO_RERANKER
from capr.service import schemas as S
from capr.service.config import ServiceConfig
from capr.service.errors import ApiError
from capr.service.routers.common import State, document_url
from capr.service.state import ServiceState

router = APIRouter(tags=["search"])


@router.get("/vocabulary", response_model=S.VocabularyResponse)
def vocabulary(
    state: State,
    field: Literal["entity", "aspect"] = QueryParam("aspect", description="entity (document titles) or aspect"),
    prefix: str = QueryParam("", max_length=100, description="Case-insensitive; prefix matches first, then substring matches."),
    limit: int = QueryParam(20, ge=1, le=100),
) -> S.VocabularyResponse:
    """Autocomplete values for the entity and aspect fields."""
    values = state.holder.vocabulary(state.holder.store, field)
    p = " ".join(prefix.split()).lower()
    starts = [v for v in values if v.lower().startswith(p)]
    inside = [v for v in values if p and p in v.lower() and not v.lower().startswith(p)]
    matched = starts + inside
    return S.VocabularyResponse(field=field, prefix=prefix, values=matched[:limit], total=len(matched))


@router.post("/search", response_model=S.SearchResponse)
async def search(req: S.SearchRequest, state: State) -> S.SearchResponse:
    """Top-k passages for a free-text question or an ⟨entity, aspect⟩ pair, each with its
    query-term highlights and, with ``evidence``, a score per sentence."""
    import asyncio

    import anyio

    limiter = state.search_limiter(id(asyncio.get_running_loop()))
    # at most search_concurrency searches compute at once; the others wait here, holding no thread (issue 19)
    return await anyio.to_thread.run_sync(run_search, state, req, limiter=limiter)


def open_searcher(state: ServiceState, index: Any, asked: str | None) -> Searcher:
    """The Searcher `capr search` would use (the index's profile, its second stage loaded once per process), with
    a second stage asked for by name only among those this server enables (a model folder is the operator's
    choice, not a client's)."""
    rerankers = state.config.rerankers
    recorded = SearchProfile.of(index).reranker
    if asked and asked != NO_RERANKER and asked not in rerankers and asked != recorded:
        enabled = f"enabled: {', '.join(rerankers)}" if rerankers else "none is enabled (capr serve --reranker SPEC)"
        raise ApiError(400, f"re-ranker {asked!r} is not enabled on this server; {enabled}", "reranker")
    # (capr.search.config.loaded_reranker loads a model once under its own lock; rerank_lock guards inference only,
    # so a search without a second stage never waits behind another request's re-ranking)
    return Searcher.open(index, reranker=asked)


def search_options(req: S.SearchRequest, config: ServiceConfig) -> SearchOptions:
    """The request's options as the library takes them (the library decides evidence and depth)."""
    return SearchOptions.from_mapping({
        "k": req.k, "retriever": req.retriever, "filters": req.filters, "expand": req.expand,
        "aspect_boost": req.aspect_boost, "group_by": req.group_by, "entity_scope": req.entity_scope,
        "entity_synonyms": req.entity_synonyms, "reading": req.reading, "fusion_by_question": req.fusion_by_question,
        "fusion_probe": req.fusion_probe,
        "rerank_depth": config.rerank_depth, "rerank_share": req.rerank_share, "evidence": req.evidence})


def _clean(s: str | None) -> str | None:
    return s.strip() if s and s.strip() else None


def run_search(state: ServiceState, req: S.SearchRequest, warming: bool = False) -> S.SearchResponse | JSONResponse:
    if not warming:
        state.readiness.wait()  # the warm-up loads the models once; a search during it waits rather than loading them again
    t0 = time.perf_counter()
    index = state.holder.store  # one snapshot for the whole request
    q = Query("api", text=_clean(req.text), entity=_clean(req.entity), aspect=_clean(req.aspect))
    try:
        searcher = open_searcher(state, index, req.reranker)
        options = search_options(req, state.config)
        if searcher.reranker is not None:
            with state.rerank_lock:
                result = searcher.search(q, options)
        else:
            result = searcher.search(q, options)
    except QueryError as e:  # the library names the field at fault
        raise ApiError(400, str(e), e.field or "text") from None
    payload = {
        "query": {"text": q.text, "entity": q.entity, "aspect": q.aspect}, "retriever": result.options.retriever.value,
        "fusion": result.fusion_shown(), "reranker": result.reranker, "evidence_method": result.evidence_method if result.hits else None,
        "generation": index.generation_info()["generation"], "notices": result.notices, "reading": result.reading(),
        "results": [{**h.to_dict(), "document_url": document_url(h.passage.doc_id)} for h in result.hits],
    }
    payload["took_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    try:
        # Hit.to_dict has SearchResult's fields and JSON types (a test holds it to the schema): serialising it
        # directly skips building and re-validating ~50 models per response, a tenth of a search's CPU (issue 19)
        return JSONResponse(payload)
    except (TypeError, ValueError):  # a metadata value JSON cannot hold, or a non-finite score: the model decides
        return S.SearchResponse(**payload)
