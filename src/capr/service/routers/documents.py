"""``/documents``: read one document (``reads``), add or replace and delete (``writes``: always a token)."""

from __future__ import annotations

from fastapi import APIRouter

from capr.errors import QueryError
from capr.records import Document
from capr.service import schemas as S
from capr.service.errors import NOT_FOUND, ApiError, not_found
from capr.service.routers.common import State

reads = APIRouter(tags=["documents"])
writes = APIRouter(tags=["documents"])


@reads.get("/documents/{doc_id:path}", response_model=S.DocumentOut, responses=NOT_FOUND)
def get_document(doc_id: str, state: State) -> S.DocumentOut:
    index = state.holder.store
    if not index.has_document(doc_id):
        raise not_found(doc_id)
    d = index.document(doc_id)
    sections = None if d.sections is None else [S.SectionOut(heading=s.heading, aspect=s.aspect, start=s.start, end=s.end,
                                                             section_id=s.section_id) for s in d.sections]
    return S.DocumentOut(doc_id=d.doc_id, title=d.title, text=d.text, metadata=d.metadata, sections=sections)


@writes.post("/documents", response_model=S.AddResponse, status_code=201)
def add_document(doc: S.DocumentIn, state: State) -> S.AddResponse:
    """Add a document (an existing id is replaced). Returns once the new generation is committed
    to disk and served."""
    state.readiness.wait()  # the new snapshot takes over the encoder the warm-up loads

    def write(writer) -> tuple[int, bool]:
        replaced = writer.base is not None and writer.base.has_document(doc.doc_id)
        n = writer.add(Document(doc_id=doc.doc_id, title=doc.title, text=doc.text, metadata=dict(doc.metadata)))
        if n == 0:
            raise ApiError(422, "the document yields no passages (its text has no words)", "text")
        return n, replaced

    (n, replaced), index = state.holder.write(write)
    return S.AddResponse(doc_id=doc.doc_id, passages=n, replaced=replaced, generation=index.generation_info()["generation"])


@writes.delete("/documents/{doc_id:path}", response_model=S.DeleteResponse, responses=NOT_FOUND)
def delete_document(doc_id: str, state: State) -> S.DeleteResponse:
    if not state.holder.store.has_document(doc_id):
        raise not_found(doc_id)
    state.readiness.wait()
    try:
        _, index = state.holder.write(lambda w: w.delete(doc_id))
    except QueryError:  # deleted by a concurrent request between the check and the write
        raise not_found(doc_id) from None
    return S.DeleteResponse(doc_id=doc_id, deleted=True, generation=index.generation_info()["generation"])
