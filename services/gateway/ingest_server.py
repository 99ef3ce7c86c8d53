"""The public gRPC bulk-ingest API (protos/ingest.proto), served inside the gateway process.

It runs on the gateway's event loop, started and stopped by the Starlette lifespan, and shares
the gateway's channels, ingest workers and API keys. The servicer only converts messages: the
session logic is in bulk.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from services.common.grpc_server import MAX_MESSAGE_BYTES, Context, add_health, set_serving
from services.common.metrics import MetricsInterceptor
from services.common.security import AUTHORIZATION
from services.common.tracing import server_interceptors
from services.gateway import errors
from services.gateway.bulk import Document, IngestSession, Progress, State, Summary
from services.gateway.config import GatewayConfig
from services.gateway.keys import Principal, act_for, admit
from services.gateway.parsing import SUPPORTED
from services.gateway.state import Services
from services.pb import ingest_pb2 as pb
from services.pb import ingest_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = "ragd.ingest.v1.Ingest"
# A stream's document waits this long at most for its key's per-minute limit; longer (a daily
# limit) ends the stream.
RATE_WAIT_SECONDS = 61

_STATES = {
    State.ACCEPTED: pb.DOCUMENT_STATE_ACCEPTED,
    State.COMPLETED: pb.DOCUMENT_STATE_COMPLETED,
    State.UNCHANGED: pb.DOCUMENT_STATE_UNCHANGED,
    State.FAILED: pb.DOCUMENT_STATE_FAILED,
}

# The gateway's errors as gRPC statuses: the one place kinds get codes on this door.
_STATUS: list[tuple[type[errors.ApiError], grpc.StatusCode]] = [
    (errors.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.TooLarge, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.Refused, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.Conflict, grpc.StatusCode.ABORTED),
    (errors.Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.StorageFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.Timeout, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.NotImplementedHere, grpc.StatusCode.UNIMPLEMENTED),
]


def status_for(error: errors.ApiError) -> grpc.StatusCode:
    for kind, code in _STATUS:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


def _document(request: pb.IngestRequest) -> Document:
    message = request.document
    kind = message.WhichOneof("content")
    content = (
        message.data
        if kind == "data"
        else message.text.encode("utf-8", errors="surrogatepass")
        if kind == "text"
        else None
    )
    chunking = None
    if message.HasField("chunking"):
        static = message.chunking
        chunking = {
            "type": "static",
            "static": {
                "max_chunk_size_tokens": static.max_chunk_size_tokens,
                "chunk_overlap_tokens": static.chunk_overlap_tokens,
            },
        }
    attrs: dict[str, Any] = {}
    for key, value in message.attributes.items():
        which = value.WhichOneof("kind")
        attrs[key] = getattr(value, which) if which else None
    return Document(
        ref=message.ref,
        vector_store=message.vector_store,
        filename=message.filename,
        content=content,
        attributes=attrs,
        chunking=chunking,
    )


def _response(event: Progress | Summary) -> pb.IngestResponse:
    if isinstance(event, Summary):
        return pb.IngestResponse(
            summary=pb.IngestSummary(
                documents=event.documents,
                completed=event.completed,
                unchanged=event.unchanged,
                failed=event.failed,
                chunks=event.chunks,
                seconds=event.seconds,
            )
        )
    progress = pb.DocumentProgress(
        index=event.index,
        ref=event.ref,
        state=_STATES[event.state],
        vector_store_id=event.vector_store_id,
        file_id=event.file_id,
        chunks=event.chunks,
        duplicate=event.duplicate,
    )
    if event.state is State.FAILED:
        progress.error.CopyFrom(pb.Error(code=event.error_code, message=event.error_message))
    return pb.IngestResponse(document=progress)


def _bearer(context: Context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION:
            text = value if isinstance(value, str) else value.decode("latin-1")
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


class IngestServicer(ingest_pb2_grpc.IngestServicer):
    def __init__(self, deps: Services) -> None:
        self._deps = deps

    async def _admit(self, token: str, scope: str, *, wait: bool = False) -> Principal | None:
        """The REST API's keys and rules on this door: the key of `authorization: Bearer
        <key>` metadata, its scope and limits (keys.admit); raises the refusal. With `wait`, a
        per-minute limit holds the caller back instead (a stream's next document). The key,
        or None when the API is open."""
        deps = self._deps
        while True:
            if not await deps.keys.required():
                return None
            who = await deps.keys.identify(token) if token else None
            if who is None:
                raise errors.Unauthenticated(
                    "missing API key: send the metadata 'authorization: Bearer <key>'"
                    if not token
                    else "invalid API key (it may have been revoked)"
                )
            refusal = admit(who, scope, deps.rate_limits, deps.key_usage)
            if (
                wait
                and isinstance(refusal, errors.Overloaded)
                and refusal.retry_after is not None
                and refusal.retry_after <= RATE_WAIT_SECONDS
            ):
                await asyncio.sleep(refusal.retry_after)
                continue
            if refusal is not None:
                raise refusal
            deps.key_usage.count(who.name)
            return who

    async def _authorize(self, context: Context, scope: str) -> Principal | None:
        """_admit for a call's metadata; aborts the call when refused."""
        try:
            who = await self._admit(_bearer(context), scope)
        except errors.ApiError as error:
            await context.abort(status_for(error), error.message)
        act_for(who)
        return who

    async def Info(self, request: pb.InfoRequest, context: Context) -> pb.InfoResponse:
        await self._authorize(context, "read")
        try:
            model = await self._deps.embedder.info()
        except errors.ApiError as error:
            await context.abort(status_for(error), error.message)
        config = self._deps.config
        return pb.InfoResponse(
            model=model.name,
            dimensions=model.dimensions,
            max_input_tokens=model.max_input_tokens,
            max_document_bytes=config.max_upload_bytes,
            supported_suffixes=["", *SUPPORTED],
            window=config.ingest_window,
        )

    async def IngestDocuments(
        self,
        request_iterator: AsyncIterator[pb.IngestRequest],
        context: Context,
    ) -> AsyncIterator[pb.IngestResponse]:
        who = await self._authorize(context, "write")
        token = _bearer(context)

        async def documents() -> AsyncIterator[Document]:
            async for request in request_iterator:
                yield _document(request)

        async def recheck() -> Principal | None:
            # Each document: the key again (a revocation ends the stream within a second)
            # and one request against its per-minute limit.
            return await self._admit(token, "write", wait=True)

        config = self._deps.config
        session = IngestSession(
            self._deps,
            config.ingest_window,
            config.ingest_poll_seconds,
            principal=who,
            admit=recheck if who is not None else None,
        )
        async with contextlib.aclosing(session.run(documents())) as events:
            try:
                async for event in events:
                    yield _response(event)
            except errors.ApiError as error:
                await context.abort(status_for(error), error.message)


async def create_server(config: GatewayConfig, deps: Services) -> tuple[grpc.aio.Server, int]:
    """Starts the ingest server on config.ingest_listen; SERVING once it listens."""
    server = grpc.aio.server(
        # The REST API's keys are checked by the servicer (they live in the store).
        interceptors=[*server_interceptors(), MetricsInterceptor()],
        options=[
            # A document may be as large as an upload; the stream's window bounds how many wait.
            (
                "grpc.max_receive_message_length",
                max(MAX_MESSAGE_BYTES, config.max_upload_bytes + (1 << 20)),
            ),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # Two gateways on one address must not silently share it: the second fails.
            ("grpc.so_reuseport", 0),
        ],
    )
    ingest_pb2_grpc.add_IngestServicer_to_server(IngestServicer(deps), server)
    health = add_health(server)
    try:
        port = server.add_insecure_port(config.ingest_listen)
    except RuntimeError as error:
        raise RuntimeError(
            f"cannot listen on RAGD_INGEST_LISTEN={config.ingest_listen}: {error}; "
            "set another address, or 'off' to serve no gRPC ingest"
        ) from None
    await server.start()
    await set_serving(health, [SERVICE_NAME], True)
    return server, port
