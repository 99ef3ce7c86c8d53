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


def obj(required: list[str] | None = None, **properties: Schema) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def list_of(item: str) -> Schema:
    """OpenAI's list envelope."""
    return obj(
        ["object", "data", "first_id", "last_id", "has_more"],
        object={"const": "list"},
        data={"type": "array", "items": ref(item)},
        first_id=nullable({"type": "string"}),
        last_id=nullable({"type": "string"}),
        has_more={"type": "boolean"},
    )


STRING = {"type": "string"}
INT = {"type": "integer"}
COUNT = {"type": "integer", "minimum": 0}
BOOL = {"type": "boolean"}
NUMBER = {"type": "number"}

METADATA = {
    "type": "object",
    "maxProperties": v.MAX_METADATA,
    "propertyNames": {"maxLength": v.MAX_KEY_CHARS},
    "additionalProperties": {"type": "string", "maxLength": v.MAX_METADATA_CHARS},
}
# What a float64 holds: larger JSON numbers are refused.
FINITE = {"type": "number", "minimum": -1.7976931348623157e308, "maximum": 1.7976931348623157e308}
ATTRIBUTE = {
    "oneOf": [
        {"type": "string", "maxLength": v.MAX_ATTRIBUTE_CHARS},
        FINITE,
        {"type": "boolean"},
    ]
}
EMBEDDING_MODEL = {
    "description": "ragd extension: the model to index with, by name or as the vector store "
    "shows it; one the server serves (GET /v1/models), else a 400",
    "oneOf": [
        {"type": "string", "minLength": 1},
        obj(["name"], name={"type": "string", "minLength": 1}, dimensions=INT),
    ],
}
_EXPIRES_AFTER = obj(
    ["anchor", "days"],
    anchor={"const": "last_active_at"},
    days={"type": "integer", "minimum": 1, "maximum": 365},
)
_STATIC_CHUNKING = obj(
    ["max_chunk_size_tokens", "chunk_overlap_tokens"],
    max_chunk_size_tokens={
        "type": "integer",
        "minimum": v.MIN_CHUNK_TOKENS,
        "maximum": v.MAX_CHUNK_TOKENS,
    },
    chunk_overlap_tokens={"type": "integer", "minimum": 0},
)
QUERY = {"type": "string", "pattern": r"\S", "maxLength": v.MAX_QUERY_CHARS}
TEXT_PART = obj(["type", "text"], type={"const": "text"}, text=STRING)

SCHEMAS: dict[str, Schema] = {
    "Error": obj(
        ["error"],
        error=obj(
            ["message", "type", "param", "code"],
            message=STRING,
            type=STRING,
            param=nullable(STRING),
            code=nullable(STRING),
        ),
    ),
    "Health": obj(["status"], status={"const": "ok"}),
    "Version": obj(
        ["version", "gateway", "store", "embedders"],
        version=STRING,
        gateway={"type": "object", "additionalProperties": STRING},
        store={
            "description": "component -> version, schema_version; or {error} when the store "
            "does not answer",
            "type": "object",
        },
        embedders={
            "description": "one per model: its embedder's software, backend, model, "
            "model_digest and model_source; or {error}",
            "type": "array",
            "items": {"type": "object"},
        },
    ),
    "Disk": obj(
        ["free_bytes", "total_bytes", "full"],
        free_bytes=COUNT,
        total_bytes=COUNT,
        full={"description": "writes are refused for lack of space"} | BOOL,
    ),
    "Readiness": obj(
        ["status", "degraded", "embedder", "store", "chat"],
        status={
            "description": "ready; degraded: serving without what `degraded` lists; not_ready "
            "(503): the store, or a dependency named in `require`, is down",
            "enum": ["ready", "degraded", "not_ready"],
        },
        degraded={
            "description": "what is missing while the gateway serves (also the header "
            "X-Ragd-Degraded): embedder-unavailable (searches answer lexically), "
            "chat-unavailable, vector-index-unavailable",
            "type": "array",
            "items": STRING,
        },
        embedder=STRING,
        store=STRING,
        chat={"description": "the chat upstream; null when none is configured"} | nullable(STRING),
        disk=nullable(ref("Disk")),
        unserved_models={
            "description": "vector stores indexed with a model the embedders do not serve "
            "(their searches and uploads are refused); shown when both services are up",
            "type": "array",
            "items": obj(
                ["model", "dimensions", "vector_stores", "sample_ids"],
                model=STRING,
                dimensions=INT,
                vector_stores=COUNT,
                sample_ids={"type": "array", "items": STRING, "maxItems": 5},
            ),
        },
        vector_index={
            "description": "unavailable: the store could not load sqlite-vec and serves "
            "lexical-only (still ready); shown when the store is up",
            "enum": ["available", "unavailable"],
        },
        vector_index_error={"description": "why sqlite-vec could not be loaded"} | STRING,
        engine={
            "description": "the store's database engine (RAGD_DATABASE_URL chooses PostgreSQL); "
            "shown when the store is up",
            "enum": ["sqlite", "postgres"],
        },
        embedders={
            "description": "with several models: each model's embedders' health",
            "type": "object",
            "additionalProperties": STRING,
        },
    ),
    # Embeddings and models
    "Embedding": obj(
        ["object", "index", "embedding"],
        object={"const": "embedding"},
        index=COUNT,
        embedding={
            "description": "floats, or base64 of little-endian float32 (encoding_format)",
            "oneOf": [{"type": "array", "items": NUMBER}, STRING],
        },
        truncated={"description": "ragd extension, with truncate: true"} | BOOL,
    ),
    "EmbeddingList": obj(
        ["object", "data", "model", "usage"],
        object={"const": "list"},
        data={"type": "array", "items": ref("Embedding")},
        model=STRING,
        usage=obj(["prompt_tokens", "total_tokens"], prompt_tokens=COUNT, total_tokens=COUNT),
    ),
    "Model": obj(
        ["id", "object", "created", "owned_by"],
        id=STRING,
        object={"const": "model"},
        created=INT,
        owned_by=STRING,
    ),
    "ModelList": obj(
        ["object", "data"], object={"const": "list"}, data={"type": "array", "items": ref("Model")}
    ),
    # Files
    "File": obj(
        ["id", "object", "bytes", "created_at", "filename", "purpose", "status"],
        id=STRING,
        object={"const": "file"},
        bytes=COUNT,
        created_at=INT,
        filename=STRING,
        purpose=STRING,
        status=STRING,
        status_details={"type": "null"},
        expires_at=nullable(INT),
    ),
    "FileList": list_of("File"),
    "Deleted": obj(["id", "object", "deleted"], id=STRING, object=STRING, deleted=BOOL),
    # Vector stores
    "FileCounts": obj(
        [*v.FILE_STATUSES, "total"],
        **{status: COUNT for status in (*v.FILE_STATUSES, "total")},
    ),
    "Reindex": obj(
        ["status", "from_embedding_model", "embedding_model", "created_at", "file_counts"],
        status={"enum": ["in_progress", "completed", "failed", "cancelled"]},
        from_embedding_model=obj(["name", "dimensions"], name=STRING, dimensions=INT),
        embedding_model=obj(["name", "dimensions"], name=STRING, dimensions=INT),
        created_at=INT,
        finished_at=nullable(INT),
        file_counts=ref("FileCounts"),
        last_error=nullable(STRING),
    ),
    "VectorStore": obj(
        ["id", "object", "created_at", "name", "usage_bytes", "file_counts", "status"],
        id=STRING,
        object={"const": "vector_store"},
        created_at=INT,
        name=STRING,
        usage_bytes=COUNT,
        file_counts=ref("FileCounts"),
        status={"enum": ["expired", "in_progress", "completed"]},
        last_active_at=nullable(INT),
        metadata={"type": "object", "additionalProperties": STRING},
        expires_after=nullable(_EXPIRES_AFTER),
        expires_at=nullable(INT),
        description={"description": "as created or updated (OpenAI's object has none yet)"}
        | nullable(STRING),
        embedding_model={"description": "ragd extension: the model it is indexed with"}
        | obj(["name", "dimensions"], name=STRING, dimensions=INT),
        chunk_count={"description": "ragd extension: searchable chunks"} | COUNT,
        vector_index={
            "description": "ragd extension: how vector searches run: exact (scan), "
            "building (a coarse index is being built) or coarse",
            "enum": list(v.INDEX_KINDS),
        },
        reindex={"description": "ragd extension: the latest re-index, if any"}
        | nullable(ref("Reindex")),
        vectors_pending={
            "description": "ragd extension: completed files searchable by text only so far; "
            "their vectors are written once their model's embedders answer"
        }
        | COUNT,
    ),
    "VectorStoreList": list_of("VectorStore"),
    "VectorStoreFile": obj(
        ["id", "object", "usage_bytes", "created_at", "vector_store_id", "status", "last_error"],
        id=STRING,
        object={"const": "vector_store.file"},
        usage_bytes=COUNT,
        created_at=INT,
        vector_store_id=STRING,
        status={"enum": list(v.FILE_STATUSES)},
        last_error=nullable(
            obj(["code", "message"], code={"enum": list(v.FILE_ERROR_CODES)}, message=STRING)
        ),
        chunking_strategy=nullable(
            obj(["type", "static"], type={"const": v.STATIC}, static=_STATIC_CHUNKING)
        ),
        attributes={"type": "object", "additionalProperties": ATTRIBUTE},
        vectors_pending={
            "description": "ragd extension: completed and searchable by text; its vectors are "
            "still to be written (its model's embedders did not answer when it was indexed)",
            "type": "boolean",
        },
        filename={"description": "ragd extension: the file's name", "type": "string"},
        chunk_count={
            "description": "ragd extension: the file's chunks (0 until it is completed)",
            "type": "integer",
            "minimum": 0,
        },
    ),
    "VectorStoreFileList": list_of("VectorStoreFile"),
    "VectorStoreFileContent": obj(
        ["object", "data", "has_more", "next_page"],
        object={"const": "vector_store.file_content.page"},
        data={"type": "array", "items": TEXT_PART},
        has_more=BOOL,
        next_page={"type": "null"},
    ),
    "FileBatch": obj(
        ["id", "object", "created_at", "vector_store_id", "status", "file_counts"],
        id=STRING,
        object={"const": "vector_store.files_batch"},
        created_at=INT,
        vector_store_id=STRING,
        status={"enum": list(v.BATCH_STATUSES)},
        file_counts=ref("FileCounts"),
    ),
    # Search
    "Filter": {
        "description": "OpenAI's attribute filters: a comparison, or and/or over filters",
        "oneOf": [
            obj(
                ["type", "key", "value"],
                type={"enum": list(v.FILTER_COMPARISONS)},
                key={"type": "string", "minLength": 1},
                value={
                    "oneOf": [
                        ATTRIBUTE,
                        {"type": "array", "minItems": 1, "items": ATTRIBUTE},
                    ]
                },
            ),
            obj(
                ["type", "filters"],
                type={"enum": list(v.FILTER_COMPOUNDS)},
                filters={"type": "array", "minItems": 1, "items": ref("Filter")},
            ),
        ],
    },
    "SearchResult": obj(
        ["file_id", "filename", "score", "attributes", "content"],
        file_id=STRING,
        filename=STRING,
        score={"type": "number", "minimum": 0, "maximum": 1},
        attributes={"type": "object", "additionalProperties": ATTRIBUTE},
        content={"type": "array", "items": TEXT_PART},
        ranks={
            "description": "ragd extension, hybrid mode: the result's 1-based rank among the "
            "vector and the lexical candidates (null: not found by that list)",
            "type": "object",
            "properties": {
                "vector": {"type": ["integer", "null"], "minimum": 1},
                "lexical": {"type": ["integer", "null"], "minimum": 1},
            },
            "required": ["vector", "lexical"],
        },
    ),
    "SearchPage": obj(
        ["object", "search_query", "data", "has_more", "next_page"],
        object={"const": "vector_store.search_results.page"},
        search_query={"type": "array", "items": STRING},
        data={"type": "array", "items": ref("SearchResult")},
        has_more=BOOL,
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
    "BackupResult": obj(
        ["path", "bytes", "seconds"],
        path={"type": "string", "description": "absolute, on the store's filesystem"},
        bytes=COUNT,
        seconds=NUMBER,
    ),
    "ApiKey": obj(
        ["object", "name", "scope", "vector_stores", "created_at", "usage"],
        object={"const": "api_key"},
        name=STRING,
        scope=STRING,
        project=STRING,
        vector_stores={"type": "array", "items": STRING},
        project_conversations=BOOL,
        requests_per_minute=nullable(COUNT),
        tokens_per_day=nullable(COUNT),
        created_at=COUNT,
        last_used_at=nullable(COUNT),
        revoked_at=nullable(COUNT),
        usage={"type": "object"},
        key={"type": "string", "description": "the secret: in the answer that made it only"},
        revoked=BOOL,
    ),
    "ApiKeyList": obj(
        ["object", "data", "has_more"],
        object={"const": "list"},
        data={"type": "array", "items": ref("ApiKey")},
        has_more=BOOL,
    ),
    "Project": obj(
        ["object", "id", "name", "created_at", "status"],
        object={"const": "organization.project"},
        id=STRING,
        name=STRING,
        created_at=COUNT,
        archived_at={"type": "null"},
        status={"const": "active"},
    ),
    "ProjectList": obj(
        ["object", "data", "has_more"],
        object={"const": "list"},
        data={"type": "array", "items": ref("Project")},
        has_more=BOOL,
    ),
    "RestoreResult": obj(
        ["path", "replaced_path", "schema_version", "restored_schema_version", "bytes"],
        path={"type": "string", "description": "the backup restored, on the store's disk"},
        replaced_path={
            "type": "string",
            "description": "the copy of the database the restore replaced",
        },
        schema_version=COUNT,
        restored_schema_version=COUNT,
        bytes=COUNT,
        seconds=NUMBER,
    ),
    "BackupList": obj(
        ["object", "data", "has_more"],
        object={"const": "list"},
        data={
            "type": "array",
            "items": obj(
                ["path", "bytes", "modified_at"], path=STRING, bytes=COUNT, modified_at=NUMBER
            ),
        },
        has_more=BOOL,
    ),
    "VacuumResult": obj(
        ["bytes_before", "bytes_after", "seconds", "compacted_vector_stores"],
        bytes_before=COUNT,
        bytes_after=COUNT,
        seconds=NUMBER,
        compacted_vector_stores=COUNT,
    ),
    "Stats": obj(
        ["object", "global", "embedding_cache", "vector_stores"],
        object={"const": "ragd.stats"},
        **{
            "global": obj(
                ["schema_version", "db_bytes", "vector_stores", "files", "chunks", "jobs"],
                schema_version=INT,
                db_bytes=COUNT,
                wal_bytes=COUNT,
                free_bytes=COUNT,
                vector_stores=COUNT,
                files=COUNT,
                file_bytes=COUNT,
                chunks=COUNT,
                vectors=COUNT,
                usage_bytes=COUNT,
                jobs=obj(["pending", "leased"], pending=COUNT, leased=COUNT),
                audit_entries=COUNT,
                disk=ref("Disk"),
            ),
            "embedding_cache": obj(
                ["enabled", "entries", "hits", "misses", "hit_rate"],
                enabled=BOOL,
                entries=COUNT,
                bytes=COUNT,
                max_entries=COUNT,
                hits=COUNT,
                misses=COUNT,
                hit_rate={"type": "number", "minimum": 0, "maximum": 1},
                stored=COUNT,
                evicted=COUNT,
            ),
            "vector_stores": {
                "type": "array",
                "items": obj(
                    ["id", "name", "embedding_model", "files", "chunks", "vectors"],
                    id=STRING,
                    name=STRING,
                    embedding_model=obj(["name", "dimensions"], name=STRING, dimensions=INT),
                    files=COUNT,
                    chunks=COUNT,
                    vectors=COUNT,
                    vector_slots=COUNT,
                    usage_bytes=COUNT,
                ),
            },
            "replica": nullable(
                obj(
                    ["url", "state", "lag_seconds"],
                    url=STRING,
                    state={"enum": ["current", "behind", "unknown"]},
                    replica_txid=nullable(COUNT),
                    local_txid=nullable(COUNT),
                    replica_at=nullable(NUMBER),
                    lag_seconds=nullable(NUMBER),
                    sync_interval_seconds=NUMBER,
                    error=nullable(STRING),
                )
            ),
        },
    ),
    "AuditEntry": obj(
        ["id", "at", "operation", "vector_store_id", "latency_ms", "result_count", "degraded"],
        id=INT,
        at=NUMBER,
        operation={"enum": list(v.AUDIT_OPERATIONS)},
        vector_store_id=nullable(STRING),
        k=COUNT,
        latency_ms=NUMBER,
        result_count=COUNT,
        degraded=BOOL,
        detail=STRING,
        key=nullable(STRING),
        project=nullable(STRING),
        embedded_tokens=COUNT,
        error_code=nullable(STRING),
    ),
    "AuditList": obj(
        ["object", "data", "has_more", "last_id"],
        object={"const": "list"},
        data={"type": "array", "items": ref("AuditEntry")},
        has_more=BOOL,
        last_id=nullable(INT),
    ),
}
