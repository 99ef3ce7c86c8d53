"""gRPC clients for the embedder and the store: channels, deadlines, error translation.

Every call goes through one interceptor that applies the channel's default deadline and turns
a failed call into the gateway's errors (errors.py), so nothing above this module sees gRPC.
The store is used through its typed stub (`Store`); the embedder through EmbedderClient,
which also decodes and checks its replies.
"""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import tracing
from services.common.grpc_server import MAX_MESSAGE_BYTES
from services.common.model_info import ModelInfo
from services.common.security import TlsFiles, bearer_metadata
from services.common.vectors import FloatMatrix, from_bytes
from services.gateway import errors
from services.gateway.keys import acting_metadata
from services.pb import embedder_pb2, embedder_pb2_grpc, store_pb2_grpc

if TYPE_CHECKING:
    from typing import TypeAlias

    from services.pb.embedder_pb2_grpc import EmbedderAsyncStub
    from services.pb.store_pb2_grpc import StoreAsyncStub

    # The store's typed stub (the generated class exists only in its type stub).
    Store: TypeAlias = StoreAsyncStub
else:
    Store = Any

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")

# The store's methods that only read, so that a call UNAVAILABLE from one store (dead,
# restarting) is sent again, to another where the target names several (several stores of
# one PostgreSQL database; issue 31). A write is never retried here: the store may have
# committed it before the connection broke, and only its caller knows how to check.
STORE_READS = (
    "GetVectorStore",
    "ListVectorStores",
    "Search",
    "GetFile",
    "ListFiles",
    "GetFileContent",
    "GetVectorStoreFile",
    "ListVectorStoreFiles",
    "GetVectorStoreFileChunks",
    "GetFileBatch",
    "GetCachedEmbeddings",
    "ListAudit",
    "GetStats",
    "GetStatus",
    "AuthenticateApiKey",
    "ListApiKeys",
    "GetKeyState",
    "ListProjects",
    "ListBackups",
    "GetConversation",
    "ListConversations",
    "ListItems",
    "GetItem",
    "SearchHistory",
    "GetResponse",
    "ListResponseInputItems",
    "GetHistory",
)

# round_robin spreads calls over every address the target resolves to (several embedder
# replicas, several stores); health checking skips those that are not SERVING; UNAVAILABLE
# is retried for the idempotent methods named here.
_SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": ""},
    "methodConfig": [
        {
            "name": [
                {"service": "ragd.embedder.v1.Embedder"},
                *({"service": "ragd.store.v1.Store", "method": name} for name in STORE_READS),
            ],
            "retryPolicy": {
                "maxAttempts": 5,
                "initialBackoff": "0.05s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ],
}


# "dns:", "ipv4:", "unix:"... but not the "host:" of "host:port".
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:(?!\d+(,|$))")


def channel_target(target: str) -> str:
    """The gRPC target for a configured one; a comma-separated list becomes one target.

    gRPC balances over the addresses one target resolves to, and only an `ipv4:`/`ipv6:`
    target lists several, so the hostnames of a list are resolved here, once (IPv4 preferred).
    `dns:///name:port` (or a single `host:port`) is left to gRPC's resolver, which follows
    changes: use that for names whose addresses come and go, like compose replicas.
    """
    if "," not in target or _SCHEME.match(target):
        return target
    ipv4: list[str] = []
    ipv6: list[str] = []
    for part in (p.strip() for p in target.split(",")):
        host, _, port = part.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            raise ValueError(f"{part!r} in target {target!r} is not host:port")
        try:
            found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except OSError as error:
            raise ValueError(f"cannot resolve {host!r} in target {target!r}: {error}") from None
        v4 = [f"{a[4][0]}:{port}" for a in found if a[0] == socket.AF_INET]
        v6 = [f"[{a[4][0]}]:{port}" for a in found if a[0] == socket.AF_INET6]
        if v4:
            ipv4 += [address for address in v4 if address not in ipv4]
        else:
            ipv6 += [address for address in v6 if address not in ipv6]
    if ipv4 and ipv6:
        raise ValueError(f"target {target!r} mixes IPv4 and IPv6-only hosts; use one family")
    return "ipv4:" + ",".join(ipv4) if ipv4 else "ipv6:" + ",".join(ipv6)


def open_channel(
    target: str,
    service: str,
    timeout: float,
    token: str | None = None,
    tls: TlsFiles | None = None,
) -> grpc.aio.Channel:
    """A channel to `service` ("store" or "embedder") whose calls have a `timeout` deadline
    unless they pass their own, carry the service `token`, and raise errors.ApiError kinds
    instead of gRPC errors; over TLS with `tls` (this gateway's certificate, the CA)."""
    options = [
        ("grpc.service_config", json.dumps(_SERVICE_CONFIG)),
        ("grpc.enable_retries", 1),
        # gRPC retries only what it still holds in memory (256 KiB per call by default): a
        # larger Embed caught by a dying replica would fail instead of moving to another.
        ("grpc.per_rpc_retry_buffer_size", MAX_MESSAGE_BYTES),
        # A restarted service is reconnected within a couple of seconds, not gRPC's default
        # backoff of up to two minutes.
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 2000),
        # Also the deadline of each connection attempt (gRPC's MIN_CONNECT_TIMEOUT, 20 s by
        # default): an attempt at the address of a container that is gone gets no answer at
        # all, and only after this does gRPC re-resolve the name and find the new address.
        ("grpc.min_reconnect_backoff_ms", 3000),
        # A dns:/// target is re-resolved when a connection drops (a replica restarted with
        # a new address, or a GOAWAY after the embedder's max connection age): at most every
        # 5 s rather than gRPC's default 30 s.
        ("grpc.dns_min_time_between_resolutions_ms", 5000),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
    interceptors: list[grpc.aio.ClientInterceptor] = [
        _Translate(service, timeout, token),
        _StreamMetadata(service, token),
    ]
    if tls is not None:
        credentials = tls.channel_credentials()
        return grpc.aio.secure_channel(
            channel_target(target), credentials, options=options, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(
        channel_target(target), options=options, interceptors=interceptors
    )


# Trailing metadata of an Embed refused for an over-long input (see protos/embedder.proto).
_REASON_KEY = "ragd-reason"
_INPUT_TOO_LONG = "input-too-long"
_INPUT_KEY = "ragd-input"
_STORAGE_FULL = "storage-full"
_UPSTREAM = "upstream"
_MODEL_MISMATCH = "model-mismatch"
_DATABASE_UNAVAILABLE = "database-unavailable"
# Seconds after which a write refused for a full disk is worth retrying.
STORAGE_RETRY_SECONDS = 30

# gRPC status -> the error kind. Client errors pass the service's message through: the
# services write those for users. Server errors get a message of our own.
_KINDS: dict[grpc.StatusCode, type[errors.ApiError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidRequest,
    grpc.StatusCode.OUT_OF_RANGE: errors.InvalidRequest,
    grpc.StatusCode.FAILED_PRECONDITION: errors.Refused,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: errors.Conflict,
    grpc.StatusCode.ABORTED: errors.Conflict,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.Overloaded,
    grpc.StatusCode.UNIMPLEMENTED: errors.NotImplementedHere,
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
    grpc.StatusCode.CANCELLED: errors.Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.Timeout,
}
_CODES = {grpc.StatusCode.ALREADY_EXISTS: "already_exists"}


def from_grpc(error: grpc.aio.AioRpcError, service: str) -> errors.ApiError:
    """A failed call to `service` as the gateway's error."""
    kind = _KINDS.get(error.code(), errors.Internal)
    details = error.details() or ""
    if kind is errors.InvalidRequest and _trailer(error, _REASON_KEY) == _INPUT_TOO_LONG:
        numbers = (_trailer(error, _INPUT_KEY) or "0 0 0").split()
        index, tokens, limit = (int(n) for n in numbers) if len(numbers) == 3 else (0, 0, 0)
        return errors.InputTooLong(details, index=index, tokens=tokens, limit=limit)
    if kind is errors.Refused and _trailer(error, _REASON_KEY) == _MODEL_MISMATCH:
        return errors.ModelMismatch(details)
    if kind is errors.Overloaded and _trailer(error, _REASON_KEY) == _STORAGE_FULL:
        return errors.StorageFull(details, retry_after=STORAGE_RETRY_SECONDS)
    if kind is errors.Overloaded:
        return kind(details or f"the {service} is overloaded; retry shortly", retry_after=1)
    if kind is errors.Unavailable and _trailer(error, _REASON_KEY) == _DATABASE_UNAVAILABLE:
        # The server's address and the driver's words stay in the store's log.
        return kind(
            f"the {service}'s PostgreSQL database is unavailable; retry shortly", retry_after=1
        )
    if kind in (errors.Unavailable, errors.Timeout):
        message = (
            f"the {service} service is unavailable; retry shortly"
            if kind is errors.Unavailable
            else f"the {service} service did not answer in time"
        )
        return kind(message, retry_after=1 if kind is errors.Unavailable else None)
    if kind is errors.Internal and _trailer(error, _REASON_KEY) == _UPSTREAM:
        # The embedder's own upstream failed for good (a refused key, a wrong width): its
        # message names the upstream and the setting to fix, never a secret.
        return errors.BadGateway(details)
    if kind is errors.Internal:
        log.error("%s call failed: %s %s", service, error.code(), details)
        return kind(f"internal error in the {service} service")
    return kind(details or f"the {service} refused the request", code=_CODES.get(error.code()))


def _trailer(error: grpc.aio.AioRpcError, name: str) -> str | None:
    for key, value in error.trailing_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode()
    return None


class _Translate(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, service: str, timeout: float, token: str | None) -> None:
        self._service = service
        self._store = service == "store"
        self._timeout = timeout
        self._metadata = (bearer_metadata(token),) if token else ()

    async def intercept_unary_unary(
        self,
        continuation: Callable[
            [grpc.aio.ClientCallDetails, Req], Awaitable[grpc.aio.UnaryUnaryCall[Req, Resp]]
        ],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Req,
    ) -> Resp | grpc.aio.UnaryUnaryCall[Req, Resp]:
        details = client_call_details
        # The trace context, and the API key the call is made for (the store's ownership
        # checks: keys.act_for).
        traced = tracing.outgoing() + (acting_metadata() if self._store else ())
        if details.timeout is None or self._metadata or traced:
            metadata = grpc.aio.Metadata(*(details.metadata or ()), *self._metadata, *traced)
            details = grpc.aio.ClientCallDetails(
                details.method,
                self._timeout if details.timeout is None else details.timeout,
                metadata,
                details.credentials,
                details.wait_for_ready,
            )
        call = await continuation(details, request)
        try:
            return await call
        except grpc.aio.AioRpcError as error:
            raise from_grpc(error, self._service) from None


class _StreamMetadata(grpc.aio.UnaryStreamClientInterceptor):
    """The service token and the trace context on server-streaming calls too; their errors
    surface while reading, where the caller translates them (from_grpc)."""

    def __init__(self, service: str, token: str | None) -> None:
        self._store = service == "store"
        self._metadata = (bearer_metadata(token),) if token else ()

    async def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Req], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Req,
    ) -> Any:
        details = client_call_details
        traced = tracing.outgoing() + (acting_metadata() if self._store else ())
        if self._metadata or traced:
            details = grpc.aio.ClientCallDetails(
                details.method,
                details.timeout,
                grpc.aio.Metadata(*(details.metadata or ()), *self._metadata, *traced),
                details.credentials,
                details.wait_for_ready,
            )
        return await continuation(details, request)


def store_stub(channel: grpc.aio.Channel) -> Store:
    """The store's typed stub over a channel from open_channel."""
    return store_pb2_grpc.StoreStub(channel)


async def check_health(channel: grpc.aio.Channel, timeout: float = 2.0) -> str:
    """The service's grpc.health.v1 status name, or UNAVAILABLE when it cannot be reached."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
    except (grpc.aio.AioRpcError, errors.ApiError):
        return "UNAVAILABLE"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


@dataclass(frozen=True)
class Embedded:
    # len(texts) x dimensions little-endian float32, as the embedder sent them.
    data: bytes
    dimensions: int
    token_counts: list[int]
    truncated: list[bool]
    model: str

    @property
    def vectors(self) -> FloatMatrix:
        return from_bytes(self.data, self.dimensions, len(self.token_counts))

    def vector_bytes(self, index: int) -> bytes:
        """Vector `index` in the wire format, without decoding it."""
        size = 4 * self.dimensions
        return self.data[index * size : (index + 1) * size]


class EmbedderClient:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self._stub: EmbedderAsyncStub = embedder_pb2_grpc.EmbedderStub(channel)
        self._info: ModelInfo | None = None

    @property
    def last_known_name(self) -> str | None:
        """The model this embedder reported last, if it ever answered."""
        return self._info.name if self._info is not None else None

    async def info(self, refresh: bool = False, timeout: float | None = None) -> ModelInfo:
        if self._info is None or refresh:
            reply = await self._stub.Info(embedder_pb2.InfoRequest(), timeout=timeout)
            self._info = ModelInfo(
                name=reply.model,
                dimensions=reply.dimensions,
                max_input_tokens=reply.max_input_tokens,
                pooling=reply.pooling,
                normalized=reply.normalized,
                digest=reply.model_digest,
                special_tokens=reply.special_tokens,
                backend=reply.backend,
                source=reply.model_source,
                versions=dict(reply.versions),
            )
        return self._info

    async def embed(
        self,
        texts: Sequence[str],
        truncate: bool | None = None,
        timeout: float | None = None,
        interactive: bool = False,
    ) -> Embedded:
        """`timeout` overrides the channel's deadline for this call; `interactive` (someone is
        waiting: a search) puts it ahead of bulk work."""
        policy = embedder_pb2.TRUNCATE_POLICY_UNSPECIFIED
        if truncate is not None:
            policy = (
                embedder_pb2.TRUNCATE_POLICY_TRUNCATE
                if truncate
                else embedder_pb2.TRUNCATE_POLICY_REJECT
            )
        request = embedder_pb2.EmbedRequest(
            texts=[_utf8(text, index) for index, text in enumerate(texts)],
            truncate=policy,
            priority=(
                embedder_pb2.PRIORITY_INTERACTIVE if interactive else embedder_pb2.PRIORITY_BULK
            ),
        )
        reply = await self._stub.Embed(request, timeout=timeout)
        info = await self.info(timeout=timeout)
        if (reply.model, reply.dimensions) != (info.name, info.dimensions):
            # Every replica must serve one model: vectors of two models mixed in a vector store
            # are silently wrong. Info is re-read once, in case all replicas were replaced.
            info = await self.info(refresh=True, timeout=timeout)
            if (reply.model, reply.dimensions) != (info.name, info.dimensions):
                raise errors.BadGateway(
                    f"embedder replicas disagree: one serves {reply.model} "
                    f"({reply.dimensions} dims), another {info.name} ({info.dimensions} dims); "
                    "every replica behind one target must serve the same model"
                )
        count = len(texts)
        if not (
            reply.dimensions > 0
            and len(reply.vectors) == 4 * reply.dimensions * count
            and len(reply.token_counts) == len(reply.truncated) == count
        ):
            raise errors.BadGateway(
                f"embedder sent a malformed reply: {len(reply.vectors)} vector bytes, "
                f"{len(reply.token_counts)} token counts for {count} texts of "
                f"{reply.dimensions} dims"
            )
        return Embedded(
            data=reply.vectors,
            dimensions=reply.dimensions,
            token_counts=list(reply.token_counts),
            truncated=list(reply.truncated),
            model=reply.model,
        )

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        request = embedder_pb2.TokenizeRequest(
            texts=[_utf8(text, index) for index, text in enumerate(texts)]
        )
        reply = await self._stub.Tokenize(request)
        return [result.count for result in reply.results]


def _utf8(text: str, index: int) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # JSON can carry lone surrogates ("\ud800") that have no UTF-8 form.
        raise errors.InvalidRequest(
            f"input {index} is not valid Unicode text (lone surrogate)", param="input"
        ) from None
