"""Two real embedding models on one stack (MiniLM, and SmolLM2-135M-Instruct mean-pooled at 576
dims), vector stores of each, and a store re-indexed from one to the other online, through a
SIGKILL of the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.launcher import Stack
from services.local_chat import model_path as smollm2_path
from services.store.db import open_database
from tests.harness import stack_env, wait_ready
from tests.store_fixtures import check_invariants

MINILM = "all-MiniLM-L6-v2"
SMOL = "smollm2-135m"
FILES = 200


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path]]:
    tmp = tmp_path_factory.mktemp("models")
    env = stack_env(tmp, RAGD_EMBEDDER_THREADS="1", RAGD_EMBEDDER_INTERACTIVE_THREADS="0")
    stack = Stack(
        env,
        log_dir=tmp / "logs",
        replicas={"embedder-smol": "127.0.0.1:0"},
        child_env={
            "embedder-smol": {
                "RAGD_MODEL_PATH": str(smollm2_path()),
                "RAGD_MODEL_NAME": SMOL,
                "RAGD_MODEL_POOLING": "mean",
                "RAGD_MODEL_MAX_TOKENS": "512",
            }
        },
    )
    try:
        for name in ("store", "embedder", "embedder-smol"):
            stack.start_service(name)
        targets = stack.embedders
        stack.child_env["gateway"] = {
            "RAGD_EMBEDDERS": f"{MINILM}={targets['embedder']} {SMOL}={targets['embedder-smol']}",
            "RAGD_INGEST_POLL_SECONDS": "0.2",
        }
        stack.start_service("gateway")
        yield stack, tmp / "ragd.db"
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def api(two_models: tuple[Stack, Path]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=two_models[0].gateway_url, timeout=60) as client:
        yield client


def wait_files(api: httpx.Client, store_id: str, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counts = api.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]
        if counts["completed"] + counts["failed"] >= count:
            assert counts["failed"] == 0, counts
            return
        assert time.monotonic() < deadline, counts
        time.sleep(0.3)


def test_models_are_listed_and_embeddings_route_by_model(api: httpx.Client) -> None:
    listed = [model["id"] for model in api.get("/v1/models").json()["data"]]
    assert listed == [MINILM, SMOL]
    small = api.post("/v1/embeddings", json={"model": MINILM, "input": "a cat"}).json()
    large = api.post("/v1/embeddings", json={"model": "SmolLM2-135M", "input": "a cat"}).json()
    assert len(small["data"][0]["embedding"]) == 384
    assert (large["model"], len(large["data"][0]["embedding"])) == (SMOL, 576)
    unknown = api.post("/v1/embeddings", json={"model": "bge-small-en-v1.5", "input": "x"})
    assert unknown.status_code == 404
    assert (
        MINILM in unknown.json()["error"]["message"] and SMOL in unknown.json()["error"]["message"]
    )
    refused = api.post("/v1/vector_stores", json={"embedding_model": "bge-small-en-v1.5"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "embedding_model"
    assert SMOL in refused.json()["error"]["message"]


def test_a_store_of_each_model_ingests_and_searches_with_its_own(api: httpx.Client) -> None:
    ids = {}
    for model in (MINILM, SMOL):
        store = api.post("/v1/vector_stores", json={"name": model, "embedding_model": model})
        ids[model] = store.json()["id"]
        text = "The lighthouse keeper logs the ships that pass the northern cape."
        attached = api.post(
            f"/v1/vector_stores/{ids[model]}/files", json={"text": text, "filename": "keeper.txt"}
        )
        assert attached.status_code == 200, attached.text
    for model, store_id in ids.items():
        wait_files(api, store_id, 1)
        shown = api.get(f"/v1/vector_stores/{store_id}").json()["embedding_model"]
        assert shown["dimensions"] == {MINILM: 384, SMOL: 576}[model]
        found = api.post(
            f"/v1/vector_stores/{store_id}/search",
            json={"query": "who records passing ships?", "mode": "vector"},
        ).json()
        assert not found.get("degraded") and found["data"][0]["filename"] == "keeper.txt"


def record(n: int) -> str:
    # Short: SmolLM2 costs ~6 s a 350-token text on one core here.
    return f"Record {n}: item {n * 7} is kept in bay {n % 13} of the northern warehouse."


def _search_loop(
    api_url: str, store_id: str, stop: threading.Event, outcomes: list[tuple[float, Any]]
) -> None:
    with httpx.Client(base_url=api_url, timeout=30) as client:
        while not stop.is_set():
            reply = client.post(
                f"/v1/vector_stores/{store_id}/search",
                json={"query": "which bay holds item 70?", "mode": "vector", "max_num_results": 5},
            )
            body = reply.json()
            outcomes.append((time.monotonic(), (reply.status_code, body.get("degraded"))))
            time.sleep(0.05)


def test_reindex_switches_a_store_to_the_other_model_through_a_store_kill(
    two_models: tuple[Stack, Path], api: httpx.Client
) -> None:
    stack, db_path = two_models
    store_id = api.post(
        "/v1/vector_stores", json={"name": "big", "embedding_model": MINILM}
    ).json()["id"]
    for n in range(FILES):
        reply = api.post(
            f"/v1/vector_stores/{store_id}/files",
            json={"text": record(n), "filename": f"doc{n}.txt", "attributes": {"n": n}},
        )
        assert reply.status_code == 200, reply.text
    wait_files(api, store_id, FILES)
    chunks_before = api.get(f"/v1/vector_stores/{store_id}").json()["chunk_count"]

    unknown = api.post(f"/v1/vector_stores/{store_id}/reindex", json={"embedding_model": "e5"})
    assert unknown.status_code == 400
    started = api.post(f"/v1/vector_stores/{store_id}/reindex", json={"embedding_model": SMOL})
    assert started.status_code == 200, started.text
    assert started.json()["reindex"]["status"] == "in_progress"
    again = api.post(f"/v1/vector_stores/{store_id}/reindex", json={"embedding_model": SMOL})
    assert again.status_code == 409

    stop, outcomes = threading.Event(), list[tuple[float, Any]]()
    searcher = threading.Thread(
        target=_search_loop, args=(stack.gateway_url, store_id, stop, outcomes), daemon=True
    )
    searcher.start()
    try:
        # A kill once part of the new index is written.
        deadline = time.monotonic() + 300
        while (
            api.get(f"/v1/vector_stores/{store_id}").json()["reindex"]["file_counts"]["completed"]
            < FILES // 4
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        killed_at = time.monotonic()
        stack.children["store"].kill()
        stack.start_service("store")
        wait_ready(api)
        back_at = time.monotonic()
        while (shown := api.get(f"/v1/vector_stores/{store_id}").json())["reindex"][
            "status"
        ] == "in_progress":
            assert time.monotonic() < deadline, shown["reindex"]
            time.sleep(0.3)
        time.sleep(0.5)
    finally:
        stop.set()
        searcher.join()
    assert shown["reindex"]["status"] == "completed", shown["reindex"]
    assert shown["embedding_model"] == {"name": SMOL, "dimensions": 576}
    assert shown["file_counts"]["completed"] == FILES
    # Searches answered throughout (vector mode, never degraded) except while the store was
    # down; each was checked by the store against the index it searched (no mixed models).
    up = [outcome for at, outcome in outcomes if not killed_at <= at <= back_at + 1]
    assert len(up) > 20 and all(outcome == (200, False) for outcome in up), up[:5]
    found = api.post(
        f"/v1/vector_stores/{store_id}/search",
        json={
            "query": "record of item 70",
            "mode": "vector",
            "filters": {"type": "eq", "key": "n", "value": 10},
        },
    ).json()
    assert found["data"] and found["data"][0]["attributes"]["n"] == 10
    # Every chunk has exactly one vector, of the new model; nothing of the old index is left.
    check_invariants(db_path)
    conn = open_database(db_path)
    try:
        rows = conn.execute(
            "SELECT id, model, dimensions, chunk_count FROM vector_stores WHERE public_id = ?",
            (store_id,),
        ).fetchall()
        [(key, model, dims, chunks)] = rows
        assert (model, dims) == (SMOL, 576) and chunks >= chunks_before // 2
        assert conn.execute(f"SELECT count(*) FROM vec_{key}").fetchall() == [(chunks,)]
        shadows = "SELECT count(*) FROM vector_stores WHERE shadow_of IS NOT NULL"
        assert conn.execute(shadows).fetchall() == [(0,)]
    finally:
        conn.close()
