"""GET /openapi.json: a hand-written OpenAPI 3.1 description of the REST API.

Kept beside the routes; tests/test_openapi.py checks that every route is described and every
described operation exists.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _op(
    summary: str, response: str | None, body: str | None = None, **extra: Any
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {
            "200": {"description": "OK", **(_json(_ref(response)) if response else {})},
            "default": {"description": "Error", **_json(_ref("Error"))},
        },
    }
    if body:
        operation["requestBody"] = {"required": True, **_json(_ref(body))}
    operation.update(extra)
    return operation


_LIST_PARAMS = [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
    {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"]}},
    {"name": "after", "in": "query", "schema": {"type": "string"}},
    {"name": "before", "in": "query", "schema": {"type": "string"}},
]
_MULTIPART_FILE = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "purpose": {"type": "string"},
                },
                "required": ["file", "purpose"],
            }
        }
    },
}

_OBJ = {"type": "object"}
_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                },
                "required": ["message", "type", "param", "code"],
            }
        },
    },
    "EmbeddingRequest": {
        "type": "object",
        "required": ["input"],
        "properties": {
            "input": {
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}, "maxItems": 2048},
                ]
            },
            "model": {"type": "string"},
            "encoding_format": {"enum": ["float", "base64"]},
            "dimensions": {"type": "integer"},
        },
    },
    "EmbeddingList": _OBJ,
    "ModelList": _OBJ,
    "File": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "file"},
            "bytes": {"type": "integer"},
            "created_at": {"type": "integer"},
            "filename": {"type": "string"},
            "purpose": {"type": "string"},
            "status": {"type": "string"},
        },
    },
    "FileList": _OBJ,
    "Deleted": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"type": "string"},
            "deleted": {"type": "boolean"},
        },
    },
    "ChunkingStrategy": {
        "oneOf": [
            {"type": "object", "properties": {"type": {"const": "auto"}}},
            {
                "type": "object",
                "properties": {
                    "type": {"const": "static"},
                    "static": {
                        "type": "object",
                        "properties": {
                            "max_chunk_size_tokens": {
                                "type": "integer",
                                "minimum": 100,
                                "maximum": 4096,
                            },
                            "chunk_overlap_tokens": {"type": "integer", "minimum": 0},
                        },
                    },
                },
            },
        ]
    },
    "VectorStoreCreate": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "metadata": _OBJ,
            "file_ids": {"type": "array", "items": {"type": "string"}},
            "chunking_strategy": _ref("ChunkingStrategy"),
            "expires_after": _OBJ,
        },
    },
    "VectorStoreUpdate": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "metadata": _OBJ, "expires_after": _OBJ},
    },
    "VectorStore": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store"},
            "created_at": {"type": "integer"},
            "name": {"type": "string"},
            "usage_bytes": {"type": "integer"},
            "chunk_count": {"type": "integer", "description": "ragd extension"},
            "vector_index": {
                "description": "ragd extension: how vector searches run: exact (scan), "
                "building (a coarse index is being built) or coarse",
                "enum": ["exact", "building", "coarse"],
            },
            "file_counts": _OBJ,
            "status": {"enum": ["expired", "in_progress", "completed"]},
            "last_active_at": {"type": ["integer", "null"]},
            "metadata": _OBJ,
        },
    },
    "VectorStoreList": _OBJ,
    "VectorStoreFileCreate": {
        "description": "OpenAI's {file_id, attributes, chunking_strategy}; or, as a ragd "
        "extension, {text, filename, attributes, chunking_strategy} or a multipart 'file'.",
        "type": "object",
        "properties": {
            "file_id": {"type": "string"},
            "attributes": _OBJ,
            "chunking_strategy": _ref("ChunkingStrategy"),
            "text": {"type": "string"},
            "filename": {"type": "string"},
        },
    },
    "VectorStoreFileUpdate": {
        "type": "object",
        "required": ["attributes"],
        "properties": {"attributes": _OBJ},
    },
    "VectorStoreFile": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store.file"},
            "status": {"enum": ["in_progress", "completed", "failed", "cancelled"]},
            "last_error": {"type": ["object", "null"]},
            "usage_bytes": {"type": "integer"},
            "vector_store_id": {"type": "string"},
            "attributes": _OBJ,
            "chunking_strategy": _OBJ,
        },
    },
    "VectorStoreFileList": _OBJ,
    "VectorStoreFileContent": _OBJ,
    "FileBatchCreate": {
        "type": "object",
        "properties": {
            "file_ids": {"type": "array", "items": {"type": "string"}, "maxItems": 2000},
            "files": {"type": "array", "maxItems": 2000, "items": _OBJ},
            "attributes": _OBJ,
            "chunking_strategy": _ref("ChunkingStrategy"),
        },
    },
    "FileBatch": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "vector_store.file_batch"},
            "status": {"enum": ["in_progress", "completed", "cancelled", "failed"]},
            "file_counts": _OBJ,
        },
    },
    "SearchRequest": {
        "type": "object",
        "required": ["query"],
        "properties": {
            "query": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
            "max_num_results": {"type": "integer", "minimum": 1, "maximum": 50},
            "filters": {
                "description": "comparison (eq ne gt gte lt lte in nin) or compound "
                "(and, or), nested",
                "type": "object",
            },
            "ranking_options": {
                "type": "object",
                "properties": {
                    "ranker": {"type": "string"},
                    "score_threshold": {"type": "number", "minimum": 0, "maximum": 1},
                },
            },
            "rewrite_query": {"type": "boolean"},
            "mode": {
                "description": "extension: vector (embedding KNN), lexical (bm25 over the "
                "chunk text, no embedder needed) or hybrid (reciprocal rank fusion of both)",
                "enum": ["vector", "lexical", "hybrid"],
                "default": "vector",
            },
            "exact": {
                "description": "extension: rank by an exhaustive scan instead of the coarse "
                "index large vector stores use (exact, slower); filters are exact either way",
                "type": "boolean",
                "default": False,
            },
        },
    },
    "SearchPage": {
        "type": "object",
        "properties": {
            "object": {"const": "vector_store.search_results.page"},
            "search_query": {"type": "array", "items": {"type": "string"}},
            "data": {"type": "array", "items": _OBJ},
            "has_more": {"type": "boolean"},
            "next_page": {"type": ["string", "null"]},
            "mode": {
                "description": "extension: the mode that ranked the results",
                "enum": ["vector", "lexical", "hybrid"],
            },
            "degraded": {
                "description": "extension: true when the embedder was unavailable and the "
                "search fell back to lexical (also the header X-Ragd-Degraded)",
                "type": "boolean",
            },
        },
    },
    "Health": _OBJ,
    "BackupRequest": {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File name inside the store's backup directory (RAGD_BACKUP_DIR); "
                "default ragd-<UTC time>.db. Absolute or escaping paths are a 400, an existing "
                "file a 409.",
            }
        },
    },
    "BackupResult": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "absolute, on the store's filesystem"},
            "bytes": {"type": "integer"},
            "seconds": {"type": "number"},
        },
    },
    "VacuumResult": {
        "type": "object",
        "properties": {
            "bytes_before": {"type": "integer"},
            "bytes_after": {"type": "integer"},
            "seconds": {"type": "number"},
            "compacted_vector_stores": {"type": "integer"},
        },
    },
    "Stats": {
        "type": "object",
        "properties": {
            "global": _OBJ,
            "embedding_cache": _OBJ,
            "vector_stores": {"type": "array", "items": _OBJ},
        },
    },
    "AuditList": {
        "type": "object",
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": _OBJ},
            "has_more": {"type": "boolean"},
            "last_id": {"type": ["integer", "null"]},
        },
    },
}

_VS = "/v1/vector_stores/{store_id}"
PATHS: dict[str, dict[str, Any]] = {
    "/health": {"get": _op("Liveness: the gateway process is up", "Health")},
    "/ready": {"get": _op("Readiness of the embedder and the store (503 until both)", "Health")},
    "/openapi.json": {"get": _op("This document", None)},
    "/admin/backup": {
        "post": {
            **_op("Online backup of the store's database", "BackupResult"),
            "requestBody": {"required": False, **_json(_ref("BackupRequest"))},
        }
    },
    "/admin/vacuum": {"post": _op("Reclaim the space of deleted data", "VacuumResult")},
    "/admin/stats": {"get": _op("Global and per vector store statistics", "Stats")},
    "/admin/audit": {
        "get": _op(
            "Audit log of ingest and search calls, newest first",
            "AuditList",
            parameters=[
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                {"name": "operation", "in": "query", "schema": {"enum": ["search", "ingest"]}},
                {"name": "store", "in": "query", "schema": {"type": "string"}},
                {"name": "before", "in": "query", "schema": {"type": "integer"}},
            ],
        )
    },
    "/v1/embeddings": {"post": _op("Create embeddings", "EmbeddingList", "EmbeddingRequest")},
    "/v1/models": {"get": _op("List the served model", "ModelList")},
    "/v1/files": {
        "post": {**_op("Upload a file", "File"), "requestBody": _MULTIPART_FILE},
        "get": _op(
            "List files",
            "FileList",
            parameters=[
                *_LIST_PARAMS[:3],
                {"name": "purpose", "in": "query", "schema": {"type": "string"}},
            ],
        ),
    },
    "/v1/files/{file_id}": {
        "get": _op("Retrieve a file", "File"),
        "delete": _op("Delete a file everywhere", "Deleted"),
    },
    "/v1/files/{file_id}/content": {"get": _op("Download a file's bytes", None)},
    "/v1/vector_stores": {
        "post": _op("Create a vector store", "VectorStore", "VectorStoreCreate"),
        "get": _op("List vector stores", "VectorStoreList", parameters=_LIST_PARAMS),
    },
    _VS: {
        "get": _op("Retrieve a vector store", "VectorStore"),
        "post": _op("Modify a vector store", "VectorStore", "VectorStoreUpdate"),
        "delete": _op("Delete a vector store", "Deleted"),
    },
    _VS + "/search": {"post": _op("Search a vector store", "SearchPage", "SearchRequest")},
    _VS + "/files": {
        "post": _op(
            "Attach a file (ingested asynchronously)", "VectorStoreFile", "VectorStoreFileCreate"
        ),
        "get": _op(
            "List a vector store's files",
            "VectorStoreFileList",
            parameters=[
                *_LIST_PARAMS,
                {
                    "name": "filter",
                    "in": "query",
                    "schema": {"enum": ["in_progress", "completed", "failed", "cancelled"]},
                },
            ],
        ),
    },
    _VS + "/files/{file_id}": {
        "get": _op("Retrieve a vector store file", "VectorStoreFile"),
        "post": _op(
            "Update a vector store file's attributes", "VectorStoreFile", "VectorStoreFileUpdate"
        ),
        "delete": _op("Remove a file (its chunks and vectors) from the vector store", "Deleted"),
    },
    _VS + "/files/{file_id}/content": {
        "get": _op("The file's stored chunks", "VectorStoreFileContent")
    },
    _VS + "/file_batches": {"post": _op("Attach up to 2000 files", "FileBatch", "FileBatchCreate")},
    _VS + "/file_batches/{batch_id}": {"get": _op("Retrieve a file batch", "FileBatch")},
    _VS + "/file_batches/{batch_id}/cancel": {"post": _op("Cancel a file batch", "FileBatch")},
    _VS + "/file_batches/{batch_id}/files": {
        "get": _op("List a batch's files", "VectorStoreFileList", parameters=_LIST_PARAMS)
    },
}

SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "ragd",
        "version": "0.1.0",
        "description": "OpenAI-compatible embeddings, files and vector stores. When API keys "
        "are configured, /v1 and /admin routes need 'Authorization: Bearer <key>'.",
    },
    "components": {
        "schemas": _SCHEMAS,
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    },
    "security": [{"bearer": []}],
    "paths": PATHS,
}


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(SPEC)
