"""gRPC adapter for the store: messages to domain calls and back, errors to status codes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

import apsw
import grpc

from services.pb import store_pb2 as pb
from services.pb import store_pb2_grpc
from services.store import search
from services.store.errors import (
    BackupExists,
    BatchNotFound,
    CollectionFileNotFound,
    CollectionNotFound,
    DimensionMismatch,
    FileNotFound,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    MaintenanceRunning,
    ModelMismatch,
    StoreError,
)
from services.store.messages import (
    attributes_from_message,
    batch_message,
    chunks_from_message,
    collection_file_message,
    collection_message,
    decode_vectors,
    file_message,
    filter_from_message,
    hit_message,
    job_message,
    stored_chunk_message,
)
from services.store.operations_messages import (
    audit_entry_from_message,
    audit_entry_message,
    stats_message,
)
from services.store.records import BatchFileInput
from services.store.repository import DEFAULT_LIST_LIMIT, Repository

log = logging.getLogger(__name__)

T = TypeVar("T")

# A lease long enough for one file's parse, chunk and embed; workers renew it while working.
DEFAULT_LEASE_SECONDS = 60
BUSY_MESSAGE = "the store's database is busy with other writes; retry shortly"
DEFAULT_AUDIT_LIMIT = 100

_STATUS: list[tuple[type[StoreError], grpc.StatusCode]] = [
    (CollectionNotFound, grpc.StatusCode.NOT_FOUND),
    (FileNotFound, grpc.StatusCode.NOT_FOUND),
    (CollectionFileNotFound, grpc.StatusCode.NOT_FOUND),
    (BatchNotFound, grpc.StatusCode.NOT_FOUND),
    (JobNotFound, grpc.StatusCode.NOT_FOUND),
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (DimensionMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (ModelMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (LeaseLost, grpc.StatusCode.FAILED_PRECONDITION),
    (BackupExists, grpc.StatusCode.ALREADY_EXISTS),
    (MaintenanceRunning, grpc.StatusCode.ABORTED),
]


def status_for(error: StoreError) -> grpc.StatusCode:
    for error_type, code in _STATUS:
        if isinstance(error, error_type):
            return code
    return grpc.StatusCode.INTERNAL


def _list_args(limit: int, order: str) -> tuple[int, str]:
    return limit or DEFAULT_LIST_LIMIT, order or "desc"


class StoreServicer(store_pb2_grpc.StoreServicer):
    """Runs each blocking database call on the executor's threads."""

    def __init__(self, repository: Repository, executor: Executor) -> None:
        self._repository = repository
        self._executor = executor

    async def _call(self, context: grpc.aio.ServicerContext, work: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, work)
        except StoreError as error:
            await context.abort(status_for(error), str(error))
        except apsw.BusyError:
            # Another writer held the database past the busy timeout: a retry may well succeed.
            log.warning("database busy: %s", BUSY_MESSAGE)
            await context.abort(grpc.StatusCode.UNAVAILABLE, BUSY_MESSAGE)
        except Exception:
            log.exception("store request failed")
            await context.abort(
                grpc.StatusCode.INTERNAL, "internal error in the store; see the store's log"
            )
        raise AssertionError("unreachable: context.abort raises")

    # Collections

    async def CreateCollection(
        self, request: pb.CreateCollectionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Collection:
        collection = await self._call(
            context,
            lambda: self._repository.create_collection(
                name=request.name,
                model=request.model,
                dimensions=request.dimensions,
                metadata=dict(request.metadata),
                expires_anchor=request.expires_anchor,
                expires_days=request.expires_days,
            ),
        )
        return collection_message(collection)

    async def GetCollection(
        self, request: pb.GetCollectionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Collection:
        collection = await self._call(context, lambda: self._repository.get_collection(request.id))
        return collection_message(collection)

    async def UpdateCollection(
        self, request: pb.UpdateCollectionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Collection:
        collection = await self._call(
            context,
            lambda: self._repository.update_collection(
                request.id,
                name=request.name if request.has_name else None,
                metadata=dict(request.metadata) if request.has_metadata else None,
                expires=(
                    (request.expires_anchor, request.expires_days) if request.has_expires else None
                ),
            ),
        )
        return collection_message(collection)

    async def ListCollections(
        self, request: pb.ListCollectionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCollectionsResponse:
        limit, order = _list_args(request.limit, request.order)
        page = await self._call(
            context,
            lambda: self._repository.list_collections(
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
            ),
        )
        return pb.ListCollectionsResponse(
            collections=[collection_message(item) for item in page.items],
            has_more=page.has_more,
        )

    async def DeleteCollection(
        self, request: pb.DeleteCollectionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCollectionResponse:
        await self._call(context, lambda: self._repository.delete_collection(request.id))
        return pb.DeleteCollectionResponse(id=request.id, deleted=True)

    async def AddChunks(
        self, request: pb.AddChunksRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddChunksResponse:
        def work() -> pb.AddChunksResponse:
            chunks = chunks_from_message(list(request.chunks))
            vectors = decode_vectors(request.vectors, request.dimensions, len(chunks))
            result = self._repository.add_chunks(
                collection_id=request.collection_id,
                file_id=request.file_id,
                filename=request.filename,
                attributes=attributes_from_message(request.attributes),
                chunks=chunks,
                vectors=vectors,
                model=request.model,
            )
            return pb.AddChunksResponse(
                file_id=result.file_id,
                chunk_count=result.chunk_count,
                usage_bytes=result.usage_bytes,
            )

        return await self._call(context, work)

    async def Search(
        self, request: pb.SearchRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchResponse:
        def work() -> pb.SearchResponse:
            mode = request.mode or search.VECTOR
            query = None
            if mode in (search.VECTOR, search.HYBRID):
                query = decode_vectors(request.query_vector, request.dimensions, 1)[0]
            hits = self._repository.search(
                collection_id=request.collection_id,
                query=query,
                k=request.k,
                score_threshold=request.score_threshold,
                model=request.model,
                filter=filter_from_message(request.filter) if request.HasField("filter") else None,
                mode=mode,
                query_text=request.query_text,
                exact=request.exact,
            )
            return pb.SearchResponse(hits=[hit_message(hit) for hit in hits], mode=mode)

        return await self._call(context, work)

    # Files

    async def CreateFile(
        self, request: pb.CreateFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.File:
        file = await self._call(
            context,
            lambda: self._repository.create_file(
                request.filename, request.purpose, request.content
            ),
        )
        return file_message(file)

    async def GetFile(
        self, request: pb.GetFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.File:
        return file_message(
            await self._call(context, lambda: self._repository.get_file(request.id))
        )

    async def ListFiles(
        self, request: pb.ListFilesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListFilesResponse:
        limit, order = _list_args(request.limit, request.order)
        page = await self._call(
            context,
            lambda: self._repository.list_files(
                limit=limit,
                order=order,
                after=request.after or None,
                purpose=request.purpose or None,
            ),
        )
        return pb.ListFilesResponse(
            files=[file_message(item) for item in page.items], has_more=page.has_more
        )

    async def GetFileContent(
        self, request: pb.GetFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.FileContent:
        file, content = await self._call(
            context, lambda: self._repository.get_file_content(request.id)
        )
        return pb.FileContent(file=file_message(file), content=content)

    async def DeleteFile(
        self, request: pb.GetFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteFileResponse:
        await self._call(context, lambda: self._repository.delete_file(request.id))
        return pb.DeleteFileResponse(id=request.id, deleted=True)

    # Files in collections

    async def AttachFile(
        self, request: pb.AttachFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.CollectionFile:
        record = await self._call(
            context,
            lambda: self._repository.attach_file(
                request.collection_id,
                request.file_id,
                attributes_from_message(request.attributes),
                request.chunking_json,
                model=request.model,
                dimensions=request.dimensions,
            ),
        )
        return collection_file_message(record)

    async def GetCollectionFile(
        self, request: pb.CollectionFileRef, context: grpc.aio.ServicerContext
    ) -> pb.CollectionFile:
        record = await self._call(
            context,
            lambda: self._repository.get_collection_file(request.collection_id, request.file_id),
        )
        return collection_file_message(record)

    async def ListCollectionFiles(
        self, request: pb.ListCollectionFilesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCollectionFilesResponse:
        limit, order = _list_args(request.limit, request.order)
        page = await self._call(
            context,
            lambda: self._repository.list_collection_files(
                request.collection_id,
                limit=limit,
                order=order,
                after=request.after or None,
                before=request.before or None,
                status=request.status or None,
                batch_id=request.batch_id or None,
            ),
        )
        return pb.ListCollectionFilesResponse(
            files=[collection_file_message(item) for item in page.items], has_more=page.has_more
        )

    async def FindCollectionFile(
        self, request: pb.FindCollectionFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCollectionFileResponse:
        record = await self._call(
            context,
            lambda: self._repository.find_collection_file(request.collection_id, request.sha256),
        )
        if record is None:
            return pb.FindCollectionFileResponse(found=False)
        return pb.FindCollectionFileResponse(found=True, file=collection_file_message(record))

    async def UpdateCollectionFile(
        self, request: pb.UpdateCollectionFileRequest, context: grpc.aio.ServicerContext
    ) -> pb.CollectionFile:
        record = await self._call(
            context,
            lambda: self._repository.update_collection_file(
                request.collection_id,
                request.file_id,
                attributes_from_message(request.attributes),
            ),
        )
        return collection_file_message(record)

    async def DetachFile(
        self, request: pb.CollectionFileRef, context: grpc.aio.ServicerContext
    ) -> pb.DetachFileResponse:
        await self._call(
            context, lambda: self._repository.detach_file(request.collection_id, request.file_id)
        )
        return pb.DetachFileResponse(file_id=request.file_id, deleted=True)

    async def GetCollectionFileChunks(
        self, request: pb.CollectionFileRef, context: grpc.aio.ServicerContext
    ) -> pb.CollectionFileChunks:
        record, chunks = await self._call(
            context,
            lambda: self._repository.get_collection_file_chunks(
                request.collection_id, request.file_id
            ),
        )
        return pb.CollectionFileChunks(
            file=collection_file_message(record),
            chunks=[stored_chunk_message(chunk) for chunk in chunks],
        )

    # Batches

    async def CreateFileBatch(
        self, request: pb.CreateFileBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FileBatch:
        def work() -> pb.FileBatch:
            batch_files = [
                BatchFileInput(
                    file_id=item.file_id,
                    attributes=attributes_from_message(item.attributes),
                    chunking_json=item.chunking_json,
                )
                for item in request.files
            ]
            batch = self._repository.create_file_batch(
                request.collection_id,
                batch_files,
                model=request.model,
                dimensions=request.dimensions,
            )
            return batch_message(batch)

        return await self._call(context, work)

    async def GetFileBatch(
        self, request: pb.FileBatchRef, context: grpc.aio.ServicerContext
    ) -> pb.FileBatch:
        batch = await self._call(
            context,
            lambda: self._repository.get_file_batch(request.collection_id, request.batch_id),
        )
        return batch_message(batch)

    async def CancelFileBatch(
        self, request: pb.FileBatchRef, context: grpc.aio.ServicerContext
    ) -> pb.FileBatch:
        batch = await self._call(
            context,
            lambda: self._repository.cancel_file_batch(request.collection_id, request.batch_id),
        )
        return batch_message(batch)

    # Ingest jobs

    async def ClaimJobs(
        self, request: pb.ClaimJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClaimJobsResponse:
        claimed = await self._call(
            context,
            lambda: self._repository.claim_jobs(
                request.worker_id,
                max_jobs=request.max_jobs or 1,
                lease_seconds=request.lease_seconds or DEFAULT_LEASE_SECONDS,
            ),
        )
        return pb.ClaimJobsResponse(jobs=[job_message(job) for job in claimed])

    async def RenewJob(
        self, request: pb.JobRef, context: grpc.aio.ServicerContext
    ) -> pb.RenewJobResponse:
        expires = await self._call(
            context,
            lambda: self._repository.renew_job(
                request.job_id,
                request.worker_id,
                lease_seconds=request.lease_seconds or DEFAULT_LEASE_SECONDS,
            ),
        )
        return pb.RenewJobResponse(lease_expires_at=expires)

    async def CompleteJob(
        self, request: pb.CompleteJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.CollectionFile:
        def work() -> pb.CollectionFile:
            chunks = chunks_from_message(list(request.chunks))
            vectors = decode_vectors(request.vectors, request.dimensions, len(chunks))
            record = self._repository.complete_job(
                request.job_id, request.worker_id, chunks, vectors, request.model
            )
            return collection_file_message(record)

        return await self._call(context, work)

    async def FailJob(
        self, request: pb.FailJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.CollectionFile:
        record = await self._call(
            context,
            lambda: self._repository.fail_job(
                request.job_id,
                request.worker_id,
                code=request.error.code,
                message=request.error.message,
                retry_after_seconds=request.retry_after_seconds,
            ),
        )
        return collection_file_message(record)

    # Operations

    async def GetCachedEmbeddings(
        self, request: pb.GetCachedEmbeddingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCachedEmbeddingsResponse:
        found = await self._call(
            context,
            lambda: self._repository.ops.get_cached_embeddings(
                request.model_key, request.dimensions, list(request.text_sha256)
            ),
        )
        return pb.GetCachedEmbeddingsResponse(
            found=[vector is not None for vector in found],
            vectors=b"".join(vector for vector in found if vector is not None),
        )

    async def PutCachedEmbeddings(
        self, request: pb.PutCachedEmbeddingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutCachedEmbeddingsResponse:
        stored, evicted = await self._call(
            context,
            lambda: self._repository.ops.put_cached_embeddings(
                request.model_key, request.dimensions, list(request.text_sha256), request.vectors
            ),
        )
        return pb.PutCachedEmbeddingsResponse(stored=stored, evicted=evicted)

    async def RecordAudit(
        self, request: pb.RecordAuditRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecordAuditResponse:
        recorded = await self._call(
            context,
            lambda: self._repository.ops.record_audit(
                [audit_entry_from_message(entry) for entry in request.entries]
            ),
        )
        return pb.RecordAuditResponse(recorded=recorded)

    async def ListAudit(
        self, request: pb.ListAuditRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAuditResponse:
        page = await self._call(
            context,
            lambda: self._repository.ops.list_audit(
                limit=request.limit or DEFAULT_AUDIT_LIMIT,
                operation=request.operation or None,
                collection_id=request.collection_id or None,
                before_id=request.before_id or None,
            ),
        )
        return pb.ListAuditResponse(
            entries=[audit_entry_message(entry) for entry in page.items], has_more=page.has_more
        )

    async def GetStats(
        self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.StoreStats:
        return stats_message(await self._call(context, self._repository.ops.stats))

    async def Backup(
        self, request: pb.BackupRequest, context: grpc.aio.ServicerContext
    ) -> pb.BackupResponse:
        result = await self._call(context, lambda: self._repository.ops.backup(request.name))
        log.info(
            "backup written to %s (%d bytes, %.1f s)", result.path, result.bytes, result.seconds
        )
        return pb.BackupResponse(path=str(result.path), bytes=result.bytes, seconds=result.seconds)

    async def Vacuum(
        self, request: pb.VacuumRequest, context: grpc.aio.ServicerContext
    ) -> pb.VacuumResponse:
        result = await self._call(context, self._repository.ops.vacuum)
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
            compacted_collections=result.compacted,
        )
