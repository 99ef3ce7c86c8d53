"""Operator routes: backup, restore, vacuum, stats, audit log; behind the API keys like /v1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from services.common.vocabulary import AUDIT_OPERATIONS
from services.gateway import objects_admin
from services.gateway.admin_bodies import BackupRequest, RestoreRequest
from services.gateway.clients import from_grpc
from services.gateway.errors import invalid
from services.gateway.operations import operation, query_param
from services.gateway.params import json_body, query_int
from services.gateway.requests import parse
from services.gateway.routes import services
from services.pb import store_pb2

# Backups and vacuums take as long as the database is large: not the usual store deadline.
MAINTENANCE_TIMEOUT = 3600.0


@operation(
    "Online backup of the store's database",
    "BackupResult",
    BackupRequest,
    body_required=False,
)
async def backup(request: Request) -> JSONResponse:
    """{"path": optional name inside the store's backup directory} -> where it was written."""
    asked = parse(BackupRequest, await json_body(request, required=False))
    reply = await services(request).store.Backup(
        store_pb2.BackupRequest(name=asked.path), timeout=MAINTENANCE_TIMEOUT
    )
    return JSONResponse(objects_admin.backup(reply))


@operation(
    "Replace the database with a backup (checked first; the replaced one is kept)",
    "RestoreResult",
    RestoreRequest,
)
async def restore(request: Request) -> JSONResponse:
    """{"path": a backup's name in the store's backup directory} or {"from_replica": true,
    "timestamp": optional RFC 3339 time} -> the restore's figures."""
    asked = parse(RestoreRequest, await json_body(request))
    reply = await services(request).store.Restore(
        store_pb2.RestoreRequest(
            name=asked.path, from_replica=asked.from_replica, timestamp=asked.timestamp
        ),
        timeout=MAINTENANCE_TIMEOUT,
    )
    return JSONResponse(objects_admin.restore(reply))


@operation("The backups in the store's backup directory", "BackupList")
async def list_backups(request: Request) -> JSONResponse:
    reply = await services(request).store.ListBackups(store_pb2.ListBackupsRequest())
    data = [objects_admin.backup_file(info) for info in reply.backups]
    return JSONResponse(objects_admin.unpaged(data))


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
    return JSONResponse(objects_admin.vacuum(reply))


@operation("Global and per vector store statistics", "Stats")
async def stats(request: Request) -> JSONResponse:
    deps = services(request)
    reply: store_pb2.StoreStats = await deps.store.GetStats(store_pb2.GetStatsRequest())
    return JSONResponse(objects_admin.stats(reply, deps.config.embed_cache))


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
    wanted = request.query_params.get("operation", "")
    if wanted and wanted not in AUDIT_OPERATIONS:
        raise invalid(
            f"'operation' must be one of {', '.join(AUDIT_OPERATIONS)}", param="operation"
        )
    reply = await services(request).store.ListAudit(
        store_pb2.ListAuditRequest(
            limit=query_int(request, "limit", 100, 1, 1000),
            operation=wanted,
            vector_store_id=request.query_params.get("store", ""),
            before_id=query_int(request, "before", 0, 0, 2**62),
            key_name=request.query_params.get("key", ""),
        ),
    )
    return JSONResponse(objects_admin.audit_page(list(reply.entries), reply.has_more))
