"""Store RPCs on vector stores: create, read, update, delete, add chunks, search."""

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
    decode_vectors,
    filter_from_message,
    hit_message,
    model_from_message,
    vector_store_message,
)
from services.store.wire.rpc_base import (
    RpcBase,
    list_args,
)


class VectorStoreRpcs(RpcBase):
    async def CreateVectorStore(
        self, request: pb.CreateVectorStoreRequest, context: Context
    ) -> pb.VectorStore:
        who = caller()
        vector_store = await self._call(
            context,
            lambda: self._repository.create_vector_store(
                caller=who,
                name=request.name,
                model=request.model,
                dimensions=request.dimensions,
                metadata=dict(request.metadata),
                expires_anchor=request.expires_anchor,
                expires_days=request.expires_days,
                max_input_tokens=request.max_input_tokens,
                description=request.description,
            ),
        )
        return vector_store_message(vector_store)

    async def GetVectorStore(
        self, request: pb.GetVectorStoreRequest, context: Context
    ) -> pb.VectorStore:
        vector_store = await self._call(
            context, lambda: self._repository.get_vector_store(request.id)
        )
        return vector_store_message(vector_store)

    async def UpdateVectorStore(
        self, request: pb.UpdateVectorStoreRequest, context: Context
    ) -> pb.VectorStore:
        vector_store = await self._call(
            context,
            lambda: self._repository.update_vector_store(
                request.id,
                name=request.name if request.has_name else None,
                metadata=dict(request.metadata) if request.has_metadata else None,
                expires=(
                    (request.expires_anchor, request.expires_days) if request.has_expires else None
                ),
                description=request.description if request.has_description else None,
            ),
        )
        return vector_store_message(vector_store)

    async def StartReindex(
        self, request: pb.StartReindexRequest, context: Context
    ) -> pb.VectorStore:
        # An absent model is refused by the re-index itself, in its words.
        model = model_from_message(request.model, request.HasField("model"))
        vector_store = await self._call(
            context,
            lambda: self._repository.start_reindex(
                request.vector_store_id,
                model or EmbeddingModel("", 0),
                chunking_from_message(request.chunking, request.HasField("chunking")),
                request.max_chunk_tokens,
            ),
        )
        return vector_store_message(vector_store)

    async def CancelReindex(
        self, request: pb.GetVectorStoreRequest, context: Context
    ) -> pb.VectorStore:
        vector_store = await self._call(
            context, lambda: self._repository.cancel_reindex(request.id)
        )
        return vector_store_message(vector_store)

    async def ListVectorStores(
        self, request: pb.ListVectorStoresRequest, context: Context
    ) -> pb.ListVectorStoresResponse:
        limit, order = list_args(request.limit, request.order)
        who = caller()
        page = await self._call(
            context,
            lambda: self._repository.list_vector_stores(
                caller=who,
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
                name=request.name or None,
            ),
        )
        return pb.ListVectorStoresResponse(
            vector_stores=[vector_store_message(item) for item in page.items],
            has_more=page.has_more,
        )

    async def DeleteVectorStore(
        self, request: pb.DeleteVectorStoreRequest, context: Context
    ) -> pb.DeleteVectorStoreResponse:
        await self._call(context, lambda: self._repository.delete_vector_store(request.id))
        return pb.DeleteVectorStoreResponse(id=request.id, deleted=True)

    async def AddChunks(
        self, request: pb.AddChunksRequest, context: Context
    ) -> pb.AddChunksResponse:
        def work() -> pb.AddChunksResponse:
            chunks = chunks_from_message(list(request.chunks))
            vectors = decode_vectors(request.vectors, request.dimensions, len(chunks))
            result = self._repository.add_chunks(
                vector_store_id=request.vector_store_id,
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
                vector_store_id=request.vector_store_id,
                query=query,
                k=request.k,
                score_threshold=request.score_threshold,
                model=request.model,
                filter=filter_from_message(request.filter) if request.HasField("filter") else None,
                mode=mode,
                query_text=request.query_text,
                exact=request.exact,
                vector_weight=(
                    request.vector_weight if request.HasField("vector_weight") else None
                ),
            )
            return pb.SearchResponse(hits=[hit_message(hit) for hit in hits], mode=mode)

        return await self._call(context, work)
