"""``/cases`` (rank hypotheses for a patient description) and ``/cases/similar`` (patients like this one)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from capr.errors import QueryError
from capr.search.highlight import term_spans
from capr.service import schemas as S
from capr.service.errors import ApiError
from capr.service.routers.common import State, document_url
from capr.store.protocol import Capability, Store

router = APIRouter(tags=["cases"])


def _needs_postings(store: Any, what: str) -> None:
    if Capability.postings not in store.capabilities:
        raise ApiError(400, f"{what} the '{Capability.postings.value}' capability (capr's term matrix), which the "
                            f"{store.backend.value} backend does not have", "description")


def _support(s: Any, stage: str, terms: set[str], store: Store) -> S.SupportOut:
    p = s.passage
    return S.SupportOut(pid=p.pid, doc_id=p.doc_id, title=p.title, aspect=p.aspect, score=round(float(getattr(s, stage)), 4),
                        start=p.start, end=p.end, text=p.text,
                        highlights=[(a + p.start, b + p.start) for a, b in term_spans(p.text, terms, store.analyzer)],
                        document_url=document_url(p.doc_id))


@router.post("/cases", response_model=S.CaseResponse)
def cases(req: S.CaseRequest, state: State) -> S.CaseResponse:
    """Rank candidate hypotheses for a patient description by their most similar case (the similar-case pipeline,
    as `capr cases` runs it on this index: the cross-encoder of ``--cases-model``, else the dense scorer on an
    index with vectors, else BM25); each hypothesis with its best supporting passages."""
    from capr.cases.config import CaseScorer

    t0 = time.perf_counter()
    store = state.holder.store
    _needs_postings(store, "similar-case ranking needs")
    try:
        store.compile_filter(req.filters)
    except QueryError as e:
        raise ApiError(400, str(e), "filters") from None
    try:
        pipe = state.case_pipeline(store)
    except QueryError as e:
        raise ApiError(400, str(e), "index") from None
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
        out.append(S.HypothesisOut(hypothesis=h.hypothesis, rank=h.rank, score=round(h.score, 4), candidates=h.candidates,
                                   notice=h.notice, passages=[_support(s, stage, terms, store) for s in sups]))
    method = "similar-case-cross-encoder" if scorer is CaseScorer.cross else f"similar-case-{scorer.value}"
    return S.CaseResponse(method=method, generation=store.generation_info()["generation"],
                          took_ms=round((time.perf_counter() - t0) * 1e3, 2), hypotheses=out)


@router.post("/cases/similar", response_model=S.SimilarCasesResponse)
def cases_similar(req: S.SimilarCasesRequest, state: State) -> S.SimilarCasesResponse:
    """Patients like this one: the findings read from the description, the differential diagnosis (conditions
    whose profiles, passages and similar coded cases match them, each with the findings for and against it), the
    likely codes (for coding, as the most similar coded cases were coded), and
    the most similar cases with the diagnoses they carry and the sentences that make them similar."""
    t0 = time.perf_counter()
    store = state.holder.store
    _needs_postings(store, "similar cases need")
    finder = state.case_finder(store)
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
        codes=[S.LikelyCodeOut(**c.to_dict()) for c in res.codes],
        cases=[S.SimilarCaseOut(**c.to_dict(), document_url=document_url(c.doc_id)) for c in res.cases])
