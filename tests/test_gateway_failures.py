"""A stack of its own for tests that stop services or need an API key."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from services.launcher import Stack
from tests.harness import started_stack, wait_ready

KEY = "test-key-123"
UPLOAD_LIMIT = 100_000


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("own"),
        RAGD_API_KEYS=f"other,{KEY}",
        RAGD_MAX_UPLOAD_BYTES=str(UPLOAD_LIMIT),
    )


@pytest.fixture(scope="module")
def authed(own_stack: Stack) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=own_stack.gateway_url, headers=headers, timeout=30) as http:
        yield http


def test_v1_routes_need_the_key(own_stack: Stack, authed: httpx.Client) -> None:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=30) as anonymous:
        missing = anonymous.post("/v1/embeddings", json={"input": "x"})
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "invalid_api_key"
        wrong = anonymous.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert anonymous.get("/health").status_code == 200
        assert anonymous.get("/ready").status_code == 200
    assert authed.post("/v1/embeddings", json={"input": "x"}).status_code == 200


def test_embedder_down_gives_503_then_recovers(own_stack: Stack, authed: httpx.Client) -> None:
    own_stack.children["embedder"].kill()
    try:
        response = authed.post("/v1/embeddings", json={"input": "hello"})
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["type"] == "server_error"
        assert "embedder" in error["message"]
        ready = authed.get("/ready")
        assert ready.status_code == 200 and ready.json()["status"] == "degraded"
        assert ready.json()["embedder"] == "UNAVAILABLE"
        assert ready.json()["store"] == "SERVING"
        assert authed.get("/ready?require=embedder").status_code == 503
    finally:
        own_stack.start_service("embedder")
    wait_ready(authed)
    assert authed.post("/v1/embeddings", json={"input": "hello"}).status_code == 200


def test_store_down_gives_503(own_stack: Stack, authed: httpx.Client) -> None:
    own_stack.children["store"].kill()
    try:
        response = authed.post("/v1/vector_stores", json={"name": "x"})
        assert response.status_code == 503, response.text
        assert "store" in response.json()["error"]["message"]
    finally:
        own_stack.start_service("store")
    wait_ready(authed)
    assert authed.post("/v1/vector_stores", json={"name": "x"}).status_code == 200


def test_uploads_over_the_limit_are_413(authed: httpx.Client) -> None:
    big = b"x" * (UPLOAD_LIMIT + 1)
    for path, data in (
        ("/v1/files", {"purpose": "assistants"}),
        ("/v1/vector_stores/vs_x/files", {}),
    ):
        response = authed.post(path, files={"file": ("big.txt", big)}, data=data)
        assert response.status_code == 413, response.text
        assert str(UPLOAD_LIMIT) in response.json()["error"]["message"]
    store = authed.post("/v1/vector_stores", json={"name": "limits"}).json()["id"]
    text = {"text": "y" * (UPLOAD_LIMIT + 1), "filename": "big.txt"}
    assert authed.post(f"/v1/vector_stores/{store}/files", json=text).status_code == 413
