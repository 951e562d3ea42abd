"""What every router uses: the served state as a dependency, and links to documents."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request

from capr.service.state import ServiceState


async def service_state(request: Request) -> ServiceState:
    return request.app.state.service


State = Annotated[ServiceState, Depends(service_state)]


def document_url(doc_id: str) -> str:
    return "/documents/" + quote(doc_id, safe="")
