"""The Starlette application: routes as data, channels in lifespan state."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from services.gateway.auth import ApiKeyMiddleware
from services.gateway.clients import EmbedderClient, StoreClient, open_channel
from services.gateway.config import GatewayConfig
from services.gateway.errors import EXCEPTION_HANDLERS
from services.gateway.routes import embeddings, health, vector_stores
from services.gateway.state import Services

ROUTES = [
    Route("/health", health.health, methods=["GET"]),
    Route("/ready", health.ready, methods=["GET"]),
    Route("/v1/embeddings", embeddings.embeddings, methods=["POST"]),
    Route("/v1/models", embeddings.models, methods=["GET"]),
    Route("/v1/vector_stores", vector_stores.create_vector_store, methods=["POST"]),
    Route("/v1/vector_stores", vector_stores.list_vector_stores, methods=["GET"]),
    Route("/v1/vector_stores/{store_id}", vector_stores.get_vector_store, methods=["GET"]),
    Route("/v1/vector_stores/{store_id}", vector_stores.delete_vector_store, methods=["DELETE"]),
    Route("/v1/vector_stores/{store_id}/files", vector_stores.attach_file, methods=["POST"]),
    Route("/v1/vector_stores/{store_id}/search", vector_stores.search, methods=["POST"]),
]


def create_app(config: GatewayConfig) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Services]]:
        embedder_channel = open_channel(config.embedder_target)
        store_channel = open_channel(config.store_target)
        try:
            yield {
                "services": Services(
                    config=config,
                    embedder=EmbedderClient(embedder_channel, config.embed_timeout),
                    store=StoreClient(store_channel, config.store_timeout),
                )
            }
        finally:
            await embedder_channel.close()
            await store_channel.close()

    return Starlette(
        routes=ROUTES,
        middleware=[Middleware(ApiKeyMiddleware, keys=config.api_keys)],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
