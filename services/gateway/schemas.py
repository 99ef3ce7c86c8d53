"""JSON Schemas of the REST API's bodies, for /openapi.json (openapi.py).

The limits and names come from services/common/vocabulary.py, the same constants the routes
validate with, so the description cannot drift from what the gateway accepts.
"""

from __future__ import annotations

from typing import Any

from services.common import vocabulary as v

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(required: list[str] | None = None, **properties: Schema) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _list(item: str) -> Schema:
    """OpenAI's list envelope."""
    return _object(
        ["object", "data", "first_id", "last_id", "has_more"],
        object={"const": "list"},
        data={"type": "array", "items": ref(item)},
        first_id=_nullable({"type": "string"}),
        last_id=_nullable({"type": "string"}),
        has_more={"type": "boolean"},
    )


_STRING = {"type": "string"}
_INT = {"type": "integer"}
_COUNT = {"type": "integer", "minimum": 0}
_BOOL = {"type": "boolean"}
_NUMBER = {"type": "number"}

_METADATA = {
    "type": "object",
    "maxProperties": v.MAX_METADATA,
    "propertyNames": {"maxLength": v.MAX_KEY_CHARS},
    "additionalProperties": {"type": "string", "maxLength": v.MAX_METADATA_CHARS},
}
# What a float64 holds: larger JSON numbers are refused.
_FINITE = {"type": "number", "minimum": -1.7976931348623157e308, "maximum": 1.7976931348623157e308}
_ATTRIBUTE = {
    "oneOf": [
        {"type": "string", "maxLength": v.MAX_ATTRIBUTE_CHARS},
        _FINITE,
        {"type": "boolean"},
    ]
}
_ATTRIBUTES = {
    "type": "object",
    "maxProperties": v.MAX_ATTRIBUTES,
    "propertyNames": {"maxLength": v.MAX_KEY_CHARS},
    "additionalProperties": _ATTRIBUTE,
}
_EXPIRES_AFTER = _object(
    ["anchor", "days"],
    anchor={"const": "last_active_at"},
    days={"type": "integer", "minimum": 1, "maximum": 365},
)
_STATIC_CHUNKING = _object(
    ["max_chunk_size_tokens", "chunk_overlap_tokens"],
    max_chunk_size_tokens={
        "type": "integer",
        "minimum": v.MIN_CHUNK_TOKENS,
        "maximum": v.MAX_CHUNK_TOKENS,
    },
    chunk_overlap_tokens={"type": "integer", "minimum": 0},
)
_QUERY = {"type": "string", "pattern": r"\S", "maxLength": v.MAX_QUERY_CHARS}
_TEXT_PART = _object(["type", "text"], type={"const": "text"}, text=_STRING)

SCHEMAS: dict[str, Schema] = {
    "Error": _object(
        ["error"],
        error=_object(
            ["message", "type", "param", "code"],
            message=_STRING,
            type=_STRING,
            param=_nullable(_STRING),
            code=_nullable(_STRING),
        ),
    ),
    "Health": _object(["status"], status={"const": "ok"}),
    "Disk": _object(
        ["free_bytes", "total_bytes", "full"],
        free_bytes=_COUNT,
        total_bytes=_COUNT,
        full={"description": "writes are refused for lack of space"} | _BOOL,
    ),
    "Readiness": _object(
        ["status", "embedder", "store"],
        status={"enum": ["ready", "not_ready"]},
        embedder=_STRING,
        store=_STRING,
        disk=_nullable(ref("Disk")),
    ),
    # Embeddings and models
    "EmbeddingRequest": _object(
        ["input"],
        input={
            "oneOf": [
                {"type": "string", "minLength": 1},
                {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "minItems": 1,
                    "maxItems": v.MAX_EMBED_INPUTS,
                },
            ]
        },
        model=_STRING,
        encoding_format={"enum": ["float", "base64"]},
        dimensions=_INT,
        truncate={"description": "ragd extension: embed the first tokens of over-long inputs"}
        | _BOOL,
    ),
    "Embedding": _object(
        ["object", "index", "embedding"],
        object={"const": "embedding"},
        index=_COUNT,
        embedding={
            "description": "floats, or base64 of little-endian float32 (encoding_format)",
            "oneOf": [{"type": "array", "items": _NUMBER}, _STRING],
        },
        truncated={"description": "ragd extension, with truncate: true"} | _BOOL,
    ),
    "EmbeddingList": _object(
        ["object", "data", "model", "usage"],
        object={"const": "list"},
        data={"type": "array", "items": ref("Embedding")},
        model=_STRING,
        usage=_object(["prompt_tokens", "total_tokens"], prompt_tokens=_COUNT, total_tokens=_COUNT),
    ),
    "Model": _object(
        ["id", "object", "created", "owned_by"],
        id=_STRING,
        object={"const": "model"},
        created=_INT,
        owned_by=_STRING,
    ),
    "ModelList": _object(
        ["object", "data"], object={"const": "list"}, data={"type": "array", "items": ref("Model")}
    ),
    # Files
    "FileUpload": _object(
        ["file", "purpose"],
        file={"type": "string", "format": "binary"},
        purpose={"enum": list(v.FILE_PURPOSES)},
    ),
    "File": _object(
        ["id", "object", "bytes", "created_at", "filename", "purpose", "status"],
        id=_STRING,
        object={"const": "file"},
        bytes=_COUNT,
        created_at=_INT,
        filename=_STRING,
        purpose=_STRING,
        status=_STRING,
        status_details={"type": "null"},
        expires_at={"type": "null"},
    ),
    "FileList": _list("File"),
    "Deleted": _object(["id", "object", "deleted"], id=_STRING, object=_STRING, deleted=_BOOL),
    # Vector stores
    "ChunkingStrategy": {
        "oneOf": [
            _object(["type"], type={"const": v.AUTO}),
            _object(["type", "static"], type={"const": v.STATIC}, static=_STATIC_CHUNKING),
        ]
    },
    "FileCounts": _object(
        [*v.FILE_STATUSES, "total"],
        **{status: _COUNT for status in (*v.FILE_STATUSES, "total")},
    ),
    "VectorStoreCreate": _object(
        name={"type": "string", "maxLength": v.MAX_NAME_CHARS},
        metadata=_METADATA,
        file_ids={"type": "array", "items": _STRING},
        chunking_strategy=ref("ChunkingStrategy"),
        expires_after=_EXPIRES_AFTER,
    ),
    "VectorStoreUpdate": _object(
        name=_nullable({"type": "string", "maxLength": v.MAX_NAME_CHARS}),
        metadata=_nullable(_METADATA),
        expires_after=_nullable(_EXPIRES_AFTER),
    ),
    "VectorStore": _object(
        ["id", "object", "created_at", "name", "usage_bytes", "file_counts", "status"],
        id=_STRING,
        object={"const": "vector_store"},
        created_at=_INT,
        name=_STRING,
        usage_bytes=_COUNT,
        file_counts=ref("FileCounts"),
        status={"enum": ["expired", "in_progress", "completed"]},
        last_active_at=_nullable(_INT),
        metadata={"type": "object", "additionalProperties": _STRING},
        expires_after=_nullable(_EXPIRES_AFTER),
        expires_at=_nullable(_INT),
        embedding_model={"description": "ragd extension: the model it is indexed with"}
        | _object(["name", "dimensions"], name=_STRING, dimensions=_INT),
        chunk_count={"description": "ragd extension: searchable chunks"} | _COUNT,
        vector_index={
            "description": "ragd extension: how vector searches run: exact (scan), "
            "building (a coarse index is being built) or coarse",
            "enum": list(v.INDEX_KINDS),
        },
    ),
    "VectorStoreList": _list("VectorStore"),
    "VectorStoreFileCreate": {
        "description": "OpenAI's {file_id, attributes, chunking_strategy}; or, as a ragd "
        "extension, {text, filename, attributes, chunking_strategy} or a multipart 'file' "
        "(attributes and chunking_strategy as JSON strings).",
        "anyOf": [{"required": ["file_id"]}, {"required": ["text"]}],
    }
    | _object(
        file_id={"type": "string", "minLength": 1},
        attributes=_ATTRIBUTES,
        chunking_strategy=ref("ChunkingStrategy"),
        text=_STRING,
        filename={"type": "string", "maxLength": v.MAX_FILENAME_CHARS},
    ),
    "VectorStoreFileUpload": _object(
        ["file"],
        file={"type": "string", "format": "binary"},
        attributes={"description": "JSON object"} | _STRING,
        chunking_strategy={"description": "JSON object"} | _STRING,
    ),
    "VectorStoreFileUpdate": _object(["attributes"], attributes=_ATTRIBUTES),
    "VectorStoreFile": _object(
        ["id", "object", "usage_bytes", "created_at", "vector_store_id", "status", "last_error"],
        id=_STRING,
        object={"const": "vector_store.file"},
        usage_bytes=_COUNT,
        created_at=_INT,
        vector_store_id=_STRING,
        status={"enum": list(v.FILE_STATUSES)},
        last_error=_nullable(
            _object(["code", "message"], code={"enum": list(v.FILE_ERROR_CODES)}, message=_STRING)
        ),
        chunking_strategy=_nullable(
            _object(["type", "static"], type={"const": v.STATIC}, static=_STATIC_CHUNKING)
        ),
        attributes={"type": "object", "additionalProperties": _ATTRIBUTE},
    ),
    "VectorStoreFileList": _list("VectorStoreFile"),
    "VectorStoreFileContent": _object(
        ["object", "data", "has_more", "next_page"],
        object={"const": "vector_store.file_content.page"},
        data={"type": "array", "items": _TEXT_PART},
        has_more=_BOOL,
        next_page={"type": "null"},
    ),
    "FileBatchCreate": {"oneOf": [{"required": ["file_ids"]}, {"required": ["files"]}]}
    | _object(
        file_ids={"type": "array", "items": _STRING, "minItems": 1, "maxItems": v.MAX_BATCH_FILES},
        files={
            "type": "array",
            "minItems": 1,
            "maxItems": v.MAX_BATCH_FILES,
            "items": _object(
                ["file_id"],
                file_id=_STRING,
                attributes=_ATTRIBUTES,
                chunking_strategy=ref("ChunkingStrategy"),
            ),
        },
        attributes=_ATTRIBUTES,
        chunking_strategy=ref("ChunkingStrategy"),
    ),
    "FileBatch": _object(
        ["id", "object", "created_at", "vector_store_id", "status", "file_counts"],
        id=_STRING,
        object={"const": "vector_store.file_batch"},
        created_at=_INT,
        vector_store_id=_STRING,
        status={"enum": list(v.BATCH_STATUSES)},
        file_counts=ref("FileCounts"),
    ),
    # Search
    "Filter": {
        "description": "OpenAI's attribute filters: a comparison, or and/or over filters",
        "oneOf": [
            _object(
                ["type", "key", "value"],
                type={"enum": list(v.FILTER_COMPARISONS)},
                key={"type": "string", "minLength": 1},
                value={
                    "oneOf": [
                        _ATTRIBUTE,
                        {"type": "array", "minItems": 1, "items": _ATTRIBUTE},
                    ]
                },
            ),
            _object(
                ["type", "filters"],
                type={"enum": list(v.FILTER_COMPOUNDS)},
                filters={"type": "array", "minItems": 1, "items": ref("Filter")},
            ),
        ],
    },
    "SearchRequest": _object(
        ["query"],
        query={
            "oneOf": [
                _QUERY,
                {"type": "array", "minItems": 1, "maxItems": v.MAX_SEARCH_QUERIES, "items": _QUERY},
            ]
        },
        max_num_results={"type": "integer", "minimum": 1, "maximum": v.MAX_SEARCH_RESULTS},
        filters=ref("Filter"),
        ranking_options=_object(
            ranker={"enum": list(v.RANKERS)},
            score_threshold={"type": "number", "minimum": 0, "maximum": 1},
        ),
        rewrite_query=_BOOL,
        mode={
            "description": "ragd extension: vector (embedding KNN), lexical (bm25 over the "
            "chunk text, no embedder needed) or hybrid (reciprocal rank fusion of both)",
            "enum": list(v.SEARCH_MODES),
            "default": v.VECTOR,
        },
        exact={
            "description": "ragd extension: rank by an exhaustive scan instead of the coarse "
            "index large vector stores use (exact, slower); filters are exact either way",
            "type": "boolean",
            "default": False,
        },
    ),
    "SearchResult": _object(
        ["file_id", "filename", "score", "attributes", "content"],
        file_id=_STRING,
        filename=_STRING,
        score={"type": "number", "minimum": 0, "maximum": 1},
        attributes={"type": "object", "additionalProperties": _ATTRIBUTE},
        content={"type": "array", "items": _TEXT_PART},
    ),
    "SearchPage": _object(
        ["object", "search_query", "data", "has_more", "next_page"],
        object={"const": "vector_store.search_results.page"},
        search_query={"type": "array", "items": _STRING},
        data={"type": "array", "items": ref("SearchResult")},
        has_more=_BOOL,
        next_page={"type": "null"},
        mode={
            "description": "ragd extension: the mode that ranked the results",
            "enum": list(v.SEARCH_MODES),
        },
        degraded={
            "description": "ragd extension: true when the embedder was unavailable and the "
            "search fell back to lexical (also the header X-Ragd-Degraded)",
            "type": "boolean",
        },
    ),
    # Operations
    "BackupRequest": _object(
        path={
            "type": "string",
            "description": "File name inside the store's backup directory (RAGD_BACKUP_DIR); "
            "default ragd-<UTC time>.db. Absolute or escaping paths are a 400, an existing "
            "file a 409.",
        }
    ),
    "BackupResult": _object(
        ["path", "bytes", "seconds"],
        path={"type": "string", "description": "absolute, on the store's filesystem"},
        bytes=_COUNT,
        seconds=_NUMBER,
    ),
    "VacuumResult": _object(
        ["bytes_before", "bytes_after", "seconds", "compacted_vector_stores"],
        bytes_before=_COUNT,
        bytes_after=_COUNT,
        seconds=_NUMBER,
        compacted_vector_stores=_COUNT,
    ),
    "Stats": _object(
        ["object", "global", "embedding_cache", "vector_stores"],
        object={"const": "ragd.stats"},
        **{
            "global": _object(
                ["schema_version", "db_bytes", "vector_stores", "files", "chunks", "jobs"],
                schema_version=_INT,
                db_bytes=_COUNT,
                wal_bytes=_COUNT,
                free_bytes=_COUNT,
                vector_stores=_COUNT,
                files=_COUNT,
                file_bytes=_COUNT,
                chunks=_COUNT,
                vectors=_COUNT,
                usage_bytes=_COUNT,
                jobs=_object(["pending", "leased"], pending=_COUNT, leased=_COUNT),
                audit_entries=_COUNT,
                disk=ref("Disk"),
            ),
            "embedding_cache": _object(
                ["enabled", "entries", "hits", "misses", "hit_rate"],
                enabled=_BOOL,
                entries=_COUNT,
                bytes=_COUNT,
                max_entries=_COUNT,
                hits=_COUNT,
                misses=_COUNT,
                hit_rate={"type": "number", "minimum": 0, "maximum": 1},
                stored=_COUNT,
                evicted=_COUNT,
            ),
            "vector_stores": {
                "type": "array",
                "items": _object(
                    ["id", "name", "embedding_model", "files", "chunks", "vectors"],
                    id=_STRING,
                    name=_STRING,
                    embedding_model=_object(["name", "dimensions"], name=_STRING, dimensions=_INT),
                    files=_COUNT,
                    chunks=_COUNT,
                    vectors=_COUNT,
                    vector_slots=_COUNT,
                    usage_bytes=_COUNT,
                ),
            },
        },
    ),
    "AuditEntry": _object(
        ["id", "at", "operation", "vector_store_id", "latency_ms", "result_count", "degraded"],
        id=_INT,
        at=_NUMBER,
        operation={"enum": list(v.AUDIT_OPERATIONS)},
        vector_store_id=_nullable(_STRING),
        k=_COUNT,
        latency_ms=_NUMBER,
        result_count=_COUNT,
        degraded=_BOOL,
        detail=_STRING,
    ),
    "AuditList": _object(
        ["object", "data", "has_more", "last_id"],
        object={"const": "list"},
        data={"type": "array", "items": ref("AuditEntry")},
        has_more=_BOOL,
        last_id=_nullable(_INT),
    ),
}
