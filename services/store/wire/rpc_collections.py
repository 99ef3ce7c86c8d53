"""Store RPCs on collections: create, read, update, delete, add chunks, search."""

from __future__ import annotations

from services.common.grpc_server import Context
from services.common.vectors import check_size
from services.common.vocabulary import LEXICAL
from services.pb import store_pb2 as pb
from services.store.errors import InvalidArgument
from services.store.records import EmbeddingModel
from services.store.search import runnable_mode
from services.store.wire.guard import caller
from services.store.wire.messages import (
    attributes_from_message,
    chunking_from_message,
    chunks_from_message,
    collection_message,
    decode_vectors,
    filter_from_message,
    hit_message,
    model_from_message,
)
from services.store.wire.rpc_base import (
    RpcBase,
    list_args,
)


class CollectionRpcs(RpcBase):
    async def CreateCollection(
        self, request: pb.CreateCollectionRequest, context: Context
    ) -> pb.Collection:
        who = caller()
        collection = await self._call(
            context,
            lambda: self._repository.create_collection(
                caller=who,
                name=request.name,
                model=request.model,
                dimensions=request.dimensions,
                metadata=dict(request.metadata),
                expires_anchor=request.expires_anchor,
                expires_days=request.expires_days,
                max_input_tokens=request.max_input_tokens,
            ),
        )
        return collection_message(collection)

    async def GetCollection(
        self, request: pb.GetCollectionRequest, context: Context
    ) -> pb.Collection:
        collection = await self._call(context, lambda: self._repository.get_collection(request.id))
        return collection_message(collection)

    async def UpdateCollection(
        self, request: pb.UpdateCollectionRequest, context: Context
    ) -> pb.Collection:
        collection = await self._call(
            context,
            lambda: self._repository.update_collection(
                request.id,
                name=request.name if request.has_name else None,
                metadata=dict(request.metadata) if request.has_metadata else None,
                expires=(
                    (request.expires_anchor, request.expires_days) if request.has_expires else None
                ),
            ),
        )
        return collection_message(collection)

    async def StartReindex(
        self, request: pb.StartReindexRequest, context: Context
    ) -> pb.Collection:
        # An absent model is refused by the re-index itself, in its words.
        model = model_from_message(request.model, request.HasField("model"))
        collection = await self._call(
            context,
            lambda: self._repository.start_reindex(
                request.collection_id,
                model or EmbeddingModel("", 0),
                chunking_from_message(request.chunking, request.HasField("chunking")),
                request.max_chunk_tokens,
            ),
        )
        return collection_message(collection)

    async def CancelReindex(
        self, request: pb.GetCollectionRequest, context: Context
    ) -> pb.Collection:
        collection = await self._call(context, lambda: self._repository.cancel_reindex(request.id))
        return collection_message(collection)

    async def ListCollections(
        self, request: pb.ListCollectionsRequest, context: Context
    ) -> pb.ListCollectionsResponse:
        limit, order = list_args(request.limit, request.order)
        who = caller()
        page = await self._call(
            context,
            lambda: self._repository.list_collections(
                caller=who,
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
                name=request.name or None,
            ),
        )
        return pb.ListCollectionsResponse(
            collections=[collection_message(item) for item in page.items],
            has_more=page.has_more,
        )

    async def DeleteCollection(
        self, request: pb.DeleteCollectionRequest, context: Context
    ) -> pb.DeleteCollectionResponse:
        await self._call(context, lambda: self._repository.delete_collection(request.id))
        return pb.DeleteCollectionResponse(id=request.id, deleted=True)

    async def AddChunks(
        self, request: pb.AddChunksRequest, context: Context
    ) -> pb.AddChunksResponse:
        def work() -> pb.AddChunksResponse:
            chunks = chunks_from_message(list(request.chunks))
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

    async def Search(self, request: pb.SearchRequest, context: Context) -> pb.SearchResponse:
        def work() -> pb.SearchResponse:
            mode = runnable_mode(request.mode, request.query_text)
            query = None
            if mode != LEXICAL:
                try:
                    check_size(request.query_vector, request.dimensions, 1)
                except ValueError as error:
                    raise InvalidArgument(str(error)) from None
                # As it came: search.run checks it in place and hands it to sqlite-vec.
                query = request.query_vector
            hits = self._repository.search(
                collection_id=request.collection_id,
                query=query,
                k=request.k,
                score_threshold=request.score_threshold,
                model=request.model,
                filter=filter_from_message(request.filter) if request.HasField("filter") else None,
                mode=mode,
                query_text=request.query_text,
                exact=request.exact,
            )
            return pb.SearchResponse(hits=[hit_message(hit) for hit in hits], mode=mode)

        return await self._call(context, work)
