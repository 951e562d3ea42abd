"""The outermost ASGI layer: the Host check, the request size limit, security headers, one log line per request and
a last-resort 500."""

from __future__ import annotations

import json
import logging
import time
import traceback
import uuid
from collections.abc import Callable

from capr.service.config import HostPolicy
from capr.service.errors import ApiError, BodyTooLarge

log = logging.getLogger("capr.service")

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
            self._check_host(headers.get(b"host"))
            await self.app(scope, self._limited(receive, headers.get(b"content-length")), send_wrapper)
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

    def _check_host(self, host: bytes | None) -> None:
        refusal = self.hosts.refusal(None if host is None else host.decode("latin-1"))
        if refusal:
            # before routing: a page served under another name (DNS rebinding) reads nothing, not even /health
            raise ApiError(421, refusal, "host")

    def _limited(self, receive: Callable, length: bytes | None) -> Callable:
        """``receive``, refusing a body over the limit: up front by its Content-Length, else while it is read."""
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

        return receive_wrapper


async def _send_json(send: Callable, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
