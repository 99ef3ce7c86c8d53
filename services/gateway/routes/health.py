"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.gateway.clients import check_health
from services.gateway.routes import services


async def health(request: Request) -> JSONResponse:
    """The process is up; says nothing about its dependencies."""
    return JSONResponse({"status": "ok"})


async def ready(request: Request) -> JSONResponse:
    """200 only when both the embedder and the store report SERVING; each shown separately."""
    deps = services(request)
    embedder, store = await asyncio.gather(
        check_health(deps.embedder.channel), check_health(deps.store_channel)
    )
    is_ready = embedder == "SERVING" and store == "SERVING"
    body = {"status": "ready" if is_ready else "not_ready", "embedder": embedder, "store": store}
    return JSONResponse(body, status_code=200 if is_ready else 503)
