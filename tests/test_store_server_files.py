"""Files, attachments, batches and ingest jobs over the store's real gRPC server."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

import grpc
import numpy as np
import pytest

from services.common.vectors import to_bytes
from services.pb import store_pb2 as pb
from services.store import db
from services.store.db import open_database
from tests.store_fixtures import (
    DIMS,
    MODEL,
    RunningStore,
    expect_status,
    new_vector_store,
    run_against_store,
    unit_vectors,
)

WORKER = "host:1:0"


def string(value: str) -> pb.AttributeValue:
    return pb.AttributeValue(string_value=value)


def comparison(key: str, op: str, value: pb.AttributeValue) -> pb.Filter:
    return pb.Filter(comparison=pb.Comparison(key=key, op=op, value=value))


def test_a_file_goes_from_upload_to_search_over_grpc(tmp_path: Path) -> None:
    vectors = unit_vectors(np.random.default_rng(2), 2, DIMS)

    async def scenario(store: RunningStore) -> None:
        stub = store.stub
        vector_store = await new_vector_store(store)
        file = await stub.CreateFile(
            pb.CreateFileRequest(filename="a.txt", purpose="assistants", content=b"alpha beta")
        )
        assert file.id.startswith("file-") and file.bytes == 10 and len(file.sha256) == 64
        assert await stub.GetFile(pb.GetFileRequest(id=file.id)) == file
        content = await stub.GetFileContent(pb.GetFileRequest(id=file.id))
        assert (content.file, content.content) == (file, b"alpha beta")
        listed = await stub.ListFiles(pb.ListFilesRequest(purpose="assistants"))
        assert [f.id for f in listed.files] == [file.id]

        attach = pb.AttachFileRequest(
            vector_store_id=vector_store.id,
            file_id=file.id,
            attributes={"team": string("docs")},
            chunking=pb.ChunkingStrategy(max_chunk_size_tokens=256, chunk_overlap_tokens=64),
        )
        attached = await stub.AttachFile(attach)
        assert (attached.status, attached.deduplicated) == ("in_progress", False)
        assert not attached.HasField("last_error")
        assert (await stub.AttachFile(attach)).deduplicated

        claimed = await stub.ClaimJobs(
            pb.ClaimJobsRequest(worker_id=WORKER, max_jobs=4, lease_seconds=30)
        )
        (job,) = claimed.jobs
        assert (job.file_id, job.content, job.chunking) == (
            file.id,
            b"alpha beta",
            pb.ChunkingStrategy(max_chunk_size_tokens=256, chunk_overlap_tokens=64),
        )
        assert (job.model, job.dimensions, job.attempt) == (MODEL, DIMS, 1)
        renewed = await stub.RenewJob(
            pb.JobRef(job_id=job.job_id, worker_id=WORKER, lease_seconds=30)
        )
        assert renewed.lease_expires_at > 0
        done = await stub.CompleteJob(
            pb.CompleteJobRequest(
                job_id=job.job_id,
                worker_id=WORKER,
                chunks=[pb.ChunkInput(text="alpha", token_count=1), pb.ChunkInput(text="beta")],
                vectors=to_bytes(vectors),
                dimensions=DIMS,
                model=MODEL,
            )
        )
        assert (done.status, done.chunk_count) == ("completed", 2)

        ref = pb.VectorStoreFileRef(vector_store_id=vector_store.id, file_id=file.id)
        chunks = await stub.GetVectorStoreFileChunks(ref)
        assert [c.text for c in chunks.chunks] == ["alpha", "beta"]
        search = pb.SearchRequest(
            vector_store_id=vector_store.id, query_vector=to_bytes(vectors[1]), dimensions=DIMS, k=5
        )
        search.filter.CopyFrom(comparison("team", "eq", string("docs")))
        hits = (await stub.Search(search)).hits
        assert [hit.text for hit in hits] == ["beta", "alpha"]
        search.filter.CopyFrom(comparison("team", "ne", string("docs")))
        assert list((await stub.Search(search)).hits) == []

        fetched = await stub.GetVectorStore(pb.GetVectorStoreRequest(id=vector_store.id))
        assert (fetched.file_counts.completed, fetched.file_counts.total, fetched.chunk_count) == (
            1,
            1,
            2,
        )
        updated = await stub.UpdateVectorStore(
            pb.UpdateVectorStoreRequest(
                id=vector_store.id,
                has_expires=True,
                expires_anchor="last_active_at",
                expires_days=2,
            )
        )
        assert (updated.name, updated.expires_at) == ("notes", updated.last_active_at + 2 * 86400)

        second = await stub.CreateFile(
            pb.CreateFileRequest(filename="b.txt", purpose="assistants", content=b"b")
        )
        batch_files = [pb.BatchFile(file_id=file.id), pb.BatchFile(file_id=second.id)]
        batch = await stub.CreateFileBatch(
            pb.CreateFileBatchRequest(vector_store_id=vector_store.id, files=batch_files)
        )
        # `file` is already completed: deduplicated, it stays out of the batch.
        assert (batch.status, batch.file_counts.in_progress, batch.file_counts.total) == (
            "in_progress",
            1,
            1,
        )
        batch_ref = pb.FileBatchRef(vector_store_id=vector_store.id, batch_id=batch.id)
        cancelled = await stub.CancelFileBatch(batch_ref)
        assert (cancelled.status, cancelled.file_counts.cancelled) == ("cancelled", 1)
        assert await stub.GetFileBatch(batch_ref) == cancelled
        members = await stub.ListVectorStoreFiles(
            pb.ListVectorStoreFilesRequest(vector_store_id=vector_store.id, batch_id=batch.id)
        )
        assert [m.status for m in members.files] == ["cancelled"]

        assert (await stub.DetachFile(ref)).deleted
        assert (await stub.DeleteFile(pb.GetFileRequest(id=file.id))).deleted
        await expect_status(stub.GetFile(pb.GetFileRequest(id=file.id)), grpc.StatusCode.NOT_FOUND)

    run_against_store(tmp_path / "ragd.db", scenario)


def test_failures_map_to_status_codes(tmp_path: Path) -> None:
    async def scenario(store: RunningStore) -> None:
        stub = store.stub
        vector_store = await new_vector_store(store)
        file = await stub.CreateFile(
            pb.CreateFileRequest(filename="a.txt", purpose="assistants", content=b"x")
        )
        ref = pb.VectorStoreFileRef(vector_store_id=vector_store.id, file_id=file.id)
        not_found: list[tuple[Awaitable[object], str]] = [
            (stub.GetFile(pb.GetFileRequest(id="file-nope")), "no file with id 'file-nope'"),
            (stub.DeleteFile(pb.GetFileRequest(id="file-nope")), "file-nope"),
            (
                stub.AttachFile(
                    pb.AttachFileRequest(vector_store_id=vector_store.id, file_id="file-nope")
                ),
                "no file with id 'file-nope'",
            ),
            (stub.GetVectorStoreFile(ref), "is not in vector store"),
            (stub.DetachFile(ref), "is not in vector store"),
            (
                stub.GetFileBatch(
                    pb.FileBatchRef(vector_store_id=vector_store.id, batch_id="vsfb_x")
                ),
                "vsfb_x",
            ),
            (stub.RenewJob(pb.JobRef(job_id=42, worker_id=WORKER)), "no ingest job 42"),
        ]
        for call, message in not_found:
            assert message in await expect_status(call, grpc.StatusCode.NOT_FOUND)

        search = pb.SearchRequest(
            vector_store_id=vector_store.id,
            query_vector=to_bytes(np.ones(DIMS)),
            dimensions=DIMS,
            k=1,
        )
        bad_filters = [
            pb.Filter(),
            pb.Filter(compound=pb.CompoundFilter(op="and")),
            comparison("a", "gt", pb.AttributeValue(bool_value=True)),
            pb.Filter(comparison=pb.Comparison(key="a", op="in")),
        ]
        for bad in bad_filters:
            search.filter.CopyFrom(bad)
            await expect_status(stub.Search(search), grpc.StatusCode.INVALID_ARGUMENT)
        invalid: list[Awaitable[object]] = [
            stub.CreateFileBatch(pb.CreateFileBatchRequest(vector_store_id=vector_store.id)),
            stub.ClaimJobs(pb.ClaimJobsRequest()),
            stub.CreateFile(pb.CreateFileRequest(filename="a.txt")),
        ]
        for call in invalid:
            await expect_status(call, grpc.StatusCode.INVALID_ARGUMENT)

        await stub.AttachFile(
            pb.AttachFileRequest(vector_store_id=vector_store.id, file_id=file.id)
        )
        (job,) = (await stub.ClaimJobs(pb.ClaimJobsRequest(worker_id=WORKER))).jobs
        failed = await stub.FailJob(
            pb.FailJobRequest(
                job_id=job.job_id,
                worker_id=WORKER,
                error=pb.LastError(code="invalid_file", message="no text in the file"),
            )
        )
        assert (failed.status, failed.last_error.code) == ("failed", "invalid_file")
        lost = await expect_status(
            stub.RenewJob(pb.JobRef(job_id=job.job_id, worker_id=WORKER)),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert "already finished" in lost

    run_against_store(tmp_path / "ragd.db", scenario)


def test_a_busy_database_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The store's own connections open lazily, so they pick up the short timeout.
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 50)
    db_path = tmp_path / "ragd.db"

    async def scenario(store: RunningStore) -> None:
        blocker = open_database(db_path)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            request = pb.CreateFileRequest(filename="a.txt", purpose="assistants", content=b"x")
            details = await expect_status(
                store.stub.CreateFile(request), grpc.StatusCode.UNAVAILABLE
            )
            assert "busy" in details
            blocker.execute("ROLLBACK")
            assert (await store.stub.CreateFile(request)).id.startswith("file-")
        finally:
            blocker.close()

    run_against_store(db_path, scenario)
