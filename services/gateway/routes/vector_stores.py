"""Vector stores: create, list, retrieve, update, delete, search."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import numpy.typing as npt
from starlette.requests import Request
from starlette.responses import JSONResponse

from services.common.vectors import to_bytes
from services.gateway import objects
from services.gateway.errors import ApiError, invalid
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
from services.gateway.state import Services, services
from services.gateway.store_client import attributes_python
from services.pb import store_pb2

log = logging.getLogger(__name__)

RANKERS = ("auto", "default-2024-11-15", "none")
# The extension field `mode` of a search (see the store's SearchRequest.mode).
VECTOR, LEXICAL, HYBRID = "vector", "lexical", "hybrid"
MODES = (VECTOR, LEXICAL, HYBRID)
# Embedder failures after which a search answers from the lexical index instead: the embedder
# is down or not answering. A 429 (overloaded) is passed on with its Retry-After, as clients
# retry it and get full-quality results moments later; anything else is a real error.
EMBEDDER_DOWN = frozenset({503, 504})
DEGRADED_HEADER = "X-Ragd-Degraded"
DEGRADED_REASON = "embedder-unavailable"


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
    for query in queries:
        try:
            query.encode("utf-8")
        except UnicodeEncodeError:
            # JSON can carry lone surrogates ("\ud800"), which protobuf strings cannot.
            raise invalid(
                "'query' is not valid Unicode text (lone surrogate)", param="query"
            ) from None
    return queries


def _search_mode(body: dict[str, Any]) -> str:
    mode = optional_str(body, "mode", VECTOR) or VECTOR
    if mode not in MODES:
        raise invalid(f"'mode' must be one of {', '.join(MODES)}, got {mode!r}", param="mode")
    return mode


async def _embed_queries(
    deps: Services, store_id: str, queries: list[str]
) -> tuple[str, list[npt.NDArray[np.float32]]] | None:
    """The model name and one vector per query; None when the embedder is unavailable."""
    # Fail on an unknown store before paying for the embedding.
    await deps.store.call("GetCollection", store_pb2.GetCollectionRequest(id=store_id))
    try:
        timeout = deps.config.search_embed_timeout
        model = await deps.embedder.info(timeout=timeout)
        # Queries are short; truncating an over-long one beats refusing to search.
        embedded = await deps.embedder.embed(queries, truncate=True, timeout=timeout)
    except ApiError as error:
        if error.status not in EMBEDDER_DOWN:
            raise
        log.warning("embedder unavailable (%s): searching %s lexically", error.status, store_id)
        return None
    return model.name, [np.asarray(vector, dtype=np.float32) for vector in embedded.vectors]


async def search(request: Request) -> JSONResponse:
    started = time.perf_counter()
    deps = services(request)
    store_id = request.path_params["store_id"]
    body = await json_body(request)
    queries = _queries(body)
    requested = _search_mode(body)
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
    exact = body.get("exact", False)
    if not isinstance(exact, bool):
        raise invalid("'exact' must be a boolean", param="exact")
    filters = parse_filter(body["filters"]) if body.get("filters") is not None else None
    mode, model_name, vectors = requested, "", None
    # Lexical search never needs the embedder; the others fall back to it when it is down.
    if requested != LEXICAL:
        embedded = await _embed_queries(deps, store_id, queries)
        if embedded is None:
            mode = LEXICAL
        else:
            model_name, vectors = embedded
    degraded = mode != requested
    best: dict[str, store_pb2.SearchHit] = {}
    for index, query in enumerate(queries):
        request_message = store_pb2.SearchRequest(
            collection_id=store_id,
            k=k,
            score_threshold=threshold,
            mode=mode,
            query_text=query,
            exact=exact,
        )
        if vectors is not None:
            request_message.query_vector = to_bytes(vectors[index])
            request_message.dimensions = int(vectors[index].shape[-1])
            request_message.model = model_name
        if filters is not None:
            request_message.filter.CopyFrom(filters)
        reply = await deps.store.call("Search", request_message)
        # Several queries: each chunk keeps its best score over them.
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
    deps.audit.record(
        "search",
        store_id,
        latency_ms=(time.perf_counter() - started) * 1000,
        k=k,
        result_count=len(data),
        degraded=degraded,
        detail=mode,
    )
    return JSONResponse(
        {
            "object": "vector_store.search_results.page",
            # rewrite_query is accepted, but ragd searches with the query as given.
            "search_query": queries,
            "data": data,
            "has_more": False,
            "next_page": None,
            # Extensions: the mode that ranked the results, and whether it replaced the one
            # asked for because the embedder was unavailable.
            "mode": mode,
            "degraded": degraded,
        },
        headers={DEGRADED_HEADER: DEGRADED_REASON} if degraded else None,
    )
