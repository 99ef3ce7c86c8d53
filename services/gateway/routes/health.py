"""Liveness and readiness."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.gateway.clients import check_health
from services.gateway.errors import ApiError
from services.gateway.models import store_model
from services.gateway.routes import services
from services.pb import store_pb2


async def health(request: Request) -> JSONResponse:
    """The process is up; says nothing about its dependencies."""
    return JSONResponse({"status": "ok"})


async def ready(request: Request) -> JSONResponse:
    """200 only when the default model's embedder and the store report SERVING; each shown
    separately (with several models, each model's embedders under `embedders`: one down makes
    its stores' searches lexical, not the stack unready), with the store's disk (a full one
    refuses writes, but searches go on: still ready)."""
    deps = services(request)
    store, *embedders = await asyncio.gather(
        check_health(deps.store_channel),
        *(check_health(client.channel) for client in deps.embedders.clients),
    )
    embedder = embedders[0]
    is_ready = embedder == "SERVING" and store == "SERVING"
    body: dict[str, Any] = {
        "status": "ready" if is_ready else "not_ready",
        "embedder": embedder,
        "store": store,
    }
    if len(embedders) > 1:
        names = deps.embedders.configured_names
        body["embedders"] = dict(zip(names, embedders, strict=True))
    if store == "SERVING":
        try:
            served = []
            if "SERVING" in embedders:
                served = [store_model(info) for info in await deps.embedders.served(timeout=2.0)]
            status = await deps.store.GetStatus(
                store_pb2.GetStatusRequest(served=served), timeout=2.0
            )
            body["disk"] = disk(status)
            # A store without sqlite-vec serves (lexical-only): ready, and says why.
            body["vector_index"] = "unavailable" if status.vector_index_error else "available"
            if status.vector_index_error:
                body["vector_index_error"] = status.vector_index_error
        except ApiError:
            body["disk"] = None
        else:
            if served:
                body["unserved_models"] = unserved_models(status)
    return JSONResponse(body, status_code=200 if is_ready else 503)


def unserved_models(status: store_pb2.StoreStatus) -> list[dict[str, Any]]:
    """Vector stores indexed with a model this gateway's embedders do not serve: their
    searches and uploads are refused with a 400 naming both models. The stack is still
    ready: every other store works."""
    return [
        {
            "model": use.model,
            "dimensions": use.dimensions,
            "vector_stores": use.vector_stores,
            "sample_ids": list(use.sample_ids),
        }
        for use in status.models
        if not use.served
    ]


def disk(status: store_pb2.StoreStatus) -> dict[str, Any]:
    """The store's disk, as /ready and /admin/stats show it."""
    return {
        "free_bytes": status.disk_free_bytes,
        "total_bytes": status.disk_total_bytes,
        "full": status.storage_full,
    }
