"""gRPC clients for the embedder and the store: channels, deadlines, error translation."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.grpc_server import MAX_MESSAGE_BYTES
from services.common.vectors import FloatMatrix, from_bytes, to_bytes
from services.gateway.errors import ApiError, from_grpc
from services.pb import embedder_pb2, embedder_pb2_grpc, store_pb2, store_pb2_grpc

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


def channel_target(target: str) -> str:
    """A comma-separated list of IP:port becomes one ipv4 target that round_robin balances."""
    if "," in target and ":///" not in target and not target.startswith("ipv4:"):
        return "ipv4:" + ",".join(part.strip() for part in target.split(","))
    return target


def open_channel(target: str) -> grpc.aio.Channel:
    options = [
        ("grpc.service_config", json.dumps(_SERVICE_CONFIG)),
        ("grpc.enable_retries", 1),
        # A restarted service is reconnected within a couple of seconds, not gRPC's default
        # backoff of up to two minutes.
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 2000),
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

    async def info(self, refresh: bool = False) -> ModelInfo:
        if self._info is None or refresh:
            try:
                reply = await self._stub.Info(embedder_pb2.InfoRequest(), timeout=self._timeout)
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

    async def embed(self, texts: Sequence[str], truncate: bool | None = None) -> Embedded:
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
            reply = await self._stub.Embed(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise from_grpc(error, "embedder") from None
        info = await self.info()
        if reply.dimensions != info.dimensions:
            # A replica serving another model must never write into a collection.
            info = await self.info(refresh=True)
            if reply.dimensions != info.dimensions:
                raise ApiError(
                    502, "embedder replicas disagree on the vector dimension", code="bad_gateway"
                )
        try:
            vectors = from_bytes(reply.vectors, reply.dimensions, len(texts))
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


class StoreClient:
    def __init__(self, channel: grpc.aio.Channel, timeout: float) -> None:
        self.channel = channel
        self._stub = store_pb2_grpc.StoreStub(channel)
        self._timeout = timeout

    async def _call(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self._stub, method)(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise from_grpc(error, "store") from None

    async def create_collection(
        self, name: str, metadata: dict[str, str], model: ModelInfo
    ) -> store_pb2.Collection:
        request = store_pb2.CreateCollectionRequest(
            name=name, metadata=metadata, model=model.name, dimensions=model.dimensions
        )
        reply: store_pb2.Collection = await self._call("CreateCollection", request)
        return reply

    async def get_collection(self, collection_id: str) -> store_pb2.Collection:
        reply: store_pb2.Collection = await self._call(
            "GetCollection", store_pb2.GetCollectionRequest(id=collection_id)
        )
        return reply

    async def list_collections(
        self, limit: int, order: str, after: str, before: str
    ) -> store_pb2.ListCollectionsResponse:
        request = store_pb2.ListCollectionsRequest(
            limit=limit, order=order, after=after, before=before
        )
        reply: store_pb2.ListCollectionsResponse = await self._call("ListCollections", request)
        return reply

    async def delete_collection(self, collection_id: str) -> store_pb2.DeleteCollectionResponse:
        request = store_pb2.DeleteCollectionRequest(id=collection_id)
        reply: store_pb2.DeleteCollectionResponse = await self._call("DeleteCollection", request)
        return reply

    async def add_chunks(
        self,
        collection_id: str,
        file_id: str,
        filename: str,
        attributes: dict[str, str | float | bool],
        chunks: Sequence[tuple[str, int]],
        vectors: FloatMatrix,
        model: str,
    ) -> store_pb2.AddChunksResponse:
        request = store_pb2.AddChunksRequest(
            collection_id=collection_id,
            file_id=file_id,
            filename=filename,
            attributes={key: attribute_value(value) for key, value in attributes.items()},
            chunks=[store_pb2.ChunkInput(text=text, token_count=count) for text, count in chunks],
            vectors=to_bytes(vectors),
            dimensions=int(vectors.shape[1]),
            model=model,
        )
        reply: store_pb2.AddChunksResponse = await self._call("AddChunks", request)
        return reply

    async def search(
        self,
        collection_id: str,
        query: FloatMatrix,
        k: int,
        score_threshold: float,
        model: str,
    ) -> store_pb2.SearchResponse:
        request = store_pb2.SearchRequest(
            collection_id=collection_id,
            query_vector=to_bytes(query),
            dimensions=int(query.shape[-1]),
            k=k,
            score_threshold=score_threshold,
            model=model,
        )
        reply: store_pb2.SearchResponse = await self._call("Search", request)
        return reply


def attribute_value(value: str | float | bool) -> store_pb2.AttributeValue:
    if isinstance(value, bool):
        return store_pb2.AttributeValue(bool_value=value)
    if isinstance(value, int | float):
        return store_pb2.AttributeValue(number_value=float(value))
    return store_pb2.AttributeValue(string_value=value)


def attribute_python(value: store_pb2.AttributeValue) -> str | float | bool | None:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    result: str | float | bool = getattr(value, kind)
    return result
