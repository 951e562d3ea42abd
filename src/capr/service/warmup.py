"""Loading what the default search needs before ``/health`` says ready (issue 35)."""

from __future__ import annotations

import logging

from capr.errors import CaprError
from capr.index import compiled
from capr.service import schemas as S
from capr.service.errors import ApiError
from capr.service.routers.search import open_searcher, run_search
from capr.service.state import ServiceState

log = logging.getLogger("capr.service")
WARM_UP_QUERY = "treatment of the symptoms"  # any question with a content word runs the whole default pipeline


def warm_up(state: ServiceState) -> None:
    """Loads what the default search needs — the query encoder, the index's recorded second stage, the entity
    synonym table — and answers one query with it, so the first search after /health says ready is as fast as
    the next (issue 35)."""
    readiness = state.readiness
    try:
        state.holder.load_encoder()
        open_searcher(state, state.holder.store, None)  # loads the index's recorded second stage, if any
    except Exception as e:  # noqa: BLE001 - reported by /health (503), and logged
        log.error("warm-up failed: cannot load a model: %s: %s", type(e).__name__, e)
        readiness.finish(f"cannot load a model: {type(e).__name__}: {e}")
        return
    if not compiled.enable():
        log.info("BM25 scores with numpy alone (no numba): slower on millions of passages, the same scores")
    try:
        from capr.labels.synonyms import entity_synonyms

        entity_synonyms()
    except Exception as e:  # noqa: BLE001 - ⟨entity, aspect⟩ searches report it themselves; the rest work
        log.warning("warm-up: the entity synonym table did not load (%s: %s)", type(e).__name__, e)
    try:
        run_search(state, S.SearchRequest(text=WARM_UP_QUERY), warming=True)
    except (ApiError, CaprError) as e:  # e.g. an index with no live passage: loaded all the same
        log.info("warm-up query not answered (%s); the models are loaded", type(e).__name__)
    except Exception as e:  # noqa: BLE001
        log.error("warm-up failed: %s", type(e).__name__)
        readiness.finish(f"the warm-up search failed: {type(e).__name__}")
        return
    readiness.finish()
    log.info("ready in %.1f s (models loaded, warm-up query answered)", readiness.took_s)
