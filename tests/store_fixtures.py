"""Helpers shared by the store tests (plain functions; conftest.py and the test modules wrap
them in fixtures)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import apsw
import grpc
import numpy as np
import numpy.typing as npt
import pytest
import sqlite_vec
import tantivy

from services.common.vocabulary import COARSE, EXACT
from services.pb import store_pb2 as pb
from services.pb import store_pb2_grpc
from services.store import fulltext, jobs, resident, vector_index
from services.store.config import PostgresSettings, StoreConfig
from services.store.db import database_key, open_database
from services.store.records import ChunkInput, ClaimedJob, File, VectorStoreFile
from services.store.repository import OperationsSettings, Repository
from services.store.vector_index import IndexSettings
from services.store.wire.server import create_server

MODEL = "all-MiniLM-L6-v2"
# Vectors searched in SQLite only (no copy in memory): for the tests of vector_index's paths.
IN_SQLITE = resident.ResidentSettings(budget_bytes=0)
# The vector size of the vector stores the vs_id fixture and new_vector_store create.
DIMS = 8


class FakeClock:
    """A clock the test moves by hand (unix seconds)."""

    def __init__(self, now: int = 1_700_000_000) -> None:
        self.now = now

    def __call__(self) -> float:
        return float(self.now)


def open_repository(
    path: Path,
    clock: Callable[[], float] = time.time,
    index: IndexSettings | None = None,
    max_attempts: int = jobs.MAX_ATTEMPTS,
    operations: OperationsSettings | None = None,
    url: str | None = None,
) -> Repository:
    """A migrated store on the SQLite file at `path`, or on the PostgreSQL database at `url`."""
    repository = Repository(
        path,
        clock=clock,
        index=index,
        max_attempts=max_attempts,
        operations=operations,
        # Tests call the repository from threads of their own, beyond a server's pool.
        postgres=PostgresSettings(url=url, pool_max=16) if url is not None else None,
    )
    repository.migrate()
    return repository


def unit_vectors(rng: np.random.Generator, count: int, dims: int) -> npt.NDArray[np.float32]:
    vectors = rng.standard_normal((count, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


@dataclass
class RunningStore:
    port: int
    channel: grpc.aio.Channel
    stub: store_pb2_grpc.StoreAsyncStub


@asynccontextmanager
async def running_store(db_path: Path, **settings: Any) -> AsyncIterator[RunningStore]:
    """The real store on a free port with a connected client; stopped and closed afterwards.
    `settings` override StoreConfig fields."""
    config = StoreConfig(listen="127.0.0.1:0", db_path=db_path, threads=2, **settings)
    server, port = await create_server(config)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield RunningStore(port, channel, store_pb2_grpc.StoreStub(channel))
    finally:
        await server.stop(None)
        await server.wait_for_termination()


Scenario = Callable[[RunningStore], Awaitable[None]]


def run_against_store(db_path: Path, scenario: Scenario) -> None:
    async def main() -> None:
        async with running_store(db_path) as store:
            await scenario(store)

    asyncio.run(main())


async def new_vector_store(store: RunningStore, dims: int = DIMS) -> pb.VectorStore:
    request = pb.CreateVectorStoreRequest(name="notes", model=MODEL, dimensions=dims)
    vector_store: pb.VectorStore = await store.stub.CreateVectorStore(request)
    return vector_store


async def expect_status(call: Awaitable[object], code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    assert error.value.code() == code, error.value.details()
    details: str = error.value.details() or ""
    return details


def open_readonly(path: Path) -> apsw.Connection:
    """A read-only connection with sqlite-vec, to a database a running store writes to."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    return conn


def scalar(conn: apsw.Connection, sql: str, *params: object) -> int:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0] or 0)


def check_invariants(path: Path) -> None:
    """What every committed state of the store must satisfy, whatever happened before.

    Counters match the rows they count; chunks and vectors exist only for completed files,
    one vector per chunk except for the chunks of files indexed lexically (vectors_pending,
    completed only), which have none; exactly the in-progress files and those whose vectors
    are pending have one live job; foreign keys hold.
    A coarse index holds a subset of the vectors while it is built, all of them once built.
    """
    conn = open_database(path)
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        vector_stores = conn.execute(
            "SELECT id, chunk_count, file_count, usage_bytes, vector_index FROM vector_stores"
        ).fetchall()
        for key, chunk_count, file_count, usage, index in vector_stores:
            check_coarse_index(conn, cast(int, key), str(index))
            where = "FROM vector_store_files WHERE vector_store_id = ?"
            assert file_count == scalar(conn, f"SELECT count(*) {where}", key)
            completed = f"{where} AND status = 'completed'"
            assert chunk_count == scalar(conn, f"SELECT sum(chunk_count) {completed}", key)
            assert usage == scalar(conn, f"SELECT sum(usage_bytes) {completed}", key)
            chunks = scalar(conn, "SELECT count(*) FROM chunks WHERE vector_store_id = ?", key)
            assert chunks == chunk_count
            lexical = scalar(
                conn,
                "SELECT count(*) FROM chunks AS c JOIN vector_store_files AS cf"
                " ON cf.vector_store_id = c.vector_store_id AND cf.file_id = c.file_id"
                " WHERE c.vector_store_id = ? AND cf.vectors_pending = 1",
                key,
            )
            assert scalar(conn, f"SELECT count(*) FROM vec_{key:d}") == chunks - lexical
            assert (
                scalar(
                    conn,
                    f"SELECT count(*) FROM vec_{key:d} WHERE rowid IN (SELECT c.id FROM chunks AS c"
                    " JOIN vector_store_files AS cf ON cf.vector_store_id = c.vector_store_id"
                    " AND cf.file_id = c.file_id WHERE cf.vectors_pending = 1)",
                )
                == 0
            )
            # Every vector belongs to a chunk of its vector store (with equal counts: one each).
            orphans = scalar(
                conn,
                f"SELECT count(*) FROM vec_{key:d} WHERE rowid NOT IN"
                " (SELECT id FROM chunks WHERE vector_store_id = ?)",
                key,
            )
            assert orphans == 0, f"{orphans} vectors without a chunk in vector_store {key}"
        assert (
            conn.execute(
                "SELECT c.id FROM chunks AS c JOIN vector_store_files AS cf"
                " ON cf.vector_store_id = c.vector_store_id AND cf.file_id = c.file_id"
                " WHERE cf.status <> 'completed'"
            ).fetchall()
            == []
        )
        assert (
            conn.execute(
                "SELECT file_id FROM vector_store_files"
                " WHERE status <> 'completed' AND (chunk_count <> 0 OR usage_bytes <> 0)"
            ).fetchall()
            == []
        )
        assert (
            conn.execute(
                "SELECT file_id FROM vector_store_files"
                " WHERE status <> 'failed' AND (last_error_code <> '' OR last_error_message <> '')"
                " AND NOT vectors_pending"
            ).fetchall()
            == []
        )
        pending = "SELECT file_id FROM vector_store_files WHERE vectors_pending AND status <> ?"
        assert conn.execute(pending, ("completed",)).fetchall() == []
        live_jobs = (
            "(SELECT count(*) FROM jobs AS j WHERE j.vector_store_id = cf.vector_store_id"
            " AND j.file_id = cf.file_id AND j.state <> 'done')"
        )
        assert (
            conn.execute(
                f"SELECT cf.file_id, cf.status, {live_jobs} FROM vector_store_files AS cf"
                f" WHERE {live_jobs} <> (cf.status = 'in_progress'"
                " OR (cf.vectors_pending AND cf.last_error_code = ''))"
            ).fetchall()
            == []
        )
        # A re-index in progress has its shadow, and a shadow its re-index in progress.
        assert (
            conn.execute(
                "SELECT c.id FROM vector_stores AS c WHERE c.shadow_of IS NOT NULL AND NOT EXISTS"
                " (SELECT 1 FROM reindexes AS r WHERE r.shadow_id = c.id"
                "  AND r.vector_store_id = c.shadow_of AND r.status = 'in_progress')"
            ).fetchall()
            == []
        )
        assert (
            conn.execute(
                "SELECT id FROM reindexes WHERE (status = 'in_progress') <> (shadow_id IS NOT NULL)"
            ).fetchall()
            == []
        )
        conversation_invariants(conn)
        resident_invariants(conn)
        fulltext_invariants(conn)
    finally:
        conn.close()


def resident_invariants(conn: apsw.Connection) -> None:
    """Every vector store this process holds in memory (resident.py) holds exactly the live
    vectors of the database, no more, no fewer, the same values."""
    found = resident.existing(database_key(conn))
    if found is None:
        return
    for key, vectors in found.loaded().items():
        rows = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = ?", (vector_index.vec_table(key),)
        ).fetchall()
        if not rows:
            assert vectors.live_rows == 0, f"vector_store {key} dropped but still in memory"
            continue
        stored = conn.execute(
            f"SELECT rowid, embedding FROM {vector_index.vec_table(key)} ORDER BY rowid"
        ).fetchall()
        ids, matrix = vectors.rows()
        assert ids.tolist() == [row[0] for row in stored], f"vector_store {key}: other rows"
        if stored:
            floats = np.frombuffer(b"".join(cast(bytes, row[1]) for row in stored), dtype="<f4")
            floats = floats.reshape(len(stored), -1)
            floats = floats / np.linalg.norm(floats, axis=1, keepdims=True)
            assert np.allclose(matrix, floats, atol=1e-6), f"vector_store {key}: other vectors"


def check_conversation_invariants(path: Path) -> None:
    conn = open_database(path)
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        conversation_invariants(conn)
        resident_invariants(conn)
    finally:
        conn.close()


def conversation_invariants(conn: apsw.Connection) -> None:
    """Conversations count their items and number them below their counter; every item
    belongs to a conversation or a response; the full-text index matches the items' text."""
    assert (
        conn.execute(
            "SELECT c.id FROM conversations AS c WHERE c.item_count <>"
            " (SELECT count(*) FROM items AS i WHERE i.conversation_id = c.id)"
            " OR c.next_position <="
            " coalesce((SELECT max(position) FROM items AS i WHERE i.conversation_id = c.id), -1)"
        ).fetchall()
        == []
    )
    assert (
        conn.execute(
            "SELECT id FROM items WHERE (conversation_id IS NULL AND response_id IS NULL)"
            " OR ((conversation_id IS NULL) <> (position IS NULL))"
            " OR ((response_id IS NULL) <> (response_role = ''))"
        ).fetchall()
        == []
    )
    # FTS5's own check of an external-content index against its table.
    conn.execute("INSERT INTO items_fts (items_fts) VALUES ('integrity-check')")


def check_coarse_index(conn: apsw.Connection, key: int, index: str) -> None:
    tables = {
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN (?, ?)", (f"vecf_{key}", f"vecq_{key}")
        )
    }
    if index == EXACT:
        assert tables == set(), f"vector_store {key} is exact but has {tables}"
        return
    floats = scalar(conn, f"SELECT count(*) FROM vecf_{key:d}")
    assert scalar(conn, f"SELECT count(*) FROM vecq_{key:d}") == floats
    strays = scalar(
        conn,
        f"SELECT count(*) FROM vecf_{key:d} WHERE id NOT IN"
        " (SELECT id FROM chunks WHERE vector_store_id = ?)",
        key,
    )
    assert strays == 0, f"{strays} coarse rows without a chunk in vector_store {key}"
    # Both copies hold the same rows, each bit row in its partition; a sample of rows (point
    # lookups in vec0 are slow) holds the same floats in vec_N and vecf_N, and their sign bits.
    paired = scalar(
        conn,
        f"SELECT count(*) FROM vecq_{key:d} AS q JOIN vecf_{key:d} AS f ON f.id = q.rowid"
        " WHERE q.part = q.rowid % 64",
    )
    assert paired == floats, f"coarse index of {key}: {paired} of {floats} bit rows paired"
    for rowid, embedding in conn.execute(f"SELECT id, embedding FROM vecf_{key:d} LIMIT 500"):
        assert conn.execute(
            f"SELECT v.embedding = ?, q.embedding = vec_quantize_binary(?)"
            f" FROM vec_{key:d} AS v, vecq_{key:d} AS q WHERE v.rowid = ? AND q.rowid = ?",
            (embedding, embedding, rowid, rowid),
        ).fetchone() == (1, 1), f"coarse index of {key}: row {rowid} differs from vec_{key}"
    if index == COARSE:
        chunks = scalar(conn, "SELECT count(*) FROM chunks WHERE vector_store_id = ?", key)
        assert floats == chunks, f"coarse index of {key}: {floats} rows for {chunks} chunks"


def check_fts_index(path: Path) -> None:
    """Every vector_store's full-text index holds exactly its chunks, but for the chunks queued
    for it (fulltext.py): those it may or may not hold yet."""
    conn = open_database(path)
    try:
        fulltext_invariants(conn)
    finally:
        conn.close()


def indexed_chunks(folder: Path) -> set[int]:
    """The chunk ids a full-text index folder holds."""
    index = tantivy.Index(fulltext.SCHEMA, path=str(folder))
    searcher = index.searcher()
    hits = searcher.search(tantivy.Query.all_query(), max(1, searcher.num_docs), count=False).hits
    return {
        cast(int, i) for i in searcher.fast_field_values("id", [address for _, address in hits])
    }


def fulltext_invariants(conn: apsw.Connection) -> None:
    root = fulltext.directory(Path(conn.filename))
    keys = [cast(int, row[0]) for row in conn.execute("SELECT id FROM vector_stores")]
    queued: dict[int, set[int]] = {}
    for key, chunk in conn.execute("SELECT vector_store_id, chunk_id FROM fulltext_queue"):
        queued.setdefault(cast(int, key), set()).add(cast(int, chunk))
    for key in keys:
        chunks = {
            cast(int, row[0])
            for row in conn.execute("SELECT id FROM chunks WHERE vector_store_id = ?", (key,))
        }
        row = conn.execute(
            "SELECT generation FROM fulltext_indexes WHERE vector_store_id = ?", (key,)
        ).fetchone()
        pending = queued.get(key, set())
        if row is None:
            continue  # to be rebuilt from the chunks
        folder = root / str(key)
        if not folder.exists():
            continue  # a copy of the database (a backup): its store rebuilds the index
        generation = (folder / "ragd-generation").read_text(encoding="utf-8").strip()
        assert generation == row[0], f"vector_store {key}: its index is another generation"
        differ = indexed_chunks(folder) ^ chunks
        assert differ <= pending, (
            f"vector_store {key}: index and chunks differ in {differ - pending}, chunks {chunks}"
        )
    if root.exists():
        for entry in root.iterdir():
            name = entry.name
            if name.endswith(".building"):
                continue
            assert int(name) in keys or int(name) in queued, (
                f"index folder {name} of no vector_store"
            )


def table_names(path: Path) -> set[str]:
    conn = open_database(path)
    try:
        return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def upload(repo: Repository, content: bytes | str = b"hello", filename: str = "a.txt") -> File:
    data = content.encode() if isinstance(content, str) else content
    return repo.create_file(filename, "assistants", data)


def claim_one(repo: Repository, worker: str = "w1", lease_seconds: int = 60) -> ClaimedJob:
    claimed = repo.claim_jobs(worker, max_jobs=1, lease_seconds=lease_seconds)
    assert len(claimed) == 1, claimed
    return claimed[0]


def finish(
    repo: Repository, job: ClaimedJob, worker: str = "w1", chunks: int = 2, seed: int = 0
) -> VectorStoreFile:
    """Completes a claimed job with `chunks` chunks named after its file, and random vectors."""
    inputs = [ChunkInput(f"{job.file_id} chunk {i}", token_count=3) for i in range(chunks)]
    vectors = unit_vectors(np.random.default_rng(seed), chunks, job.dimensions)
    return repo.complete_job(job.job_id, worker, inputs, vectors, job.model)
