"""gRPC clients for the embedder and the store: channels, deadlines, error translation."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.grpc_server import MAX_MESSAGE_BYTES
from services.common.vectors import FloatMatrix, from_bytes
from services.gateway.errors import ApiError, from_grpc
from services.pb import embedder_pb2, embedder_pb2_grpc

# round_robin spreads calls over every address the target resolves to (several embedder
# replicas); health checking skips replicas that are not SERVING; UNAVAILABLE is retried
# for the idempotent methods named here.
_SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": ""},
    "methodConfig": [
        {
            "name": [
                {"service": "ragd.embedder.v1.Embedder"},
                {"service": "ragd.store.v1.Store", "method": "GetCollection"},
                {"service": "ragd.store.v1.Store", "method": "ListCollections"},
                {"service": "ragd.store.v1.Store", "method": "Search"},
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


def open_channel(target: str) -> grpc.aio.Channel:
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
    return grpc.aio.insecure_channel(channel_target(target), options=options)


async def check_health(channel: grpc.aio.Channel, timeout: float = 2.0) -> str:
    """The service's grpc.health.v1 status name, or UNAVAILABLE when it cannot be reached."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
    except grpc.aio.AioRpcError:
        return "UNAVAILABLE"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


# Trailing metadata of an Embed refused for an over-long input (see protos/embedder.proto).
_REASON_KEY = "ragd-reason"
_INPUT_TOO_LONG = "input-too-long"


@dataclass(frozen=True)
class ModelInfo:
    name: str
    dimensions: int
    max_input_tokens: int
    pooling: str
    normalized: bool
    digest: str


@dataclass(frozen=True)
class Embedded:
    vectors: FloatMatrix
    token_counts: list[int]
    truncated: list[bool]
    model: str


class EmbedderClient:
    def __init__(self, channel: grpc.aio.Channel, timeout: float) -> None:
        self.channel = channel
        self._stub = embedder_pb2_grpc.EmbedderStub(channel)
        self._timeout = timeout
        self._info: ModelInfo | None = None

    async def info(self, refresh: bool = False, timeout: float | None = None) -> ModelInfo:
        if self._info is None or refresh:
            try:
                reply = await self._stub.Info(
                    embedder_pb2.InfoRequest(), timeout=timeout or self._timeout
                )
            except grpc.aio.AioRpcError as error:
                raise from_grpc(error, "embedder") from None
            self._info = ModelInfo(
                name=reply.model,
                dimensions=reply.dimensions,
                max_input_tokens=reply.max_input_tokens,
                pooling=reply.pooling,
                normalized=reply.normalized,
                digest=reply.model_digest,
            )
        return self._info

    async def embed(
        self, texts: Sequence[str], truncate: bool | None = None, timeout: float | None = None
    ) -> Embedded:
        """`timeout` overrides the client's deadline for this call."""
        policy = embedder_pb2.TRUNCATE_POLICY_UNSPECIFIED
        if truncate is not None:
            policy = (
                embedder_pb2.TRUNCATE_POLICY_TRUNCATE
                if truncate
                else embedder_pb2.TRUNCATE_POLICY_REJECT
            )
        request = embedder_pb2.EmbedRequest(
            texts=[_utf8(text, index) for index, text in enumerate(texts)], truncate=policy
        )
        try:
            reply = await self._stub.Embed(request, timeout=timeout or self._timeout)
        except grpc.aio.AioRpcError as error:
            if _reason(error) == _INPUT_TOO_LONG:
                raise ApiError(
                    400, error.details() or "", param="input", code="context_length_exceeded"
                ) from None
            raise from_grpc(error, "embedder") from None
        info = await self.info(timeout=timeout)
        if (reply.model, reply.dimensions) != (info.name, info.dimensions):
            # Every replica must serve one model: vectors of two models mixed in a collection
            # are silently wrong. Info is re-read once, in case all replicas were replaced.
            info = await self.info(refresh=True, timeout=timeout)
            if (reply.model, reply.dimensions) != (info.name, info.dimensions):
                raise ApiError(
                    502,
                    f"embedder replicas disagree: one serves {reply.model} "
                    f"({reply.dimensions} dims), another {info.name} ({info.dimensions} dims); "
                    "every replica behind one target must serve the same model",
                    code="bad_gateway",
                )
        try:
            vectors = from_bytes(reply.vectors, reply.dimensions, len(texts))
            if not len(reply.token_counts) == len(reply.truncated) == len(texts):
                raise ValueError(f"{len(reply.token_counts)} token counts for {len(texts)} texts")
        except ValueError as error:
            raise ApiError(
                502, f"embedder sent a malformed reply: {error}", code="bad_gateway"
            ) from None
        return Embedded(
            vectors=vectors,
            token_counts=list(reply.token_counts),
            truncated=list(reply.truncated),
            model=reply.model,
        )

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        request = embedder_pb2.TokenizeRequest(
            texts=[_utf8(text, index) for index, text in enumerate(texts)]
        )
        try:
            reply = await self._stub.Tokenize(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise from_grpc(error, "embedder") from None
        return [result.count for result in reply.results]


def _reason(error: grpc.aio.AioRpcError) -> str | None:
    for key, value in error.trailing_metadata() or ():
        if key == _REASON_KEY:
            return str(value)
    return None


def _utf8(text: str, index: int) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # JSON can carry lone surrogates ("\ud800") that have no UTF-8 form.
        raise ApiError(
            400,
            f"input {index} is not valid Unicode text (lone surrogate)",
            param="input",
            code="invalid_value",
        ) from None
