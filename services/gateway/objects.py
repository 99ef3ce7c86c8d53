"""Store messages rendered as OpenAI's JSON objects."""

from __future__ import annotations

import time
from typing import Any

from services.gateway.attributes import attributes_python
from services.pb import store_pb2


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
        "expires_at": None,
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
        "object": "vector_store.file_batch",
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
