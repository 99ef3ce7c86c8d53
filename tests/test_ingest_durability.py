"""Killing the gateway mid-batch loses nothing and duplicates nothing.

Default size is small; `make test-durability` runs it with 200 files (RAGD_TEST_FILES).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.launcher import Stack
from tests.harness import document, started_stack
from tests.store_fixtures import open_readonly, scalar

FILES = int(os.environ.get("RAGD_TEST_FILES", "40"))


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A short lease so the jobs of the killed gateway are reclaimed quickly.
    yield from started_stack(tmp_path_factory.mktemp("durable"), RAGD_INGEST_LEASE_SECONDS="5")


def batch_counts(client: httpx.Client, store_id: str, batch_id: str) -> dict[str, int]:
    reply = client.get(f"/v1/vector_stores/{store_id}/file_batches/{batch_id}")
    assert reply.status_code == 200, reply.text
    counts: dict[str, int] = reply.json()["file_counts"]
    return counts


def test_gateway_kill_mid_batch_then_restart(own_stack: Stack) -> None:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=60) as client:
        store_id = client.post("/v1/vector_stores", json={"name": "durable"}).json()["id"]
        file_ids = [
            client.post(
                "/v1/files",
                files={"file": (f"doc{i}.txt", document(i).encode())},
                data={"purpose": "assistants"},
            ).json()["id"]
            for i in range(FILES)
        ]
        batch = client.post(
            f"/v1/vector_stores/{store_id}/file_batches", json={"file_ids": file_ids}
        ).json()
        # Generous: a loaded 2-core machine embeds a few files a second.
        deadline = time.monotonic() + 120 + 2 * FILES
        while batch_counts(client, store_id, batch["id"])["completed"] < FILES // 4:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        own_stack.children["gateway"].kill()
        killed_at = batch_counts_direct(own_stack, store_id)
        own_stack.start_service("gateway")
        while (counts := batch_counts(client, store_id, batch["id"]))["completed"] < FILES:
            assert counts["failed"] == counts["cancelled"] == 0, counts
            assert time.monotonic() < deadline + 120 + 2 * FILES, counts
            time.sleep(0.2)
        assert 0 < killed_at < FILES, "the kill should land mid-batch"

    conn = open_readonly(Path(own_stack.env["RAGD_DB_PATH"]))
    try:
        key = scalar(conn, "SELECT id FROM vector_stores WHERE public_id = ?", store_id)
        rows: list[tuple[str, str, int]] = conn.execute(  # type: ignore[assignment]
            "SELECT file_id, status, chunk_count FROM vector_store_files WHERE vector_store_id = ?",
            (key,),
        ).fetchall()
        assert len(rows) == FILES
        assert {status for _, status, _ in rows} == {"completed"}
        for file_id, _, chunk_count in rows:
            indexes = [
                index
                for (index,) in conn.execute(
                    "SELECT chunk_index FROM chunks WHERE vector_store_id = ? AND file_id = ?",
                    (key, file_id),
                )
            ]
            assert sorted(indexes) == list(range(chunk_count)) and chunk_count > 1
        chunks = scalar(conn, "SELECT count(*) FROM chunks WHERE vector_store_id = ?", key)
        vectors = scalar(conn, f"SELECT count(*) FROM vec_{int(key)}")
        assert chunks == vectors == sum(count for _, _, count in rows)
        texts = scalar(
            conn,
            "SELECT count(DISTINCT file_id || ':' || text) FROM chunks WHERE vector_store_id = ?",
            key,
        )
        assert texts == chunks, "a chunk was stored twice"
        print(
            f"\ndurability: {FILES} files, gateway killed with {killed_at} completed, "
            f"{FILES} completed after restart; {chunks} chunks, {vectors} vectors, "
            f"{texts} distinct chunk texts"
        )
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()


def batch_counts_direct(stack: Stack, store_id: str) -> int:
    """Completed files right after the kill, read from the database (the gateway is down)."""
    conn = open_readonly(Path(stack.env["RAGD_DB_PATH"]))
    try:
        done = scalar(
            conn,
            "SELECT count(*) FROM vector_store_files cf"
            " JOIN vector_stores c ON c.id = cf.vector_store_id"
            " WHERE c.public_id = ? AND cf.status = 'completed'",
            store_id,
        )
        return int(done)
    finally:
        conn.close()
