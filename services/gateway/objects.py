"""Store messages rendered as OpenAI's JSON objects: files, vector stores, their files and
batches, searches, lists and deletions. The schemas they match are in schemas.py;
tests/test_renderers.py checks every property is produced (objects_admin.py and
objects_chat.py render the other families)."""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from services.common.vocabulary import HYBRID
from services.gateway.attributes import attributes_python
from services.pb import store_pb2

if TYPE_CHECKING:
    from services.gateway.clients import Embedded


def file_counts(counts: store_pb2.FileCounts) -> dict[str, int]:
    return {
        "in_progress": counts.in_progress,
        "completed": counts.completed,
        "failed": counts.failed,
        "cancelled": counts.cancelled,
        "total": counts.total,
    }


def vector_store(vector_store: store_pb2.VectorStore, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    if vector_store.expires_at and vector_store.expires_at <= now:
        status = "expired"
    elif vector_store.file_counts.in_progress:
        status = "in_progress"
    else:
        status = "completed"
    expires_after = (
        {"anchor": vector_store.expires_anchor, "days": vector_store.expires_days}
        if vector_store.expires_days
        else None
    )
    return {
        "id": vector_store.id,
        "object": "vector_store",
        "created_at": vector_store.created_at,
        "name": vector_store.name,
        "usage_bytes": vector_store.usage_bytes,
        "file_counts": file_counts(vector_store.file_counts),
        "status": status,
        "last_active_at": vector_store.last_active_at or None,
        "metadata": dict(vector_store.metadata),
        "expires_after": expires_after,
        "expires_at": vector_store.expires_at or None,
        # OpenAI takes a description on create (its object has none yet): echoed, or null.
        "description": vector_store.description or None,
        # Extension: the embedding model the store was indexed with.
        "embedding_model": {"name": vector_store.model, "dimensions": vector_store.dimensions},
        # Extension: chunks indexed in the store (searchable ones; files in progress add later).
        "chunk_count": vector_store.chunk_count,
        # Extension: "exact", "building" or "coarse" (large stores; see the README).
        "vector_index": vector_store.vector_index,
        # Extension: the latest re-index (POST /v1/vector_stores/{id}/reindex), if any.
        "reindex": reindex(vector_store.reindex) if vector_store.HasField("reindex") else None,
        # Extension: completed files searchable by text only, their vectors still to come.
        "vectors_pending": vector_store.file_counts.vectors_pending,
    }


def reindex(item: store_pb2.Reindex) -> dict[str, Any]:
    return {
        "status": item.status,
        "from_embedding_model": {
            "name": item.from_model.name,
            "dimensions": item.from_model.dimensions,
        },
        "embedding_model": {"name": item.model.name, "dimensions": item.model.dimensions},
        "created_at": item.created_at,
        "finished_at": item.finished_at or None,
        "file_counts": file_counts(item.file_counts),
        "last_error": item.last_error or None,
    }


def file(item: store_pb2.File) -> dict[str, Any]:
    return {
        "id": item.id,
        "object": "file",
        "bytes": item.bytes,
        "created_at": item.created_at,
        "filename": item.filename,
        "purpose": item.purpose,
        # Uploads are stored as they arrive; parsing happens when a file joins a vector store.
        "status": "processed",
        "status_details": None,
        "expires_at": item.expires_at or None,
    }


def vector_store_file(item: store_pb2.VectorStoreFile) -> dict[str, Any]:
    last_error = (
        {"code": item.last_error.code, "message": item.last_error.message}
        if item.HasField("last_error") and item.last_error.code
        else None
    )
    chunking = (
        {
            # OpenAI reports the resolved sizes, whichever kind was asked for.
            "type": "static",
            "static": {
                "max_chunk_size_tokens": item.chunking.max_chunk_size_tokens,
                "chunk_overlap_tokens": item.chunking.chunk_overlap_tokens,
            },
        }
        if item.HasField("chunking")
        else None
    )
    return {
        "id": item.file_id,
        "object": "vector_store.file",
        "usage_bytes": item.usage_bytes,
        "created_at": item.created_at,
        "vector_store_id": item.vector_store_id,
        "status": item.status,
        "last_error": last_error,
        "chunking_strategy": chunking,
        "attributes": attributes_python(item.attributes),
        # Extensions: searchable by text only so far (lexical-only operation); the file's name
        # and chunks, which OpenAI's object leaves to GET /v1/files/{id} and guesswork.
        "vectors_pending": item.vectors_pending,
        "filename": item.filename,
        "chunk_count": item.chunk_count,
    }


def file_batch(batch: store_pb2.FileBatch) -> dict[str, Any]:
    return {
        "id": batch.id,
        "object": "vector_store.files_batch",
        "created_at": batch.created_at,
        "vector_store_id": batch.vector_store_id,
        "status": batch.status,
        "file_counts": file_counts(batch.file_counts),
    }


def page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def deleted(object_id: str, kind: str, done: bool = True) -> dict[str, Any]:
    """OpenAI's answer to a delete: `kind` is the deleted object's `object` ("file",
    "vector_store.deleted", ...)."""
    return {"id": object_id, "object": kind, "deleted": done}


def file_content(chunks: Sequence[store_pb2.StoredChunk]) -> dict[str, Any]:
    """A vector store file's stored chunks, one page (OpenAI's file content page)."""
    return {
        "object": "vector_store.file_content.page",
        "data": [{"type": "text", "text": chunk.text} for chunk in chunks],
        "has_more": False,
        "next_page": None,
    }


def search_result(hit: store_pb2.SearchHit, mode: str) -> dict[str, Any]:
    rendered: dict[str, Any] = {
        "file_id": hit.file_id,
        "filename": hit.filename,
        "score": round(float(hit.score), 6),
        "attributes": attributes_python(hit.attributes),
        "content": [{"type": "text", "text": hit.text}],
    }
    if mode == HYBRID:
        # Extension: where each list ranked the result (null: not found by it).
        rendered["ranks"] = {
            "vector": hit.vector_rank or None,
            "lexical": hit.lexical_rank or None,
        }
    return rendered


def search_page(
    queries: Sequence[str], hits: Sequence[store_pb2.SearchHit], mode: str, degraded: bool
) -> dict[str, Any]:
    return {
        "object": "vector_store.search_results.page",
        # rewrite_query is accepted, but ragd searches with the query as given.
        "search_query": list(queries),
        "data": [search_result(hit, mode) for hit in hits],
        "has_more": False,
        "next_page": None,
        # Extensions: the mode that ranked the results, and whether it replaced the one
        # asked for because the embedder was unavailable.
        "mode": mode,
        "degraded": degraded,
    }


def embedding_list(result: Embedded, model: str, encoding: str, truncate: bool) -> dict[str, Any]:
    """OpenAI's embeddings: floats, or base64 of little-endian float32 (`encoding`)."""
    data = []
    floats = result.vectors.tolist() if encoding == "float" else []
    for index in range(len(result.token_counts)):
        embedding: Any = (
            base64.b64encode(result.vector_bytes(index)).decode("ascii")
            if encoding == "base64"
            else floats[index]
        )
        item = {"object": "embedding", "index": index, "embedding": embedding}
        if truncate:
            # Extension: which inputs lost tokens, reported only to clients that allowed it.
            item["truncated"] = result.truncated[index]
        data.append(item)
    tokens = sum(result.token_counts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def model(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "ragd"}


def model_list(names: Sequence[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model(name, created) for name in names]}
