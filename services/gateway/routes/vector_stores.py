"""Vector stores: create, list, retrieve, delete, attach a file, search."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import numpy as np
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse

from services.gateway import ingest
from services.gateway.clients import attribute_python
from services.gateway.errors import ApiError, invalid
from services.gateway.params import (
    attributes,
    json_body,
    metadata,
    optional_int,
    optional_number,
    optional_object,
    optional_str,
    query_choice,
    query_int,
)
from services.gateway.parsing import InvalidFile, UnsupportedFile, extract_text
from services.gateway.state import services
from services.pb import store_pb2


def vector_store_json(collection: store_pb2.Collection) -> dict[str, Any]:
    return {
        "id": collection.id,
        "object": "vector_store",
        "created_at": collection.created_at,
        "name": collection.name,
        "usage_bytes": collection.usage_bytes,
        "file_counts": {
            "in_progress": 0,
            "completed": collection.file_count,
            "failed": 0,
            "cancelled": 0,
            "total": collection.file_count,
        },
        "status": "completed",
        "last_active_at": collection.last_active_at or None,
        "metadata": dict(collection.metadata),
        "expires_after": None,
        "expires_at": None,
    }


async def create_vector_store(request: Request) -> JSONResponse:
    deps = services(request)
    body = await json_body(request)
    name = optional_str(body, "name", "") or ""
    meta = metadata(body)
    if body.get("file_ids"):
        raise ApiError(
            501,
            "'file_ids' needs the Files API, which this build does not serve "
            "yet; attach content with POST /v1/vector_stores/{id}/files",
            param="file_ids",
            code="not_implemented",
        )
    model = await deps.embedder.info()
    collection = await deps.store.create_collection(name, meta, model)
    return JSONResponse(vector_store_json(collection))


async def list_vector_stores(request: Request) -> JSONResponse:
    deps = services(request)
    limit = query_int(request, "limit", 20, 1, 100)
    order = query_choice(request, "order", "desc", ("asc", "desc"))
    after = request.query_params.get("after", "")
    before = request.query_params.get("before", "")
    reply = await deps.store.list_collections(limit, order, after, before)
    data = [vector_store_json(c) for c in reply.collections]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": reply.has_more,
        }
    )


async def get_vector_store(request: Request) -> JSONResponse:
    collection = await services(request).store.get_collection(request.path_params["store_id"])
    return JSONResponse(vector_store_json(collection))


async def delete_vector_store(request: Request) -> JSONResponse:
    reply = await services(request).store.delete_collection(request.path_params["store_id"])
    return JSONResponse(
        {"id": reply.id, "object": "vector_store.deleted", "deleted": reply.deleted}
    )


async def _upload(request: Request) -> tuple[str, bytes, dict[str, Any]]:
    """(filename, content, other fields) from multipart `file` or JSON {"text", "filename"}."""
    limit = services(request).config.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + 64 * 1024:
        raise ApiError(
            413, f"the upload is larger than the limit of {limit} bytes", code="file_too_large"
        )
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        async with request.form(max_part_size=limit) as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise invalid("multipart uploads need a 'file' part", param="file")
            data = await upload.read(limit + 1)
            filename = upload.filename or "upload.txt"
            fields: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
    else:
        body = await json_body(request)
        if "file_id" in body and "text" not in body:
            raise ApiError(
                501,
                "attaching by 'file_id' needs the Files API, which this build "
                'does not serve yet; send JSON {"text": ..., "filename": ...} '
                "or a multipart 'file'",
                param="file_id",
                code="not_implemented",
            )
        text = body.get("text")
        if not isinstance(text, str):
            raise invalid("send a multipart 'file', or JSON with a 'text' string", param="text")
        data = text.encode("utf-8", errors="surrogatepass")
        filename = optional_str(body, "filename", "text.txt") or "text.txt"
        fields = body
    if len(data) > limit:
        raise ApiError(
            413, f"the upload is larger than the limit of {limit} bytes", code="file_too_large"
        )
    return filename, data, fields


def _form_json(fields: dict[str, Any], name: str) -> Any:
    """A field that is an object in JSON bodies and a JSON string in multipart forms."""
    value = fields.get(name)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise invalid(f"'{name}' must be a JSON object", param=name) from None
    return value


async def attach_file(request: Request) -> JSONResponse:
    deps = services(request)
    store_id = request.path_params["store_id"]
    await deps.store.get_collection(store_id)  # 404 before any embedding work
    filename, data, fields = await _upload(request)
    attrs = attributes({"attributes": _form_json(fields, "attributes")})
    model = await deps.embedder.info()
    strategy = ingest.resolve_chunking(_form_json(fields, "chunking_strategy"), model)
    try:
        text = extract_text(filename, data)
    except UnsupportedFile as error:
        raise invalid(str(error), param="file", code="unsupported_file") from None
    except InvalidFile as error:
        raise invalid(str(error), param="file", code="invalid_file") from None
    file_id = "file-" + secrets.token_hex(12)
    result = await ingest.ingest_text(
        deps.embedder,
        deps.store,
        collection_id=store_id,
        file_id=file_id,
        filename=filename,
        text=text,
        attributes=attrs,
        strategy=strategy,
        batch_size=deps.config.embed_batch_size,
    )
    return JSONResponse(
        {
            "id": file_id,
            "object": "vector_store.file",
            "usage_bytes": result.usage_bytes,
            "created_at": int(time.time()),
            "vector_store_id": store_id,
            "status": "completed",
            "last_error": None,
            "chunking_strategy": strategy.as_json(),
            "attributes": attrs,
            # Extensions: what the synchronous ingest produced.
            "filename": filename,
            "chunk_count": result.chunk_count,
        }
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
    if body.get("filters") is not None:
        raise ApiError(
            501,
            "'filters' are not supported by this build yet",
            param="filters",
            code="not_implemented",
        )
    model = await deps.embedder.info()
    # Queries are short; truncating an over-long one beats refusing to search.
    embedded = await deps.embedder.embed(queries, truncate=True)
    best: dict[str, store_pb2.SearchHit] = {}
    for vector in embedded.vectors:
        reply = await deps.store.search(store_id, np.asarray(vector), k, threshold, model.name)
        for hit in reply.hits:
            if hit.chunk_id not in best or best[hit.chunk_id].score < hit.score:
                best[hit.chunk_id] = hit
    hits = sorted(best.values(), key=lambda h: h.score, reverse=True)[:k]
    data = [
        {
            "file_id": hit.file_id,
            "filename": hit.filename,
            "score": round(float(hit.score), 6),
            "attributes": {key: attribute_python(v) for key, v in hit.attributes.items()},
            "content": [{"type": "text", "text": hit.text}],
        }
        for hit in hits
    ]
    return JSONResponse(
        {
            "object": "vector_store.search_results.page",
            "search_query": queries,
            "data": data,
            "has_more": False,
            "next_page": None,
        }
    )
