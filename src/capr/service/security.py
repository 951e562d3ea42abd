"""Bearer-token authentication as a route dependency: writes always need a token, reads with ``--auth-reads``;
a client that keeps sending bad tokens is held off (``AuthThrottle``)."""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from capr.service.errors import AUTH_ERRORS, BUSY, ERRORS, ApiError
from capr.service.state import ServiceState

log = logging.getLogger("capr.service")
bearer = HTTPBearer(auto_error=False, description="An API token from $CAPR_API_TOKENS or --token-file.")


def require_token(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> None:
    state: ServiceState = request.app.state.service
    if not request.headers.get("authorization"):
        raise ApiError(401, "missing bearer token: send 'Authorization: Bearer <token>'", "authorization",
                       headers={"WWW-Authenticate": "Bearer"})
    # per client address (behind a reverse proxy: the proxy's, unless uvicorn is told to trust it)
    client = request.client.host if request.client else "unknown"
    throttle = state.throttle
    if throttle.retry_after(client) > 0:
        # decided before the token is looked at, so a blocked client learns nothing of the tokens it sends
        # (a valid one would otherwise stand out at full speed); each try lengthens the block, and Retry-After
        # is the whole wait from now
        secs = _seconds(throttle.failed(client))
        raise ApiError(429, f"too many failed authentication attempts from this client; retry after {secs} s",
                       "authorization", headers={"Retry-After": secs})
    if creds is not None and state.tokens and state.tokens.matches(creds.credentials):
        throttle.succeeded(client)
        return
    if creds is None:
        _refused(state, client, 401, "the Authorization header must use the Bearer scheme", {"WWW-Authenticate": "Bearer"})
    if not state.tokens:
        raise ApiError(403, "writes are disabled: the server has no API tokens (set CAPR_API_TOKENS or --token-file)",
                       "authorization")
    _refused(state, client, 403, "invalid token")


def _refused(state: ServiceState, client: str, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    wait = state.throttle.failed(client)
    if wait:
        log.warning("client %s: too many failed token checks; refused for %.0f s", client, wait)
        headers = {**(headers or {}), "Retry-After": _seconds(wait)}
    raise ApiError(status, detail, "authorization", headers=headers)


def _seconds(wait: float) -> str:
    return str(max(1, math.ceil(wait)))


def read_access(auth_reads: bool) -> dict[str, Any]:
    """``include_router`` arguments for routes that read the index: a token with ``--auth-reads``."""
    return {"dependencies": [Depends(require_token)] if auth_reads else [],
            "responses": {**ERRORS, **(AUTH_ERRORS if auth_reads else {})}}


def write_access() -> dict[str, Any]:
    """``include_router`` arguments for routes that write: always a token."""
    return {"dependencies": [Depends(require_token)], "responses": {**ERRORS, **AUTH_ERRORS, **BUSY}}
