"""Batches and validation on a gateway without ingest workers, so nothing moves on its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.launcher import Stack
from tests.harness import started_stack


@pytest.fixture(scope="module")
def idle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    stack: Stack
    for stack in started_stack(tmp_path_factory.mktemp("idle"), RAGD_INGEST_WORKERS="0"):
        with httpx.Client(base_url=stack.gateway_url, timeout=30) as client:
            yield client


def upload(client: httpx.Client, name: str, text: str) -> str:
    reply = client.post(
        "/v1/files", files={"file": (name, text.encode())}, data={"purpose": "assistants"}
    )
    assert reply.status_code == 200, reply.text
    file_id: str = reply.json()["id"]
    return file_id


def test_cancel_stops_pending_files(idle: httpx.Client) -> None:
    store = idle.post("/v1/vector_stores", json={"name": "cancel"}).json()["id"]
    ids = [upload(idle, f"c{i}.txt", f"cancel me {i}") for i in range(4)]
    batch = idle.post(f"/v1/vector_stores/{store}/file_batches", json={"file_ids": ids}).json()
    assert batch["status"] == "in_progress"
    assert batch["file_counts"]["in_progress"] == 4
    cancelled = idle.post(f"/v1/vector_stores/{store}/file_batches/{batch['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert cancelled["file_counts"]["cancelled"] == 4
    files = idle.get(f"/v1/vector_stores/{store}/file_batches/{batch['id']}/files").json()
    assert {f["status"] for f in files["data"]} == {"cancelled"}
    listed = idle.get(f"/v1/vector_stores/{store}/files", params={"filter": "cancelled"}).json()
    assert len(listed["data"]) == 4


def test_identical_content_in_two_files_is_two_files(idle: httpx.Client) -> None:
    store = idle.post("/v1/vector_stores", json={"name": "dedup"}).json()["id"]
    first = upload(idle, "a.txt", "the very same bytes")
    second = upload(idle, "b.txt", "the very same bytes")
    one = idle.post(f"/v1/vector_stores/{store}/files", json={"file_id": first}).json()
    two = idle.post(f"/v1/vector_stores/{store}/files", json={"file_id": second}).json()
    # Each attach answers for the file it named (the SDK polls that id); the same file again
    # answers as it is.
    assert (one["id"], two["id"]) == (first, second)
    again = idle.post(f"/v1/vector_stores/{store}/files", json={"file_id": second}).json()
    assert again["id"] == second
    counts = idle.get(f"/v1/vector_stores/{store}").json()["file_counts"]
    assert counts["total"] == 2


def test_create_with_file_ids_attaches_them(idle: httpx.Client) -> None:
    ids = [upload(idle, f"f{i}.txt", f"file ids {i}") for i in range(2)]
    store = idle.post("/v1/vector_stores", json={"name": "ids", "file_ids": ids}).json()
    assert store["file_counts"]["in_progress"] == 2
    assert store["status"] == "in_progress"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/vector_stores", {"metadata": "nope"}, "metadata"),
        ("/v1/vector_stores", {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ("/v1/vector_stores", {"name": 5}, "name"),
        (
            "/v1/vector_stores",
            {"expires_after": {"anchor": "created_at", "days": 1}},
            "expires_after",
        ),
        ("/v1/vector_stores", {"file_ids": "file-1"}, "file_ids"),
        ("{vs}/files", {"file_id": 7}, "file_id"),
        (
            "{vs}/files",
            {"file_id": "file-x", "attributes": {f"k{i}": 1 for i in range(17)}},
            "attributes",
        ),
        ("{vs}/files", {"file_id": "file-x", "attributes": {"k": [1]}}, "attributes"),
        (
            "{vs}/files",
            {
                "file_id": "file-x",
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 150},
                },
            },
            "chunking_strategy",
        ),
        (
            "{vs}/files",
            {"file_id": "file-x", "chunking_strategy": {"type": "fancy"}},
            "chunking_strategy",
        ),
        ("{vs}/file_batches", {"file_ids": []}, "file_ids"),
        ("{vs}/file_batches", {"file_ids": ["a"], "files": []}, "file_ids"),
        ("{vs}/search", {"query": "x", "filters": {"type": "eq", "value": 1}}, "filters"),
        ("{vs}/search", {"query": "x", "filters": {"type": "and", "filters": []}}, "filters"),
        (
            "{vs}/search",
            {"query": "x", "filters": {"type": "gt", "key": "a", "value": True}},
            "filters",
        ),
        (
            "{vs}/search",
            {"query": "x", "filters": {"type": "in", "key": "a", "value": 3}},
            "filters",
        ),
        ("{vs}/search", {"query": "x", "ranking_options": {"ranker": "magic"}}, "ranking_options"),
    ],
)
def test_wrong_types_are_400_with_param(
    idle: httpx.Client, path: str, body: dict[str, Any], param: str
) -> None:
    store = idle.post("/v1/vector_stores", json={"name": "validation"}).json()["id"]
    response = idle.post(path.format(vs=f"/v1/vector_stores/{store}"), json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_unknown_ids_are_404(idle: httpx.Client) -> None:
    store = idle.post("/v1/vector_stores", json={"name": "missing"}).json()["id"]
    for method, path in [
        ("GET", "/v1/files/file-nope"),
        ("DELETE", "/v1/files/file-nope"),
        ("GET", "/v1/files/file-nope/content"),
        ("GET", f"/v1/vector_stores/{store}/files/file-nope"),
        ("DELETE", f"/v1/vector_stores/{store}/files/file-nope"),
        ("GET", f"/v1/vector_stores/{store}/file_batches/vsfb_nope"),
        ("POST", "/v1/vector_stores/vs_nope"),
    ]:
        response = idle.request(method, path, json={} if method == "POST" else None)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["message"]
    attach = idle.post(f"/v1/vector_stores/{store}/files", json={"file_id": "file-nope"})
    assert attach.status_code == 404
