"""Liveness and readiness.

Readiness means "this gateway can serve": the store answers. A missing embedder or chat
upstream is reported (the body's `degraded`, the X-Ragd-Degraded header, the
ragd_dependency_up gauge) but keeps the gateway ready: searches fall back to lexical, reads,
uploads and conversations go on, and a gateway taken out of its load balancer would lose all
of those with the one thing that is missing. `?require=embedder` (or `chat`; comma-separated
or repeated) makes a dependency required, for callers that need it: a deploy gate, a test
waiting for a restarted embedder.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.gateway import metrics, objects_admin
from services.gateway.clients import check_health
from services.gateway.errors import ApiError, invalid
from services.gateway.models import store_model
from services.gateway.operations import operation, query_param
from services.gateway.routes import services
from services.gateway.routes.vector_stores import DEGRADED_HEADER
from services.gateway.search import EMBEDDER_UNAVAILABLE, VECTOR_INDEX_UNAVAILABLE
from services.pb import store_pb2

SERVING = "SERVING"
# What `require` can name; the store is always required.
REQUIRABLE = ("store", "embedder", "chat")
CHAT_UNAVAILABLE = "chat-unavailable"
# A dependency that does not answer within this is reported down; kept short so that a hung
# one (SIGSTOP, a partition) costs a probe about a second, well inside its timeout.
CHECK_TIMEOUT = 1.0


@operation("Liveness: the gateway process is up", "Health")
async def health(request: Request) -> JSONResponse:
    """The process is up; says nothing about its dependencies."""
    return JSONResponse({"status": "ok"})


def _required(request: Request) -> set[str]:
    names = {
        name.strip()
        for value in request.query_params.getlist("require")
        for name in value.split(",")
        if name.strip()
    }
    unknown = sorted(names - set(REQUIRABLE))
    if unknown:
        raise invalid(
            f"'require' names {', '.join(repr(n[:40]) for n in unknown[:3])}; it takes "
            f"{', '.join(REQUIRABLE)} (comma-separated or repeated)",
            param="require",
        )
    return names | {"store"}


@operation(
    "Readiness: 200 while the store serves (degraded: what is missing), 503 when it "
    "does not or a required dependency is down",
    "Readiness",
    other={"503": "Readiness"},
    query=[
        query_param(
            "require",
            {"type": "string", "pattern": "^(store|embedder|chat)(,(store|embedder|chat))*$"},
            "dependencies that must be up too, comma-separated: embedder, chat",
        )
    ],
)
async def ready(request: Request) -> JSONResponse:
    """200 while the store serves: `status` ready, or degraded with the reasons listed (the
    default model's embedder, a chat upstream, sqlite-vec). 503 when the store does not, or a
    dependency named in `require` is down. Each embedder shown (with several models, each
    model's under `embedders`), with the store's disk (a full one refuses writes, but searches
    go on: still ready)."""
    required = _required(request)
    deps = services(request)
    store, chat, *embedders = await asyncio.gather(
        check_health(deps.store_channel, timeout=CHECK_TIMEOUT),
        _chat(request),
        *(check_health(client.channel, timeout=CHECK_TIMEOUT) for client in deps.embedders.clients),
    )
    embedder = embedders[0]
    up = {"store": store == SERVING, "embedder": embedder == SERVING, "chat": chat == SERVING}
    degraded = []
    if not up["embedder"]:
        degraded.append(EMBEDDER_UNAVAILABLE)
    if chat is not None and not up["chat"]:
        degraded.append(CHAT_UNAVAILABLE)
    body: dict[str, Any] = {"embedder": embedder, "store": store, "chat": chat}
    states = {"store": up["store"], "embedder": up["embedder"]}
    if chat is not None:
        states["chat"] = up["chat"]
    if len(embedders) > 1:
        names = deps.embedders.configured_names
        body["embedders"] = dict(zip(names, embedders, strict=True))
        states |= {f"embedder:{n}": s == SERVING for n, s in body["embedders"].items()}
    if up["store"]:
        try:
            served = []
            if SERVING in embedders:
                served = [store_model(info) for info in await deps.embedders.served(timeout=2.0)]
            status = await deps.store.GetStatus(
                store_pb2.GetStatusRequest(served=served), timeout=2.0
            )
            body["disk"] = objects_admin.disk(status)
            body["engine"] = status.versions.get("engine", "sqlite")
            # A store without sqlite-vec serves (lexical-only): ready, and says why.
            body["vector_index"] = "unavailable" if status.vector_index_error else "available"
            if status.vector_index_error:
                body["vector_index_error"] = status.vector_index_error
                degraded.append(VECTOR_INDEX_UNAVAILABLE)
        except ApiError:
            body["disk"] = None
        else:
            if served:
                body["unserved_models"] = unserved_models(status)
    metrics.dependencies(states)
    is_ready = all(up[name] for name in required)
    status_name = "not_ready" if not is_ready else "degraded" if degraded else "ready"
    body = {"status": status_name, "degraded": degraded, **body}
    headers = {DEGRADED_HEADER: ", ".join(degraded)} if degraded else None
    return JSONResponse(body, status_code=200 if is_ready else 503, headers=headers)


async def _chat(request: Request) -> str | None:
    """The chat upstream's state; None when none is configured."""
    chat = services(request).chat
    if chat is None:
        return None
    return SERVING if await chat.answers(timeout=CHECK_TIMEOUT) else "UNAVAILABLE"


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
