"""Lexical-only operation end to end: with the embedder down (and a gateway that never saw it),
files are still ingested, searchable by text with `degraded`, and get their vectors from the
same durable jobs once the embedder is back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.launcher import Stack
from tests.harness import started_stack, wait_ready
from tests.store_fixtures import check_invariants

TEXTS = {
    "keeper.txt": "The lighthouse keeper logs every ship that passes the northern cape.",
    "bakery.txt": "The bakery on Mill Street sells rye bread and cinnamon rolls at dawn.",
    "orbit.txt": "A satellite in geostationary orbit circles the Earth once a sidereal day.",
}


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("lexical"), RAGD_INGEST_POLL_SECONDS="0.2")


@pytest.fixture(scope="module")
def client(own_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=30) as http:
        yield http


def store_until(
    client: httpx.Client, store_id: str, done: Any, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        store: dict[str, Any] = client.get(f"/v1/vector_stores/{store_id}").json()
        if done(store):
            return store
        assert time.monotonic() < deadline, store
        time.sleep(0.2)


def test_ingest_without_an_embedder_then_vectors_when_it_is_back(
    own_stack: Stack, client: httpx.Client
) -> None:
    store_id = client.post("/v1/vector_stores", json={"name": "notes"}).json()["id"]
    own_stack.children["embedder"].kill()
    # A gateway started while the embedder is down has never heard of the model: the store's
    # record of it (name, dimensions, context) is what chunking is resolved against.
    own_stack.children["gateway"].stop()
    own_stack.start_service("gateway")
    try:
        for name, text in TEXTS.items():
            attached = client.post(
                f"/v1/vector_stores/{store_id}/files", json={"text": text, "filename": name}
            )
            assert attached.status_code == 200, attached.text
        uploaded = client.post(
            "/v1/files",
            files={"file": ("tides.txt", b"Spring tides follow the full and the new moon.")},
            data={"purpose": "assistants"},
        ).json()["id"]
        batch = client.post(
            f"/v1/vector_stores/{store_id}/file_batches", json={"file_ids": [uploaded]}
        )
        assert batch.status_code == 200, batch.text
        store = store_until(client, store_id, lambda s: s["file_counts"]["completed"] == 4)
        assert store["vectors_pending"] == 4 and store["status"] == "completed"
        assert store["chunk_count"] == 4
        files = client.get(f"/v1/vector_stores/{store_id}/files").json()["data"]
        assert all(item["vectors_pending"] and item["status"] == "completed" for item in files)
        assert files[0]["chunking_strategy"]["static"]["max_chunk_size_tokens"] == 256

        found = client.post(
            f"/v1/vector_stores/{store_id}/search", json={"query": "who records passing ships?"}
        )
        page = found.json()
        assert (page["degraded"], page["mode"]) == (True, "lexical")
        assert page["data"][0]["filename"] == "keeper.txt"
    finally:
        own_stack.start_service("embedder")
    wait_ready(client)
    store = store_until(client, store_id, lambda s: s["vectors_pending"] == 0)
    assert store["file_counts"]["completed"] == 4 and store["chunk_count"] == 4
    files = client.get(f"/v1/vector_stores/{store_id}/files").json()["data"]
    assert not any(item["vectors_pending"] for item in files)
    found = client.post(
        f"/v1/vector_stores/{store_id}/search",
        json={"query": "which shop sells bread in the morning?", "mode": "vector"},
    ).json()
    assert not found.get("degraded") and found["data"][0]["filename"] == "bakery.txt"
    check_invariants(Path(own_stack.env["RAGD_DB_PATH"]))


@pytest.fixture(scope="module")
def no_vec_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A store whose sqlite-vec library is missing: a real failure to load it."""
    yield from started_stack(
        tmp_path_factory.mktemp("no-vec"),
        RAGD_INGEST_POLL_SECONDS="0.2",
        RAGD_SQLITE_VEC_PATH="/nonexistent/vec0.so",
    )


def test_a_store_without_sqlite_vec_serves_lexically_then_fills_vectors(
    no_vec_stack: Stack,
) -> None:
    stack = no_vec_stack
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
        ready = client.get("/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["vector_index"] == "unavailable"
        assert "/nonexistent/vec0.so" in ready.json()["vector_index_error"]
        store_id = client.post("/v1/vector_stores", json={"name": "text only"}).json()["id"]
        spare = client.post("/v1/vector_stores", json={"name": "spare"}).json()["id"]
        for name, text in TEXTS.items():
            attached = client.post(
                f"/v1/vector_stores/{store_id}/files", json={"text": text, "filename": name}
            )
            assert attached.status_code == 200, attached.text
        store = store_until(client, store_id, lambda s: s["file_counts"]["completed"] == 3)
        assert store["vectors_pending"] == 3
        found = client.post(
            f"/v1/vector_stores/{store_id}/search", json={"query": "satellite orbit"}
        )
        assert found.headers["X-Ragd-Degraded"] == "vector-index-unavailable"
        assert (found.json()["mode"], found.json()["degraded"]) == ("lexical", True)
        assert found.json()["data"][0]["filename"] == "orbit.txt"
        # A store never given vectors can go; a file detached keeps nothing behind.
        assert client.delete(f"/v1/vector_stores/{spare}").status_code == 200
        files = client.get(f"/v1/vector_stores/{store_id}/files").json()["data"]
        [gone] = [
            item["id"]
            for item in files
            if client.get(f"/v1/files/{item['id']}").json()["filename"] == "orbit.txt"
        ]
        assert client.delete(f"/v1/vector_stores/{store_id}/files/{gone}").status_code == 200

        # sqlite-vec is back: the store makes the missing vector tables and the pending
        # vectors are filled in by the same jobs.
        stack.children["store"].stop()
        stack.env.pop("RAGD_SQLITE_VEC_PATH")
        stack.start_service("store")
        wait_ready(client)
        assert client.get("/ready").json()["vector_index"] == "available"
        store = store_until(client, store_id, lambda s: s["vectors_pending"] == 0)
        assert store["file_counts"]["completed"] == 2
        found = client.post(
            f"/v1/vector_stores/{store_id}/search",
            json={"query": "where is bread sold at dawn?", "mode": "vector"},
        )
        assert "X-Ragd-Degraded" not in found.headers
        hits = found.json()["data"]
        assert [hit["filename"] for hit in hits] == ["bakery.txt", "keeper.txt"]
    check_invariants(Path(stack.env["RAGD_DB_PATH"]))
