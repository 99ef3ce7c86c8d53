"""GET /version: what software and which model answer, from every service of the stack."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.versions import process_versions, ragd_version
from services.gateway.clients import EmbedderClient, Store
from services.gateway.errors import ApiError
from services.gateway.operations import operation
from services.gateway.routes import services
from services.pb import store_pb2

# A service that does not answer within this shows as unreachable rather than holding the reply.
TIMEOUT = 2.0


@operation("Versions of every service of the stack and its models", "Version")
async def version(request: Request) -> JSONResponse:
    """Always 200: a service that is down is reported as such, the rest still answer."""
    deps = services(request)
    names: list[str | None] = [*deps.embedders.configured_names] or [None]
    store, *embedders = await asyncio.gather(
        _store(deps.store), *(_embedder(client) for client in deps.embedders.clients)
    )
    body: dict[str, Any] = {
        "version": ragd_version(),
        "gateway": process_versions(),
        "store": store,
        "embedders": [
            {"name": name, **embedder} if name else embedder
            for name, embedder in zip(names, embedders, strict=False)
        ],
        # Whether /v1/responses and /v1/chat/completions have a model to ask (its address
        # stays private: this route is open).
        "chat": (
            {"model": deps.config.chat.model, "context_tokens": deps.config.chat.context_tokens}
            if deps.config.chat
            else None
        ),
    }
    return JSONResponse(body)


async def _store(store: Store) -> dict[str, Any]:
    try:
        status = await store.GetStatus(store_pb2.GetStatusRequest(), timeout=TIMEOUT)
    except ApiError as error:
        return {"error": error.message}
    return {**dict(status.versions), "schema_version": status.schema_version}


async def _embedder(client: EmbedderClient) -> dict[str, Any]:
    try:
        info = await client.info(refresh=True, timeout=TIMEOUT)
    except ApiError as error:
        return {"error": error.message}
    return {
        **info.versions,
        "backend": info.backend,
        "model": info.name,
        "model_digest": info.digest,
        "model_source": info.source,
    }
