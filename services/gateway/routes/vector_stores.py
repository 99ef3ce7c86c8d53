"""Vector stores: create, list, retrieve, update, delete, search."""

from __future__ import annotations

import asyncio
import json
import time

from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common import tracing
from services.gateway import metrics, objects
from services.gateway.attach import Attachment
from services.gateway.audit import AUDIT_INFO
from services.gateway.auth import charge, key_name
from services.gateway.ingest import resolve_chunking
from services.gateway.models import new_store_model, store_model
from services.gateway.operations import operation, paging_params
from services.gateway.params import (
    extensions,
    json_body,
    paging,
)
from services.gateway.requests import parse
from services.gateway.routes import services
from services.gateway.search import EMBEDDER_UNAVAILABLE, Deadlines, search
from services.gateway.search_body import SearchRequest
from services.gateway.vector_store_bodies import (
    VectorStoreCreate,
    VectorStoreReindex,
    VectorStoreUpdate,
)
from services.pb import store_pb2

DEGRADED_HEADER = "X-Ragd-Degraded"
DEGRADED_REASON = EMBEDDER_UNAVAILABLE


@operation(
    "Create a vector store",
    "VectorStore",
    VectorStoreCreate,
    returns={"vector_store_id": "/id"},
)
async def create_vector_store(request: Request) -> JSONResponse:
    deps = services(request)
    asked = parse(VectorStoreCreate, extensions(await json_body(request), "embedding_model"))
    file_ids = asked.file_ids
    _, model = await new_store_model(asked.embedding_model, deps.embedders)
    chunking = resolve_chunking(asked.chunking_strategy, model)
    # Every file must exist and be the caller's to attach before the store is made: a 404
    # for one of them leaves no empty store behind.
    await asyncio.gather(
        *(deps.store.GetFile(store_pb2.GetFileRequest(id=file_id)) for file_id in set(file_ids))
    )
    vector_store = await deps.store.CreateVectorStore(
        store_pb2.CreateVectorStoreRequest(
            name=asked.name,
            metadata=asked.metadata,
            model=model.name,
            dimensions=model.dimensions,
            expires_anchor=asked.expires_after.anchor if asked.expires_after else "",
            expires_days=asked.expires_after.days if asked.expires_after else 0,
            max_input_tokens=model.max_input_tokens,
            description=asked.description,
        )
    )
    if file_ids:
        items = [Attachment(chunking, file_id=file_id) for file_id in file_ids]
        await deps.attacher.attach_batch(vector_store.id, items, key_name(request.scope))
        vector_store = await deps.store.GetVectorStore(
            store_pb2.GetVectorStoreRequest(id=vector_store.id)
        )
    return JSONResponse(objects.vector_store(vector_store))


@operation("List vector stores", "VectorStoreList", query=paging_params())
async def list_vector_stores(request: Request) -> JSONResponse:
    reply = await services(request).store.ListVectorStores(
        store_pb2.ListVectorStoresRequest(
            **paging(request),
        )
    )
    # The store lists what the request's key reaches (its project's, or only its own stores).
    data = [objects.vector_store(c) for c in reply.vector_stores]
    return JSONResponse(objects.page(data, reply.has_more))


@operation("Retrieve a vector store", "VectorStore")
async def get_vector_store(request: Request) -> JSONResponse:
    vector_store = await services(request).store.GetVectorStore(
        store_pb2.GetVectorStoreRequest(id=request.path_params["vector_store_id"])
    )
    return JSONResponse(objects.vector_store(vector_store))


@operation("Modify a vector store", "VectorStore", VectorStoreUpdate)
async def update_vector_store(request: Request) -> JSONResponse:
    asked = parse(VectorStoreUpdate, await json_body(request))
    sent = asked.model_fields_set
    update = store_pb2.UpdateVectorStoreRequest(
        id=request.path_params["vector_store_id"],
        has_name="name" in sent,
        name=asked.name or "",
        has_description="description" in sent,
        description=asked.description or "",
        has_metadata="metadata" in sent,
        metadata=asked.metadata or {},
        has_expires="expires_after" in sent,
    )
    if asked.expires_after is not None:
        update.expires_anchor = asked.expires_after.anchor
        update.expires_days = asked.expires_after.days
    vector_store = await services(request).store.UpdateVectorStore(update)
    return JSONResponse(objects.vector_store(vector_store))


@operation("Delete a vector store", "Deleted")
async def delete_vector_store(request: Request) -> JSONResponse:
    reply = await services(request).store.DeleteVectorStore(
        store_pb2.DeleteVectorStoreRequest(id=request.path_params["vector_store_id"])
    )
    return JSONResponse(objects.deleted(reply.id, "vector_store.deleted", reply.deleted))


@operation("Search a vector store", "SearchPage", SearchRequest)
async def search_vector_store(request: Request) -> JSONResponse:
    started = time.perf_counter()
    deps = services(request)
    body = extensions(await json_body(request), "mode", "exact")
    asked = parse(SearchRequest, body).search(request.path_params["vector_store_id"])
    config = deps.config
    deadlines = Deadlines(embed=config.search_embed_timeout, store=config.search_store_timeout)
    found = await search(deps.embedders, deps.store, asked, deadlines)
    elapsed = time.perf_counter() - started
    metrics.searched(found.mode, elapsed, found.degraded)
    tracing.annotate(
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": asked.vector_store_id,
            "ragd.search.mode": found.mode,
            "ragd.search.degraded": found.degraded,
            "ragd.search.results": len(found.hits),
            "gen_ai.usage.input_tokens": found.embedded_tokens,
        }
    )
    detail = found.mode
    if deps.config.audit_queries:
        detail = f"{found.mode} {json.dumps(list(asked.queries), ensure_ascii=False)}"
    request.scope[AUDIT_INFO] = {
        "operation": "search",
        "vector_store_id": asked.vector_store_id,
        "k": asked.k,
        "result_count": len(found.hits),
        "degraded": found.degraded,
        "detail": detail,
        "embedded_tokens": found.embedded_tokens,
    }
    charge(request.scope, tokens=found.embedded_tokens)
    return JSONResponse(
        objects.search_page(asked.queries, found.hits, found.mode, found.degraded),
        headers={DEGRADED_HEADER: found.reason} if found.degraded else None,
    )


@operation(
    "Re-index a vector store with another model or chunking (ragd extension)",
    "VectorStore",
    VectorStoreReindex,
)
async def reindex_vector_store(request: Request) -> JSONResponse:
    """Extension: re-indexes the store with `embedding_model` (and `chunking_strategy`, else
    each file's own, shortened to the model's context) while it keeps serving searches from
    its old index; progress on the store's `reindex`. 409 while one is in progress."""
    deps = services(request)
    asked = parse(VectorStoreReindex, await json_body(request))
    _, model = await new_store_model(asked.embedding_model, deps.embedders)
    chunking = asked.chunking_strategy
    message = store_pb2.StartReindexRequest(
        vector_store_id=request.path_params["vector_store_id"],
        model=store_model(model),
        max_chunk_tokens=model.max_input_tokens,
    )
    if chunking is not None:
        message.chunking.CopyFrom(resolve_chunking(chunking, model).message())
    vector_store = await deps.store.StartReindex(message)
    deps.workers.wake()
    return JSONResponse(objects.vector_store(vector_store))


@operation("Cancel a vector store's re-index (ragd extension)", "VectorStore")
async def cancel_reindex(request: Request) -> JSONResponse:
    """Extension: stops the re-index in progress; the store keeps its old index."""
    vector_store = await services(request).store.CancelReindex(
        store_pb2.GetVectorStoreRequest(id=request.path_params["vector_store_id"])
    )
    return JSONResponse(objects.vector_store(vector_store))
