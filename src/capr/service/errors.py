"""The service's error shapes: ``{"detail", "field"}`` for client errors, 422 without pydantic's input echo, 500 with
an error id only; and the error responses each route publishes in the OpenAPI spec."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from capr.errors import BadInputError, CaprError, QueryError
from capr.service import schemas as S
from capr.service.state import WriteBusy

log = logging.getLogger("capr.service")


class ApiError(StarletteHTTPException):
    """A client error with the request field at fault (reported as ``{"detail", "field"}``)."""

    def __init__(self, status_code: int, detail: str, field: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status_code, detail=detail, headers=headers)
        self.field = field


class BodyTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes", "body")


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


def not_found(doc_id: str) -> ApiError:
    return ApiError(404, f"no document with id {doc_id!r}", "doc_id")


def server_paths(index_dir: str | Path) -> Callable[[str], str]:
    """A message as a client may read it: the server's path to the index (which can name a ward, a patient or a
    user's home) becomes the index's folder name."""
    path = Path(index_dir)
    spellings = sorted({str(path), str(path.absolute()), str(path.resolve())} - {"", "."}, key=len, reverse=True)

    def private(message: str) -> str:
        for spelled in spellings:
            message = message.replace(spelled, path.name or "index")
        return message

    return private


def _private(request: Request, message: str) -> str:
    return request.app.state.service.private(message)


def _loc(loc: tuple | list) -> str:
    return ".".join(str(x) for x in loc)


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    # pydantic's "input" is left out: it would echo (patient) text back; loc names the field
    items = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "invalid"), "type": e.get("type", "value_error")}
             for e in exc.errors()]
    first = items[0] if items else {"loc": [], "msg": "invalid request"}
    return JSONResponse(status_code=422, content={"detail": items, "message": f"{_loc(first['loc'])}: {first['msg']}"})


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        # GET and DELETE /documents/{id} are two routes: Allow must list the methods of both
        path = request.scope.get("path", "")
        methods = {m for r in request.app.state.api_routes if r.path_regex.match(path) for m in r.methods}
        headers["Allow"] = ", ".join(sorted(methods))
    return JSONResponse(status_code=exc.status_code, headers=headers or None,
                        content={"detail": _private(request, str(exc.detail)), "field": getattr(exc, "field", None)})


async def _query(request: Request, exc: CaprError) -> JSONResponse:
    return JSONResponse(status_code=400, content={"detail": _private(request, str(exc)), "field": None})


async def _busy(request: Request, exc: WriteBusy) -> JSONResponse:
    return JSONResponse(status_code=503, headers={"Retry-After": "5"},
                        content={"detail": _private(request, str(exc)), "field": None})


async def _capr(request: Request, exc: CaprError) -> JSONResponse:
    # an index problem (corrupt or missing files), not the client's fault
    error_id = uuid.uuid4().hex[:12]
    log.error("%s (error id %s): %s", type(exc).__name__, error_id, exc)
    return JSONResponse(status_code=500, content={"detail": f"index error (error id {error_id})", "field": None})


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http)  # type: ignore[arg-type]
    app.add_exception_handler(BadInputError, _query)  # type: ignore[arg-type]
    app.add_exception_handler(QueryError, _query)  # type: ignore[arg-type]
    app.add_exception_handler(WriteBusy, _busy)  # type: ignore[arg-type]
    app.add_exception_handler(CaprError, _capr)  # type: ignore[arg-type]
