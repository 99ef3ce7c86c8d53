"""Operator routes: backup, restore, vacuum, stats, audit log; behind the API keys like /v1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from services.common.vocabulary import AUDIT_OPERATIONS
from services.gateway.clients import from_grpc
from services.gateway.errors import invalid
from services.gateway.operations import operation, query_param
from services.gateway.params import json_body, optional_str, query_int
from services.gateway.routes import services
from services.gateway.routes.health import disk
from services.pb import store_pb2

# Backups and vacuums take as long as the database is large: not the usual store deadline.
MAINTENANCE_TIMEOUT = 3600.0


@operation(
    "Online backup of the store's database",
    "BackupResult",
    "BackupRequest",
    body_required=False,
)
async def backup(request: Request) -> JSONResponse:
    """{"path": optional name inside the store's backup directory} -> where it was written."""
    body = await json_body(request, required=False)
    name = optional_str(body, "path", "") or ""
    reply = await services(request).store.Backup(
        store_pb2.BackupRequest(name=name), timeout=MAINTENANCE_TIMEOUT
    )
    return JSONResponse(
        {"path": reply.path, "bytes": reply.bytes, "seconds": round(reply.seconds, 3)}
    )


@operation(
    "Replace the database with a backup (checked first; the replaced one is kept)",
    "RestoreResult",
    "RestoreRequest",
)
async def restore(request: Request) -> JSONResponse:
    """{"path": a backup's name in the store's backup directory} or {"from_replica": true,
    "timestamp": optional RFC 3339 time} -> the restore's figures."""
    body = await json_body(request)
    name = optional_str(body, "path", "") or ""
    from_replica = body.get("from_replica", False)
    if not isinstance(from_replica, bool):
        raise invalid("'from_replica' must be true or false", param="from_replica")
    timestamp = optional_str(body, "timestamp", "") or ""
    if from_replica == bool(name):
        raise invalid(
            "name a backup in 'path' (GET /admin/backups lists them) or set 'from_replica'",
            param="path",
        )
    if timestamp and not from_replica:
        raise invalid("'timestamp' applies to a restore from the replica", param="timestamp")
    reply = await services(request).store.Restore(
        store_pb2.RestoreRequest(name=name, from_replica=from_replica, timestamp=timestamp),
        timeout=MAINTENANCE_TIMEOUT,
    )
    return JSONResponse(
        {
            "path": reply.path,
            "replaced_path": reply.replaced_path,
            "schema_version": reply.schema_version,
            "restored_schema_version": reply.restored_schema_version,
            "bytes": reply.bytes,
            "seconds": round(reply.seconds, 3),
        }
    )


@operation("The backups in the store's backup directory", "BackupList")
async def list_backups(request: Request) -> JSONResponse:
    reply = await services(request).store.ListBackups(store_pb2.ListBackupsRequest())
    data = [
        {"path": info.name, "bytes": info.bytes, "modified_at": round(info.modified_at, 3)}
        for info in reply.backups
    ]
    return JSONResponse({"object": "list", "data": data, "has_more": False})


@operation(
    "Download a backup's file",
    query=[query_param("path", {"type": "string"}, "the backup's name, as listed")],
    media="application/octet-stream",
)
async def download_backup(request: Request) -> StreamingResponse:
    """A backup's bytes, streamed from the store: for a store in a container or on another
    machine. Errors (no such backup) are known before the first byte, from the first piece."""
    deps = services(request)
    name = request.query_params.get("path", "")
    if not name:
        raise invalid("the query parameter 'path' must name a backup", param="path")
    call = deps.store.ReadBackup(
        store_pb2.ReadBackupRequest(name=name), timeout=MAINTENANCE_TIMEOUT
    )
    pieces = aiter(call)
    try:
        first = await anext(pieces, None)
    except grpc.aio.AioRpcError as error:
        raise from_grpc(error, "store") from None

    async def body() -> AsyncIterator[bytes]:
        if first is not None:
            yield first.data
        async for piece in pieces:
            yield piece.data

    filename = name.rsplit("/", 1)[-1]
    return StreamingResponse(
        body(),
        media_type="application/vnd.sqlite3",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@operation("Reclaim the space of deleted data", "VacuumResult")
async def vacuum(request: Request) -> JSONResponse:
    # Takes no parameters, but a body that is not JSON is a client's mistake, not a no-op.
    await json_body(request, required=False)
    reply = await services(request).store.Vacuum(
        store_pb2.VacuumRequest(), timeout=MAINTENANCE_TIMEOUT
    )
    return JSONResponse(
        {
            "bytes_before": reply.bytes_before,
            "bytes_after": reply.bytes_after,
            "seconds": round(reply.seconds, 3),
            "compacted_vector_stores": reply.compacted_vector_stores,
        }
    )


@operation("Global and per vector store statistics", "Stats")
async def stats(request: Request) -> JSONResponse:
    deps = services(request)
    reply: store_pb2.StoreStats = await deps.store.GetStats(store_pb2.GetStatsRequest())
    cache = reply.cache
    return JSONResponse(
        {
            "object": "ragd.stats",
            "global": {
                "schema_version": reply.schema_version,
                "db_bytes": reply.db_bytes,
                "wal_bytes": reply.wal_bytes,
                "free_bytes": reply.free_bytes,
                "vector_stores": reply.vector_stores,
                "files": reply.files,
                "file_bytes": reply.file_bytes,
                "chunks": reply.chunks,
                "vectors": reply.vectors,
                "usage_bytes": reply.usage_bytes,
                "jobs": {"pending": reply.jobs_pending, "leased": reply.jobs_leased},
                "audit_entries": reply.audit_entries,
                "disk": disk(reply.status),
            },
            "embedding_cache": {
                # This gateway's setting (RAGD_EMBED_CACHE); the rest is the store's.
                "enabled": deps.config.embed_cache,
                "entries": cache.entries,
                "bytes": cache.bytes,
                "max_entries": cache.max_entries,
                "hits": cache.hits,
                "misses": cache.misses,
                "hit_rate": round(cache.hit_rate, 4),
                "stored": cache.stored,
                "evicted": cache.evicted,
            },
            "vector_stores": [
                {
                    "id": item.id,
                    "name": item.name,
                    "embedding_model": {"name": item.model, "dimensions": item.dimensions},
                    "files": item.files,
                    "chunks": item.chunks,
                    "vectors": item.vectors,
                    "vector_slots": item.vector_slots,
                    "usage_bytes": item.usage_bytes,
                }
                for item in reply.per_vector_store
            ],
            "replica": _replica(reply.replica) if reply.HasField("replica") else None,
        }
    )


def _replica(found: store_pb2.ReplicaStatus) -> dict[str, object]:
    """Litestream's replica against the database; figures it could not read are null."""
    known = found.state != "unknown"
    return {
        "url": found.url,
        "state": found.state,
        "replica_txid": found.replica_txid or None,
        "local_txid": found.local_txid or None,
        "replica_at": round(found.replica_at, 3) or None,
        "lag_seconds": round(found.lag_seconds, 3) if known and found.lag_seconds >= 0 else None,
        "sync_interval_seconds": found.sync_interval,
        "error": found.error or None,
    }


@operation(
    "Audit log of requests and ingests, newest first",
    "AuditList",
    query=[
        query_param("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
        query_param("operation", {"enum": list(AUDIT_OPERATIONS)}),
        query_param("store", {"type": "string"}, "a vector store id"),
        query_param("before", {"type": "integer", "minimum": 0}, "an entry id"),
        query_param("key", {"type": "string"}, "an API key's name"),
    ],
)
async def audit(request: Request) -> JSONResponse:
    """Newest first; `before` (an entry id) pages on to older entries."""
    operation = request.query_params.get("operation", "")
    if operation and operation not in AUDIT_OPERATIONS:
        raise invalid(
            f"'operation' must be one of {', '.join(AUDIT_OPERATIONS)}", param="operation"
        )
    reply = await services(request).store.ListAudit(
        store_pb2.ListAuditRequest(
            limit=query_int(request, "limit", 100, 1, 1000),
            operation=operation,
            vector_store_id=request.query_params.get("store", ""),
            before_id=query_int(request, "before", 0, 0, 2**62),
            key_name=request.query_params.get("key", ""),
        ),
    )
    data = [
        {
            "id": entry.id,
            "at": entry.at,
            "operation": entry.operation,
            "vector_store_id": entry.vector_store_id or None,
            "k": entry.k,
            "latency_ms": round(entry.latency_ms, 3),
            "result_count": entry.result_count,
            "degraded": entry.degraded,
            "detail": entry.detail,
            "key": entry.key_name or None,
            "project": entry.project or None,
            "embedded_tokens": entry.embedded_tokens,
            "error_code": entry.error_code or None,
        }
        for entry in reply.entries
    ]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "has_more": reply.has_more,
            "last_id": data[-1]["id"] if data else None,
        }
    )
