"""Vector stores: create, list, retrieve, update, delete, search."""

from __future__ import annotations

from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.vectors import to_bytes
from services.gateway import objects
from services.gateway.errors import invalid
from services.gateway.filters import parse_filter
from services.gateway.ingest import resolve_chunking
from services.gateway.params import (
    json_body,
    metadata,
    optional_int,
    optional_number,
    optional_object,
    optional_str,
    query_choice,
    query_int,
)
from services.gateway.routes.vector_store_files import attach_many
from services.gateway.state import services
from services.gateway.store_client import attributes_python
from services.pb import store_pb2

RANKERS = ("auto", "default-2024-11-15", "none")


def _expires_after(body: dict[str, Any]) -> tuple[str, int] | None:
    raw = body.get("expires_after")
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("anchor") != "last_active_at":
        raise invalid("'expires_after.anchor' must be 'last_active_at'", param="expires_after")
    days = raw.get("days")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 365:
        raise invalid(
            "'expires_after.days' must be an integer from 1 to 365", param="expires_after"
        )
    return "last_active_at", days


async def create_vector_store(request: Request) -> JSONResponse:
    deps = services(request)
    body = await json_body(request)
    name = optional_str(body, "name", "") or ""
    meta = metadata(body)
    expires = _expires_after(body)
    file_ids = body.get("file_ids") or []
    if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids):
        raise invalid("'file_ids' must be an array of file ids", param="file_ids")
    model = await deps.embedder.info()
    chunking = resolve_chunking(body.get("chunking_strategy"), model)
    collection = await deps.store.call(
        "CreateCollection",
        store_pb2.CreateCollectionRequest(
            name=name,
            metadata=meta,
            model=model.name,
            dimensions=model.dimensions,
            expires_anchor=expires[0] if expires else "",
            expires_days=expires[1] if expires else 0,
        ),
    )
    if file_ids:
        await attach_many(deps, collection.id, [(f, {}, chunking) for f in file_ids])
        collection = await deps.store.call(
            "GetCollection", store_pb2.GetCollectionRequest(id=collection.id)
        )
    return JSONResponse(objects.vector_store(collection))


async def list_vector_stores(request: Request) -> JSONResponse:
    reply = await services(request).store.call(
        "ListCollections",
        store_pb2.ListCollectionsRequest(
            limit=query_int(request, "limit", 20, 1, 100),
            order=query_choice(request, "order", "desc", ("asc", "desc")),
            after=request.query_params.get("after", ""),
            before=request.query_params.get("before", ""),
        ),
    )
    data = [objects.vector_store(c) for c in reply.collections]
    return JSONResponse(objects.page(data, reply.has_more))


async def get_vector_store(request: Request) -> JSONResponse:
    collection = await services(request).store.call(
        "GetCollection", store_pb2.GetCollectionRequest(id=request.path_params["store_id"])
    )
    return JSONResponse(objects.vector_store(collection))


async def update_vector_store(request: Request) -> JSONResponse:
    body = await json_body(request)
    update = store_pb2.UpdateCollectionRequest(id=request.path_params["store_id"])
    if "name" in body:
        update.has_name = True
        update.name = optional_str(body, "name", "") or ""
    if "metadata" in body:
        update.has_metadata = True
        update.metadata.update(metadata(body))
    if "expires_after" in body:
        expires = _expires_after(body)
        update.has_expires = True
        update.expires_anchor, update.expires_days = expires or ("", 0)
    collection = await services(request).store.call("UpdateCollection", update)
    return JSONResponse(objects.vector_store(collection))


async def delete_vector_store(request: Request) -> JSONResponse:
    reply = await services(request).store.call(
        "DeleteCollection", store_pb2.DeleteCollectionRequest(id=request.path_params["store_id"])
    )
    return JSONResponse(
        {"id": reply.id, "object": "vector_store.deleted", "deleted": reply.deleted}
    )


def _queries(body: dict[str, Any]) -> list[str]:
    raw = body.get("query")
    queries = [raw] if isinstance(raw, str) else raw
    if not isinstance(queries, list) or not queries:
        raise invalid("'query' must be a non-empty string or array of strings", param="query")
    if not all(isinstance(q, str) and q.strip() for q in queries):
        raise invalid("every 'query' must be a non-empty string", param="query")
    return queries


async def search(request: Request) -> JSONResponse:
    deps = services(request)
    store_id = request.path_params["store_id"]
    body = await json_body(request)
    queries = _queries(body)
    k = optional_int(body, "max_num_results", 10, 1, 50)
    ranking = optional_object(body, "ranking_options") or {}
    threshold = optional_number(ranking, "score_threshold", 0.0, 0.0, 1.0)
    ranker = optional_str(ranking, "ranker", "auto")
    if ranker not in RANKERS:
        raise invalid(
            f"'ranking_options.ranker' must be one of {', '.join(RANKERS)}", param="ranking_options"
        )
    if not isinstance(body.get("rewrite_query", False), bool):
        raise invalid("'rewrite_query' must be a boolean", param="rewrite_query")
    filters = parse_filter(body["filters"]) if body.get("filters") is not None else None
    # Fail on an unknown store before paying for the embedding.
    await deps.store.call("GetCollection", store_pb2.GetCollectionRequest(id=store_id))
    model = await deps.embedder.info()
    # Queries are short; truncating an over-long one beats refusing to search.
    embedded = await deps.embedder.embed(queries, truncate=True)
    best: dict[str, store_pb2.SearchHit] = {}
    for vector in embedded.vectors:
        request_message = store_pb2.SearchRequest(
            collection_id=store_id,
            query_vector=to_bytes(np.asarray(vector)),
            dimensions=int(vector.shape[-1]),
            k=k,
            score_threshold=threshold,
            model=model.name,
        )
        if filters is not None:
            request_message.filter.CopyFrom(filters)
        reply = await deps.store.call("Search", request_message)
        for hit in reply.hits:
            if hit.chunk_id not in best or best[hit.chunk_id].score < hit.score:
                best[hit.chunk_id] = hit
    hits = sorted(best.values(), key=lambda h: h.score, reverse=True)[:k]
    data = [
        {
            "file_id": hit.file_id,
            "filename": hit.filename,
            "score": round(float(hit.score), 6),
            "attributes": attributes_python(hit.attributes),
            "content": [{"type": "text", "text": hit.text}],
        }
        for hit in hits
    ]
    return JSONResponse(
        {
            "object": "vector_store.search_results.page",
            # rewrite_query is accepted, but ragd searches with the query as given.
            "search_query": queries,
            "data": data,
            "has_more": False,
            "next_page": None,
        }
    )
