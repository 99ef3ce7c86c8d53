"""Store RPCs for operators: embedding cache, audit log, stats, backup, vacuum."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from services.common.grpc_server import Context
from services.pb import store_pb2 as pb
from services.store.records import EmbeddingModel
from services.store.replica import ReplicaSettings, ReplicaStatus
from services.store.wire.messages import (
    audit_entry_from_message,
    audit_entry_message,
    stats_message,
    status_message,
)
from services.store.wire.rpc_base import RpcBase

DEFAULT_AUDIT_LIMIT = 100
# Bytes per ReadBackup message: well under gRPC's message limit, few enough messages.
BACKUP_PIECE = 1 << 20

log = logging.getLogger(__name__)


def _replica_message(status: ReplicaStatus, settings: ReplicaSettings) -> pb.ReplicaStatus:
    return pb.ReplicaStatus(
        url=status.url,
        state=status.state,
        replica_txid=status.replica_txid,
        local_txid=status.local_txid,
        replica_at=status.replica_at,
        lag_seconds=status.lag_seconds,
        error=status.error,
        sync_interval=settings.sync_interval,
    )


class OperationsRpcs(RpcBase):
    async def GetCachedEmbeddings(
        self, request: pb.GetCachedEmbeddingsRequest, context: Context
    ) -> pb.GetCachedEmbeddingsResponse:
        found = await self._call(
            context,
            lambda: self._repository.get_cached_embeddings(
                request.model_key, request.dimensions, list(request.text_sha256)
            ),
        )
        return pb.GetCachedEmbeddingsResponse(
            found=[vector is not None for vector in found],
            vectors=b"".join(vector for vector in found if vector is not None),
        )

    async def PutCachedEmbeddings(
        self, request: pb.PutCachedEmbeddingsRequest, context: Context
    ) -> pb.PutCachedEmbeddingsResponse:
        stored, evicted = await self._call(
            context,
            lambda: self._repository.put_cached_embeddings(
                request.model_key, request.dimensions, list(request.text_sha256), request.vectors
            ),
        )
        return pb.PutCachedEmbeddingsResponse(stored=stored, evicted=evicted)

    async def RecordAudit(
        self, request: pb.RecordAuditRequest, context: Context
    ) -> pb.RecordAuditResponse:
        recorded = await self._call(
            context,
            lambda: self._repository.record_audit(
                [audit_entry_from_message(entry) for entry in request.entries]
            ),
        )
        return pb.RecordAuditResponse(recorded=recorded)

    async def ListAudit(
        self, request: pb.ListAuditRequest, context: Context
    ) -> pb.ListAuditResponse:
        page = await self._call(
            context,
            lambda: self._repository.list_audit(
                limit=request.limit or DEFAULT_AUDIT_LIMIT,
                operation=request.operation or None,
                vector_store_id=request.vector_store_id or None,
                before_id=request.before_id or None,
                key_name=request.key_name or None,
            ),
        )
        return pb.ListAuditResponse(
            entries=[audit_entry_message(entry) for entry in page.items], has_more=page.has_more
        )

    async def GetStats(self, request: pb.GetStatsRequest, context: Context) -> pb.StoreStats:
        reply = stats_message(await self._call(context, self._repository.stats))
        settings = self._repository.replica
        if settings is not None:
            # Lists the replica (a subprocess, a network call for S3): off the event loop.
            found = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._repository.replica_status
            )
            if found is not None:
                reply.replica.CopyFrom(_replica_message(found, settings))
        return reply

    async def GetStatus(self, request: pb.GetStatusRequest, context: Context) -> pb.StoreStatus:
        served = [EmbeddingModel(m.name, m.dimensions) for m in request.served]
        return status_message(await self._call(context, lambda: self._repository.status(served)))

    async def Backup(self, request: pb.BackupRequest, context: Context) -> pb.BackupResponse:
        result = await self._call(context, lambda: self._repository.backup(request.name))
        log.info(
            "backup written to %s (%d bytes, %.1f s)", result.path, result.bytes, result.seconds
        )
        return pb.BackupResponse(path=str(result.path), bytes=result.bytes, seconds=result.seconds)

    async def Restore(self, request: pb.RestoreRequest, context: Context) -> pb.RestoreResponse:
        if request.from_replica:
            result = await self._call(
                context, lambda: self._repository.restore_from_replica(request.timestamp)
            )
        else:
            result = await self._call(context, lambda: self._repository.restore(request.name))
        log.info(
            "restored %s (schema %d, now %d) in %.1f s; the database it replaced is kept as %s",
            result.path,
            result.restored_schema_version,
            result.schema_version,
            result.seconds,
            result.replaced,
        )
        return pb.RestoreResponse(
            path=str(result.path),
            replaced_path=str(result.replaced),
            schema_version=result.schema_version,
            restored_schema_version=result.restored_schema_version,
            bytes=result.bytes,
            seconds=result.seconds,
        )

    async def ListBackups(
        self, request: pb.ListBackupsRequest, context: Context
    ) -> pb.ListBackupsResponse:
        found = await self._call(context, self._repository.list_backups)
        return pb.ListBackupsResponse(
            backups=[
                pb.BackupInfo(name=info.name, bytes=info.bytes, modified_at=info.modified_at)
                for info in found
            ]
        )

    async def ReadBackup(
        self, request: pb.ReadBackupRequest, context: Context
    ) -> AsyncIterator[pb.BackupPiece]:
        path = await self._call(context, lambda: self._repository.backup_file(request.name))
        loop = asyncio.get_running_loop()
        with open(path, "rb") as source:
            while piece := await loop.run_in_executor(self._executor, source.read, BACKUP_PIECE):
                yield pb.BackupPiece(data=piece)

    async def Vacuum(self, request: pb.VacuumRequest, context: Context) -> pb.VacuumResponse:
        result = await self._call(context, self._repository.vacuum)
        log.info(
            "vacuum: %d -> %d bytes in %.1f s (%d vector tables compacted)",
            result.bytes_before,
            result.bytes_after,
            result.seconds,
            result.compacted,
        )
        return pb.VacuumResponse(
            bytes_before=result.bytes_before,
            bytes_after=result.bytes_after,
            seconds=result.seconds,
            compacted_vector_stores=result.compacted,
        )
