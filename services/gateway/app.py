"""The Starlette application: routes as data, channels and workers in lifespan state."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware

from services.common import tracing
from services.gateway import ingest_server
from services.gateway.attach import Attacher
from services.gateway.audit import AuditLog, AuditMiddleware
from services.gateway.auth import ApiKeyMiddleware
from services.gateway.chat.background import BackgroundRuns
from services.gateway.chat.upstream import ChatUpstream
from services.gateway.clients import EmbedderClient, open_channel, store_stub
from services.gateway.config import GatewayConfig
from services.gateway.embed_cache import EmbeddingCache
from services.gateway.embedders import Embedders
from services.gateway.history_index import HistoryIndexer
from services.gateway.http_errors import EXCEPTION_HANDLERS
from services.gateway.keys import STATE_TIMEOUT, Keys, RateLimits, Usage
from services.gateway.metrics import HttpMetrics, metrics
from services.gateway.metrics import TemplatedRoute as Route
from services.gateway.openapi import openapi
from services.gateway.routes import (
    admin,
    chat,
    console,
    conversations,
    embeddings,
    file_batches,
    files,
    health,
    keys,
    responses,
    vector_store_files,
    vector_stores,
    version,
)
from services.gateway.state import Services
from services.gateway.worker import IngestWorkers, WorkerSettings
from services.pb import store_pb2

log = logging.getLogger(__name__)

VS = "/v1/vector_stores/{vector_store_id}"
CONV = "/v1/conversations/{conversation_id}"
RESP = "/v1/responses/{response_id}"
ROUTES = [
    Route("/health", health.health, methods=["GET"]),
    Route("/ready", health.ready, methods=["GET"]),
    Route("/version", version.version, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
    Route("/admin/backup", admin.backup, methods=["POST"]),
    Route("/admin/restore", admin.restore, methods=["POST"]),
    Route("/admin/backups", admin.list_backups, methods=["GET"]),
    Route("/admin/backups/content", admin.download_backup, methods=["GET"]),
    Route("/admin/vacuum", admin.vacuum, methods=["POST"]),
    Route("/admin/keys", keys.create_key, methods=["POST"]),
    Route("/admin/keys", keys.list_keys, methods=["GET"]),
    Route("/admin/keys/{name}", keys.revoke_key, methods=["DELETE"]),
    Route("/admin/projects", keys.create_project, methods=["POST"]),
    Route("/admin/projects", keys.list_projects, methods=["GET"]),
    Route("/admin/stats", admin.stats, methods=["GET"]),
    Route("/admin/audit", admin.audit, methods=["GET"]),
    Route("/v1/embeddings", embeddings.embeddings, methods=["POST"]),
    Route("/v1/models", embeddings.models, methods=["GET"]),
    Route("/v1/models/{model}", embeddings.model, methods=["GET"]),
    Route("/v1/files", files.create_file, methods=["POST"]),
    Route("/v1/files", files.list_files, methods=["GET"]),
    Route("/v1/files/{file_id}", files.get_file, methods=["GET"]),
    Route("/v1/files/{file_id}", files.delete_file, methods=["DELETE"]),
    Route("/v1/files/{file_id}/content", files.file_content, methods=["GET"]),
    Route("/v1/vector_stores", vector_stores.create_vector_store, methods=["POST"]),
    Route("/v1/vector_stores", vector_stores.list_vector_stores, methods=["GET"]),
    Route(VS, vector_stores.get_vector_store, methods=["GET"]),
    Route(VS, vector_stores.update_vector_store, methods=["POST"]),
    Route(VS, vector_stores.delete_vector_store, methods=["DELETE"]),
    Route(VS + "/search", vector_stores.search_vector_store, methods=["POST"]),
    Route(VS + "/reindex", vector_stores.reindex_vector_store, methods=["POST"]),
    Route(VS + "/reindex/cancel", vector_stores.cancel_reindex, methods=["POST"]),
    Route(VS + "/files", vector_store_files.attach_file, methods=["POST"]),
    Route(VS + "/files", vector_store_files.list_files, methods=["GET"]),
    Route(VS + "/files/{file_id}", vector_store_files.get_file, methods=["GET"]),
    Route(VS + "/files/{file_id}", vector_store_files.update_file, methods=["POST"]),
    Route(VS + "/files/{file_id}", vector_store_files.delete_file, methods=["DELETE"]),
    Route(VS + "/files/{file_id}/content", vector_store_files.file_content, methods=["GET"]),
    Route(VS + "/file_batches", file_batches.create_batch, methods=["POST"]),
    Route(VS + "/file_batches/{batch_id}", file_batches.get_batch, methods=["GET"]),
    Route(VS + "/file_batches/{batch_id}/cancel", file_batches.cancel_batch, methods=["POST"]),
    Route(VS + "/file_batches/{batch_id}/files", vector_store_files.list_files, methods=["GET"]),
    Route("/v1/conversations", conversations.create_conversation, methods=["POST"]),
    Route("/v1/conversations", conversations.list_conversations, methods=["GET"]),
    Route("/v1/conversations/search", conversations.search_history, methods=["POST"]),
    Route(CONV, conversations.get_conversation, methods=["GET"]),
    Route(CONV, conversations.update_conversation, methods=["POST"]),
    Route(CONV, conversations.delete_conversation, methods=["DELETE"]),
    Route(CONV + "/search", conversations.search_history, methods=["POST"]),
    Route(CONV + "/items", conversations.create_items, methods=["POST"]),
    Route(CONV + "/items", conversations.list_items, methods=["GET"]),
    Route(CONV + "/items/{item_id}", conversations.get_item, methods=["GET"]),
    Route(CONV + "/items/{item_id}", conversations.delete_item, methods=["DELETE"]),
    Route("/v1/responses", responses.create_response, methods=["POST"]),
    Route(RESP, responses.get_response, methods=["GET"]),
    Route(RESP, responses.delete_response, methods=["DELETE"]),
    Route(RESP + "/input_items", responses.list_input_items, methods=["GET"]),
    Route(RESP + "/cancel", responses.cancel_response, methods=["POST"]),
    Route("/v1/chat/completions", chat.chat_completions, methods=["POST"]),
]


def tracing_middleware() -> list[Middleware]:
    """A server span per request (outermost, so it covers the rest) when tracing is on;
    HttpMetrics names it after the route template once routing found one."""
    return [Middleware(tracing.HttpSpans)] if tracing.enabled() else []


def create_app(config: GatewayConfig) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Services]]:
        token, tls = config.service_token, config.tls
        embedder_channels = [
            (spec.name, open_channel(spec.target, "embedder", config.embed_timeout, token, tls))
            for spec in config.embedder_specs
        ]
        store_channel = open_channel(config.store_target, "store", config.store_timeout, token, tls)
        embedders = Embedders(
            [(name, EmbedderClient(channel)) for name, channel in embedder_channels],
            config.embedding_model_aliases,
        )
        embedder = embedders.default
        store = store_stub(store_channel)
        audit = AuditLog(store)
        key_usage = Usage(store.RecordKeyUsage)
        workers = IngestWorkers(
            embedders,
            store,
            WorkerSettings(
                workers=config.ingest_workers,
                lease_seconds=config.ingest_lease_seconds,
                poll_seconds=config.ingest_poll_seconds,
                batch_size=config.embed_batch_size,
                full_disk_retry_seconds=config.ingest_full_disk_retry_seconds,
            ),
            cache=EmbeddingCache(store) if config.embed_cache else None,
            audit=audit,
            usage=key_usage,
        )
        audit.start()
        workers.start()

        async def lookup(secret: str) -> store_pb2.ApiKey:
            found: store_pb2.ApiKey = await store.AuthenticateApiKey(
                store_pb2.AuthenticateApiKeyRequest(secret=secret)
            )
            return found

        async def state() -> store_pb2.KeyState:
            # Revoked keys count: revoking the last key must not open the API to everyone.
            found: store_pb2.KeyState = await store.GetKeyState(
                store_pb2.GetKeyStateRequest(), timeout=STATE_TIMEOUT
            )
            return found

        key_usage.start()
        deps = Services(
            config,
            embedders,
            store,
            store_channel,
            workers,
            audit,
            Attacher(store, embedders, workers),
            Keys(config.api_keys, lookup, state, time.monotonic),
            RateLimits(),
            key_usage,
            ChatUpstream(config.chat) if config.chat else None,
            HistoryIndexer(embedder, store, config.ingest_poll_seconds)
            if config.ingest_workers
            else None,
        )
        if deps.history is not None:
            deps.history.start()
        if config.chat is not None:
            deps.background = BackgroundRuns(store, config.chat.background_lease_seconds)
        grpc_server = None
        try:
            if config.ingest_listen.lower() != "off":
                grpc_server, port = await ingest_server.create_server(config, deps)
                log.info("bulk ingest (gRPC) on %s, port %d", config.ingest_listen, port)
                # Reported by server.py: the port is only known here when it was 0.
                app.state.ingest_port = port
            yield {"services": deps}
        finally:
            if grpc_server is not None:
                # Open streams end here; what they had acknowledged is already in the store.
                await grpc_server.stop(5)
            await workers.stop()
            await audit.stop()
            await key_usage.stop()
            if deps.history is not None:
                await deps.history.stop()
            if deps.background is not None:
                await deps.background.stop()
            if deps.chat is not None:
                await deps.chat.close()
            for _, channel in embedder_channels:
                await channel.close()
            await store_channel.close()

    app = Starlette(
        # The web console (static pages over the API above): not an API operation, so not
        # in ROUTES, which /openapi.json describes.
        routes=[*ROUTES, console.ROUTE],
        middleware=[
            *tracing_middleware(),
            Middleware(HttpMetrics),
            Middleware(AuditMiddleware),
            Middleware(ApiKeyMiddleware),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    # An API answers an unknown path with a JSON 404, not a redirect to a path without the
    # trailing slash (which also turned "/v1/files/..%2f" into a bare 307).
    app.router.redirect_slashes = False
    return app
