"""gRPC adapter for the store: messages to domain calls and back, errors to status codes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import TypeVar

import grpc

from services.common.vectors import FloatMatrix, from_bytes
from services.pb import store_pb2 as pb
from services.pb import store_pb2_grpc
from services.store.errors import (
    CollectionNotFound,
    DimensionMismatch,
    InvalidArgument,
    ModelMismatch,
    StoreError,
)
from services.store.records import AttributeValue, ChunkInput, Collection, SearchHit
from services.store.repository import DEFAULT_LIST_LIMIT, Repository

log = logging.getLogger(__name__)

T = TypeVar("T")

_STATUS: list[tuple[type[StoreError], grpc.StatusCode]] = [
    (CollectionNotFound, grpc.StatusCode.NOT_FOUND),
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (DimensionMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (ModelMismatch, grpc.StatusCode.FAILED_PRECONDITION),
]


def status_for(error: StoreError) -> grpc.StatusCode:
    for error_type, code in _STATUS:
        if isinstance(error, error_type):
            return code
    return grpc.StatusCode.INTERNAL


class StoreServicer(store_pb2_grpc.StoreServicer):
    """Runs each blocking database call on the executor's threads."""

    def __init__(self, repository: Repository, executor: Executor) -> None:
        self._repository = repository
        self._executor = executor

    async def _call(self, context: grpc.aio.ServicerContext, work: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, work)
        except StoreError as error:
            await context.abort(status_for(error), str(error))
        except Exception:
            log.exception("store request failed")
            await context.abort(
                grpc.StatusCode.INTERNAL, "internal error in the store; see the store's log"
            )
        raise AssertionError("unreachable: context.abort raises")

    async def CreateCollection(
        self, request: pb.CreateCollectionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Collection:
        collection = await self._call(
            context,
            lambda: self._repository.create_collection(
                name=request.name,
                model=request.model,
                dimensions=request.dimensions,
                metadata=dict(request.metadata),
            ),
        )
        return collection_message(collection)

    async def GetCollection(
        self, request: pb.GetCollectionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Collection:
        collection = await self._call(context, lambda: self._repository.get_collection(request.id))
        return collection_message(collection)

    async def ListCollections(
        self, request: pb.ListCollectionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCollectionsResponse:
        page = await self._call(
            context,
            lambda: self._repository.list_collections(
                limit=request.limit or DEFAULT_LIST_LIMIT,
                order=request.order or "desc",
                after=request.after or None,
                before=request.before or None,
            ),
        )
        return pb.ListCollectionsResponse(
            collections=[collection_message(item) for item in page.items],
            has_more=page.has_more,
        )

    async def DeleteCollection(
        self, request: pb.DeleteCollectionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCollectionResponse:
        await self._call(context, lambda: self._repository.delete_collection(request.id))
        return pb.DeleteCollectionResponse(id=request.id, deleted=True)

    async def AddChunks(
        self, request: pb.AddChunksRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddChunksResponse:
        def work() -> pb.AddChunksResponse:
            chunks = [ChunkInput(text=c.text, token_count=c.token_count) for c in request.chunks]
            vectors = decode_vectors(request.vectors, request.dimensions, len(chunks))
            result = self._repository.add_chunks(
                collection_id=request.collection_id,
                file_id=request.file_id,
                filename=request.filename,
                attributes=attributes_from_message(request.attributes),
                chunks=chunks,
                vectors=vectors,
                model=request.model,
            )
            return pb.AddChunksResponse(
                file_id=result.file_id,
                chunk_count=result.chunk_count,
                usage_bytes=result.usage_bytes,
            )

        return await self._call(context, work)

    async def Search(
        self, request: pb.SearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchResponse:
        def work() -> pb.SearchResponse:
            query = decode_vectors(request.query_vector, request.dimensions, 1)[0]
            hits = self._repository.search(
                collection_id=request.collection_id,
                query=query,
                k=request.k,
                score_threshold=request.score_threshold,
                model=request.model,
            )
            return pb.SearchResponse(hits=[hit_message(hit) for hit in hits])

        return await self._call(context, work)


def decode_vectors(data: bytes, dimensions: int, count: int) -> FloatMatrix:
    try:
        return from_bytes(data, dimensions, count)
    except ValueError as error:
        raise InvalidArgument(str(error)) from None


def collection_message(collection: Collection) -> pb.Collection:
    return pb.Collection(
        id=collection.id,
        name=collection.name,
        created_at=collection.created_at,
        last_active_at=collection.last_active_at,
        metadata=collection.metadata,
        model=collection.model,
        dimensions=collection.dimensions,
        chunk_count=collection.chunk_count,
        file_count=collection.file_count,
        usage_bytes=collection.usage_bytes,
    )


def attributes_from_message(
    attributes: Mapping[str, pb.AttributeValue],
) -> dict[str, AttributeValue]:
    values: dict[str, AttributeValue] = {}
    for key, value in attributes.items():
        kind = value.WhichOneof("kind")
        if kind is None:
            raise InvalidArgument(f"attribute {key!r} has no value")
        values[key] = getattr(value, kind)
    return values


def attribute_message(value: AttributeValue) -> pb.AttributeValue:
    if isinstance(value, bool):
        return pb.AttributeValue(bool_value=value)
    if isinstance(value, str):
        return pb.AttributeValue(string_value=value)
    return pb.AttributeValue(number_value=value)


def hit_message(hit: SearchHit) -> pb.SearchHit:
    return pb.SearchHit(
        chunk_id=hit.chunk_id,
        file_id=hit.file_id,
        filename=hit.filename,
        text=hit.text,
        score=hit.score,
        attributes={key: attribute_message(value) for key, value in hit.attributes.items()},
        chunk_index=hit.chunk_index,
    )
