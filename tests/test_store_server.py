"""The store's gRPC server, started for real on a free port (in-process and as a process)."""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.vectors import to_bytes
from services.pb import store_pb2 as pb
from services.store import migrations
from services.store.config import StoreConfig
from services.store.db import open_database
from services.store.errors import DatabaseTooNew
from services.store.wire.server import SERVICE_NAME, create_server
from tests.store_fixtures import (
    DIMS,
    MODEL,
    RunningStore,
    expect_status,
    new_vector_store,
    run_against_store,
    unit_vectors,
)

ROOT = Path(__file__).resolve().parent.parent


def test_health_reports_serving(tmp_path: Path) -> None:
    async def scenario(store: RunningStore) -> None:
        health = health_pb2_grpc.HealthStub(store.channel)
        for service in ("", SERVICE_NAME):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

    run_against_store(tmp_path / "ragd.db", scenario)


def test_vector_store_lifecycle_over_grpc(tmp_path: Path) -> None:
    vectors = unit_vectors(np.random.default_rng(1), 3, DIMS)

    async def scenario(store: RunningStore) -> None:
        created = await store.stub.CreateVectorStore(
            pb.CreateVectorStoreRequest(
                name="notes", model=MODEL, dimensions=DIMS, metadata={"team": "docs"}
            )
        )
        assert created.id.startswith("vs_") and created.metadata == {"team": "docs"}
        added = await store.stub.AddChunks(
            pb.AddChunksRequest(
                vector_store_id=created.id,
                file_id="file-1",
                filename="a.txt",
                attributes={
                    "lang": pb.AttributeValue(string_value="en"),
                    "year": pb.AttributeValue(number_value=2024),
                    "draft": pb.AttributeValue(bool_value=True),
                },
                chunks=[pb.ChunkInput(text=f"chunk {i}", token_count=2) for i in range(3)],
                vectors=to_bytes(vectors),
                dimensions=DIMS,
                model=MODEL,
            )
        )
        assert (added.file_id, added.chunk_count) == ("file-1", 3)
        assert added.usage_bytes == 3 * len(b"chunk 0") + 3 * 4 * DIMS
        result = await store.stub.Search(
            pb.SearchRequest(
                vector_store_id=created.id,
                query_vector=to_bytes(vectors[2]),
                dimensions=DIMS,
                k=2,
                model=MODEL,
            )
        )
        top = result.hits[0]
        assert (top.text, top.file_id, top.filename, top.chunk_index) == (
            "chunk 2",
            "file-1",
            "a.txt",
            2,
        )
        assert top.score == pytest.approx(1.0, abs=1e-6)
        assert len(result.hits) == 2 and result.hits[1].score < top.score
        assert top.attributes["lang"].string_value == "en"
        assert top.attributes["year"].number_value == 2024
        assert top.attributes["draft"].bool_value is True
        fetched = await store.stub.GetVectorStore(pb.GetVectorStoreRequest(id=created.id))
        assert (fetched.chunk_count, fetched.file_count) == (3, 1)
        assert fetched.usage_bytes == added.usage_bytes
        listed = await store.stub.ListVectorStores(pb.ListVectorStoresRequest())
        assert [c.id for c in listed.vector_stores] == [created.id] and not listed.has_more
        deleted = await store.stub.DeleteVectorStore(pb.DeleteVectorStoreRequest(id=created.id))
        assert (deleted.id, deleted.deleted) == (created.id, True)
        listed = await store.stub.ListVectorStores(pb.ListVectorStoresRequest())
        assert list(listed.vector_stores) == []

    run_against_store(tmp_path / "ragd.db", scenario)


def test_unknown_vector_store_is_not_found(tmp_path: Path) -> None:
    async def scenario(store: RunningStore) -> None:
        query = to_bytes(np.ones(DIMS))
        calls: list[Awaitable[object]] = [
            store.stub.GetVectorStore(pb.GetVectorStoreRequest(id="vs_nope")),
            store.stub.DeleteVectorStore(pb.DeleteVectorStoreRequest(id="vs_nope")),
            store.stub.Search(
                pb.SearchRequest(
                    vector_store_id="vs_nope", query_vector=query, dimensions=DIMS, k=1
                )
            ),
            store.stub.AddChunks(
                pb.AddChunksRequest(
                    vector_store_id="vs_nope", file_id="f", dimensions=DIMS, model=MODEL
                )
            ),
        ]
        for call in calls:
            details = await expect_status(call, grpc.StatusCode.NOT_FOUND)
            assert "vs_nope" in details

    run_against_store(tmp_path / "ragd.db", scenario)


@pytest.mark.parametrize(
    ("payload", "dimensions", "k", "message"),
    [
        (b"\x00" * 10, DIMS, 1, "not a whole number"),
        (b"\x00\x00\x80\x3f" * DIMS * 2, DIMS, 1, "expected 1 vectors"),
        (b"", 0, 1, "dimensions must be positive"),
        (b"\x00\x00\x80\x3f" * DIMS, DIMS, 0, "k must be"),
    ],
)
def test_bad_search_requests_are_invalid_arguments(
    tmp_path: Path, payload: bytes, dimensions: int, k: int, message: str
) -> None:
    async def scenario(store: RunningStore) -> None:
        vector_store = await new_vector_store(store)
        request = pb.SearchRequest(
            vector_store_id=vector_store.id, query_vector=payload, dimensions=dimensions, k=k
        )
        details = await expect_status(store.stub.Search(request), grpc.StatusCode.INVALID_ARGUMENT)
        assert message in details

    run_against_store(tmp_path / "ragd.db", scenario)


def test_bad_chunk_payloads_are_invalid_arguments(tmp_path: Path) -> None:
    async def scenario(store: RunningStore) -> None:
        vector_store = await new_vector_store(store)
        base = pb.AddChunksRequest(
            vector_store_id=vector_store.id,
            file_id="f",
            chunks=[pb.ChunkInput(text="a"), pb.ChunkInput(text="b")],
            dimensions=DIMS,
            model=MODEL,
        )
        one_vector = pb.AddChunksRequest()
        one_vector.CopyFrom(base)
        one_vector.vectors = to_bytes(np.ones((1, DIMS)))
        details = await expect_status(
            store.stub.AddChunks(one_vector), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert "expected 2 vectors" in details
        no_value = pb.AddChunksRequest()
        no_value.CopyFrom(base)
        no_value.vectors = to_bytes(np.ones((2, DIMS)))
        no_value.attributes["empty"].CopyFrom(pb.AttributeValue())
        details = await expect_status(
            store.stub.AddChunks(no_value), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert "attribute 'empty' has no value" in details
        fetched = await store.stub.GetVectorStore(pb.GetVectorStoreRequest(id=vector_store.id))
        assert fetched.chunk_count == 0

    run_against_store(tmp_path / "ragd.db", scenario)


def test_mismatched_vectors_are_failed_preconditions(tmp_path: Path) -> None:
    async def scenario(store: RunningStore) -> None:
        vector_store = await new_vector_store(store)
        wrong_dims = pb.AddChunksRequest(
            vector_store_id=vector_store.id,
            file_id="f",
            chunks=[pb.ChunkInput(text="a")],
            vectors=to_bytes(np.ones((1, 2 * DIMS))),
            dimensions=2 * DIMS,
            model=MODEL,
        )
        details = await expect_status(
            store.stub.AddChunks(wrong_dims), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert f"not {MODEL} ({2 * DIMS} dims)" in details and "index it from" in details
        wrong_model = pb.SearchRequest(
            vector_store_id=vector_store.id,
            query_vector=to_bytes(np.ones(DIMS)),
            dimensions=DIMS,
            k=1,
            model="bge-base",
        )
        details = await expect_status(
            store.stub.Search(wrong_model), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "bge-base" in details

    run_against_store(tmp_path / "ragd.db", scenario)


def test_unexpected_errors_are_internal_without_details(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db_path = tmp_path / "ragd.db"

    async def scenario(store: RunningStore) -> None:
        vector_store = await new_vector_store(store)
        conn = open_database(db_path)
        try:  # Break the database behind the store's back.
            conn.execute("DROP TABLE vector_stores")
        finally:
            conn.close()
        request = pb.SearchRequest(
            vector_store_id=vector_store.id,
            query_vector=to_bytes(np.ones(DIMS)),
            dimensions=DIMS,
            k=1,
        )
        details = await expect_status(store.stub.Search(request), grpc.StatusCode.INTERNAL)
        assert details == "internal error in the store; see the store's log"

    run_against_store(db_path, scenario)
    assert "no such table: vector_stores" in caplog.text


def test_create_server_refuses_a_newer_database(tmp_path: Path) -> None:
    db_path = tmp_path / "ragd.db"
    conn = open_database(db_path)
    try:
        conn.execute(f"PRAGMA user_version = {len(migrations.MIGRATIONS) + 1}")
    finally:
        conn.close()

    async def main() -> None:
        with pytest.raises(DatabaseTooNew):
            await create_server(StoreConfig(listen="127.0.0.1:0", db_path=db_path, threads=1))

    asyncio.run(main())


def _read_until(process: subprocess.Popen[str], marker: str, timeout: float) -> str:
    """Reads the child's output until a whole line contains `marker`; returns everything read.

    Reads the pipe's descriptor directly: a buffered readline could pull several lines into
    Python's buffer while the selector waits on the (now empty) descriptor.
    """
    assert process.stdout is not None
    fd = process.stdout.fileno()
    seen = ""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                break
            data = os.read(fd, 65536)
            if not data:
                break
            seen += data.decode(errors="replace")
            if marker in seen and "\n" in seen[seen.index(marker) :]:
                return seen
    raise AssertionError(f"no line with {marker!r} within {timeout}s:\n{seen}")


def _spawn_store(db_path: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "RAGD_STORE_LISTEN": "127.0.0.1:0",
        "RAGD_DB_PATH": str(db_path),
        "RAGD_STORE_THREADS": "2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "services.store"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_module_runs_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    db_path = tmp_path / "data" / "ragd.db"
    process = _spawn_store(db_path)
    try:
        output = _read_until(process, "store listening on 127.0.0.1:", timeout=30)
        port = int(output.rsplit("127.0.0.1:", 1)[1].split()[0])

        async def check() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
                assert reply.status == health_pb2.HealthCheckResponse.SERVING

        asyncio.run(check())
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert db_path.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


def test_module_exits_with_a_clear_error_on_a_newer_database(tmp_path: Path) -> None:
    db_path = tmp_path / "ragd.db"
    conn = open_database(db_path)
    try:
        conn.execute("PRAGMA user_version = 999")
    finally:
        conn.close()
    process = _spawn_store(db_path)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "schema version 999" in output
    assert "Traceback" not in output
