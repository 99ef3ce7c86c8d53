"""Ingest workers: claim jobs from the store under a lease, parse, chunk, embed, complete.

Durability lives in the store: a job is recorded with its file, and a file becomes `completed`
only in the transaction that writes its chunks and vectors (CompleteJob). A worker that dies
simply stops renewing its lease and another worker (in this or another gateway) reclaims the
job when it expires; a lost lease makes CompleteJob fail, so no file is indexed twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.common.vectors import to_bytes
from services.gateway import errors, ingest, metrics
from services.gateway.audit import AuditLog
from services.gateway.clients import Store
from services.gateway.embed_cache import EmbeddingCache
from services.gateway.embedders import Embedders
from services.gateway.keys import Usage
from services.gateway.models import store_model
from services.gateway.parsing import InvalidFile, UnsupportedFile, extract_text
from services.pb import store_pb2

log = logging.getLogger(__name__)

# The outcomes the audit log words for people, as metric labels.
_OUTCOMES = {
    "completed lexically (vectors pending)": "completed_lexically",
    "waiting for disk space": "waiting_for_disk",
}

# Told about every file whose job this process completed or failed (its new row).
Listener = Callable[[store_pb2.VectorStoreFile], None]


@dataclass(frozen=True)
class WorkerSettings:
    workers: int = 2
    lease_seconds: int = 60
    poll_seconds: float = 1.0
    batch_size: int = 32
    # A job refused for a full disk waits this long (and keeps its attempt).
    full_disk_retry_seconds: int = 30


class Permanent(Exception):
    """The file itself is the problem: fail it with this code, do not retry."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def backoff_seconds(attempt: int) -> int:
    return min(60, 1 << min(6, max(0, attempt - 1)))


class IngestWorkers:
    def __init__(
        self,
        embedders: Embedders,
        store: Store,
        settings: WorkerSettings,
        cache: EmbeddingCache | None = None,
        audit: AuditLog | None = None,
        usage: Usage | None = None,
    ) -> None:
        """`usage`: where the tokens embedded for a job attached with an API key are counted
        (against that key's daily limit too)."""
        self._embedders = embedders
        self._store = store
        self._settings = settings
        self._cache = cache
        self._audit = audit
        self._usage = usage
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._prefix = f"{socket.gethostname()}:{os.getpid()}"
        self._listeners: list[Listener] = []

    def start(self) -> None:
        for number in range(self._settings.workers):
            task = asyncio.create_task(self._run(f"{self._prefix}:{number}"))
            self._tasks.append(task)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Calls `listener` after each job this process finishes; returns the unsubscriber."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _notify(self, item: store_pb2.VectorStoreFile) -> None:
        for listener in list(self._listeners):
            try:
                listener(item)
            except Exception:
                log.exception("ingest listener failed")

    def wake(self) -> None:
        """New work was attached through this gateway: look now instead of at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        # Jobs in flight keep their leases and are reclaimed after they expire: stopping never
        # writes a half-finished file.
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _run(self, worker_id: str) -> None:
        while True:
            try:
                # The store fails jobs of vector stores of a model no embedder here serves
                # instead of handing them out. Files of a served model whose embedders do not
                # answer (all of them when none does) are indexed lexically meanwhile, and
                # their jobs wait to fill the vectors in.
                served, silent = await self._embedders.availability(timeout=2.0)
                reply = await self._store.ClaimJobs(
                    store_pb2.ClaimJobsRequest(
                        worker_id=worker_id,
                        max_jobs=1,
                        lease_seconds=self._settings.lease_seconds,
                        models=[store_model(info) for info in served],
                        waiting_models=silent,
                        lexical=True,
                    )
                )
            except errors.ApiError as error:
                log.warning("cannot claim ingest jobs: %s", error.message)
                await asyncio.sleep(self._settings.poll_seconds)
                continue
            if not reply.jobs:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._settings.poll_seconds)
                continue
            for job in reply.jobs:
                await self._process(worker_id, job)

    async def _process(self, worker_id: str, job: store_pb2.Job) -> None:
        started, outcome, chunks, tokens = time.monotonic(), "failed", 0, 0
        renewer = asyncio.create_task(self._renew(worker_id, job.job_id))
        try:
            request = await self._index(worker_id, job)
            done = await self._store.CompleteJob(request)
            outcome, chunks = "completed", len(request.chunks)
            if request.lexical:
                outcome = "completed lexically (vectors pending)"
            else:
                tokens = sum(chunk.token_count for chunk in request.chunks)
                if job.key_name and self._usage is not None:
                    self._usage.add(job.key_name, tokens=tokens)
            self._notify(done)
            log.info(
                "indexed %s into %s (%d chunks%s)",
                job.file_id,
                job.vector_store_id,
                len(request.chunks),
                ", text only: vectors pending" if request.lexical else "",
            )
        except Permanent as error:
            await self._fail(worker_id, job, error.code, str(error), retry_after=0)
        except errors.ApiError as error:
            if isinstance(error, errors.StorageFull):
                # Not the file's fault, and not over in seconds: wait long, count nothing.
                outcome = "waiting for disk space"
                retry = self._settings.full_disk_retry_seconds
                await self._fail(
                    worker_id, job, "server_error", error.message, retry, keep_attempt=True
                )
            elif errors.is_transient(error):
                outcome = "retrying"
                await self._fail(
                    worker_id,
                    job,
                    "server_error",
                    error.message,
                    retry_after=backoff_seconds(job.attempt),
                )
            elif isinstance(error, errors.NotFound | errors.Conflict | errors.Refused):
                # Detached, cancelled or reclaimed meanwhile: nothing to record.
                outcome = "dropped"
                log.info("dropped job %d for %s: %s", job.job_id, job.file_id, error.message)
            else:
                await self._fail(worker_id, job, "server_error", error.message, retry_after=0)
        except Exception:
            log.exception("ingest of %s failed", job.file_id)
            outcome = "retrying"
            await self._fail(
                worker_id,
                job,
                "server_error",
                "internal error while indexing",
                retry_after=backoff_seconds(job.attempt),
            )
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            metrics.ingested(_OUTCOMES.get(outcome, outcome), time.monotonic() - started, chunks)
            if self._audit is not None:
                self._audit.record(
                    "ingest",
                    job.vector_store_id,
                    latency_ms=(time.monotonic() - started) * 1000,
                    result_count=chunks,
                    detail=f"{job.file_id} {outcome} (attempt {job.attempt})",
                    key_name=job.key_name,
                    embedded_tokens=tokens,
                )

    async def _index(self, worker_id: str, job: store_pb2.Job) -> store_pb2.CompleteJobRequest:
        try:
            text = extract_text(job.filename, job.content)
        except UnsupportedFile as error:
            raise Permanent("unsupported_file", str(error)) from None
        except InvalidFile as error:
            raise Permanent("invalid_file", str(error)) from None
        strategy = ingest.ChunkingStrategy.from_message(job.chunking)
        if job.lexical:
            chunks = await asyncio.to_thread(ingest.chunk_lexically, text, strategy)
            return store_pb2.CompleteJobRequest(
                job_id=job.job_id,
                worker_id=worker_id,
                chunks=[store_pb2.ChunkInput(text=c.text, token_count=c.tokens) for c in chunks],
                lexical=True,
            )
        found = await self._embedders.find(job.model)
        if found is None:
            raise errors.Unavailable(f"no embedder here serves {job.model} now; retrying")
        embedder, info = found
        chunks = await ingest.chunk(embedder, text, strategy)
        windows = await ingest.windows(embedder, chunks)
        vectors = await ingest.embed_chunks(
            embedder, [w for each in windows for w in each], self._settings.batch_size, self._cache
        )
        counts = [len(each) for each in windows]
        return store_pb2.CompleteJobRequest(
            job_id=job.job_id,
            worker_id=worker_id,
            chunks=[store_pb2.ChunkInput(text=c.text, token_count=c.tokens) for c in chunks],
            vectors=to_bytes(vectors),
            dimensions=info.dimensions,
            model=info.name,
            # Empty when every chunk fits the model: one vector each, as always.
            window_counts=counts if any(count > 1 for count in counts) else [],
        )

    async def _renew(self, worker_id: str, job_id: int) -> None:
        interval = max(1.0, self._settings.lease_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await self._store.RenewJob(
                    store_pb2.JobRef(
                        job_id=job_id,
                        worker_id=worker_id,
                        lease_seconds=self._settings.lease_seconds,
                    )
                )
            except errors.ApiError as error:
                log.warning("cannot renew the lease of job %d: %s", job_id, error.message)
                if isinstance(error, errors.REFUSALS):
                    return  # lost or gone: CompleteJob will be refused, nothing to keep alive

    async def _fail(
        self,
        worker_id: str,
        job: store_pb2.Job,
        code: str,
        message: str,
        retry_after: int,
        keep_attempt: bool = False,
    ) -> None:
        request = store_pb2.FailJobRequest(
            job_id=job.job_id,
            worker_id=worker_id,
            error=store_pb2.LastError(code=code, message=message),
            retry_after_seconds=retry_after,
            keep_attempt=keep_attempt,
        )
        try:
            self._notify(await self._store.FailJob(request))
        except errors.ApiError as error:
            # The lease will expire and the job be retried; nothing else to do here.
            log.warning("cannot record the failure of job %d: %s", job.job_id, error.message)
