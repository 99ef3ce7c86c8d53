"""Store RPCs of the ingest job queue: claim, renew, complete, fail."""

from __future__ import annotations

from services.common.grpc_server import Context
from services.pb import store_pb2 as pb
from services.store.records import EmbeddingModel
from services.store.wire.messages import (
    chunks_from_message,
    decode_vectors,
    job_message,
    vector_store_file_message,
)
from services.store.wire.rpc_base import RpcBase

# A lease long enough for one file's parse, chunk and embed; workers renew it while working.
DEFAULT_LEASE_SECONDS = 60


class JobRpcs(RpcBase):
    async def ClaimJobs(
        self, request: pb.ClaimJobsRequest, context: Context
    ) -> pb.ClaimJobsResponse:
        claimed = await self._call(
            context,
            lambda: self._repository.claim_jobs(
                request.worker_id,
                max_jobs=request.max_jobs or 1,
                lease_seconds=request.lease_seconds or DEFAULT_LEASE_SECONDS,
                models=[EmbeddingModel(m.name, m.dimensions) for m in request.models],
                waiting=list(request.waiting_models),
                lexical=request.lexical,
            ),
        )
        return pb.ClaimJobsResponse(jobs=[job_message(job) for job in claimed])

    async def RenewJob(self, request: pb.JobRef, context: Context) -> pb.RenewJobResponse:
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
        self, request: pb.CompleteJobRequest, context: Context
    ) -> pb.VectorStoreFile:
        def work() -> pb.VectorStoreFile:
            chunks = chunks_from_message(list(request.chunks))
            counts = list(request.window_counts)
            rows = sum(counts) if counts else len(chunks)
            vectors = (
                None
                if request.lexical
                else decode_vectors(request.vectors, request.dimensions, rows)
            )
            record = self._repository.complete_job(
                request.job_id, request.worker_id, chunks, vectors, request.model, counts
            )
            return vector_store_file_message(record)

        return await self._call(context, work)

    async def FailJob(self, request: pb.FailJobRequest, context: Context) -> pb.VectorStoreFile:
        record = await self._call(
            context,
            lambda: self._repository.fail_job(
                request.job_id,
                request.worker_id,
                code=request.error.code,
                message=request.error.message,
                retry_after_seconds=request.retry_after_seconds,
                keep_attempt=request.keep_attempt,
            ),
        )
        return vector_store_file_message(record)
