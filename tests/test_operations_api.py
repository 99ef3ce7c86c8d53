"""Operations through the real stack: admin routes behind the API key, backup, vacuum, stats,
audit log, the embedding cache on a re-ingest, and model identity errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from services.launcher import Stack
from services.pb import embedder_pb2, embedder_pb2_grpc, store_pb2, store_pb2_grpc
from tests.harness import document, ok, started_stack
from tests.store_fixtures import check_invariants, open_readonly

KEY = "ops-key-456"
MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("ops"), RAGD_API_KEYS=KEY)


@pytest.fixture(scope="module")
def api(own_stack: Stack) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=own_stack.gateway_url, headers=headers, timeout=60) as http:
        yield http


def upload(api: httpx.Client, name: str, text: str) -> str:
    reply = api.post(
        "/v1/files", files={"file": (name, text.encode())}, data={"purpose": "assistants"}
    )
    file_id: str = ok(reply)["id"]
    return file_id


def wait_completed(api: httpx.Client, store_id: str, files: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counts = ok(api.get(f"/v1/vector_stores/{store_id}"))["file_counts"]
        assert counts["failed"] == 0, counts
        if counts["completed"] == files:
            return
        assert time.monotonic() < deadline, counts
        time.sleep(0.1)


def embed_requests(stack: Stack) -> int:
    with grpc.insecure_channel(stack.embedders["embedder"]) as channel:
        reply = embedder_pb2_grpc.EmbedderStub(channel).Stats(embedder_pb2.StatsRequest())
        return int(reply.requests)


@pytest.fixture(scope="module")
def corpus(api: httpx.Client) -> list[str]:
    return [upload(api, f"doc{i}.txt", document(i)) for i in range(3)]


@pytest.fixture(scope="module")
def indexed(api: httpx.Client, corpus: list[str]) -> str:
    store_id: str = ok(api.post("/v1/vector_stores", json={"name": "first", "file_ids": corpus}))[
        "id"
    ]
    wait_completed(api, store_id, len(corpus))
    return store_id


def test_admin_routes_need_the_key(own_stack: Stack, api: httpx.Client) -> None:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=30) as anonymous:
        for method, path in [
            ("GET", "/admin/stats"),
            ("GET", "/admin/audit"),
            ("POST", "/admin/backup"),
            ("POST", "/admin/vacuum"),
        ]:
            reply = anonymous.request(method, path)
            assert reply.status_code == 401, (path, reply.text)
            assert reply.json()["error"]["code"] == "invalid_api_key"
        wrong = anonymous.get("/admin/stats", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
    assert ok(api.get("/admin/stats"))["object"] == "ragd.stats"


def test_a_reingest_into_a_new_store_never_calls_the_embedder(
    own_stack: Stack, api: httpx.Client, corpus: list[str], indexed: str
) -> None:
    before = ok(api.get("/admin/stats"))["embedding_cache"]
    first = ok(api.get(f"/v1/vector_stores/{indexed}"))
    assert before["enabled"] and before["entries"] >= first["chunk_count"] > len(corpus)
    calls = embed_requests(own_stack)
    again = ok(api.post("/v1/vector_stores", json={"name": "again", "file_ids": corpus}))["id"]
    wait_completed(api, again, len(corpus))
    assert embed_requests(own_stack) == calls, "the re-ingest called the embedder"
    second = ok(api.get(f"/v1/vector_stores/{again}"))
    assert (second["chunk_count"], second["usage_bytes"]) == (
        first["chunk_count"],
        first["usage_bytes"],
    )
    after = ok(api.get("/admin/stats"))["embedding_cache"]
    assert after["hits"] - before["hits"] >= second["chunk_count"]
    assert after["entries"] == before["entries"] and after["hit_rate"] > 0
    # The cached vectors are the embedder's: both stores rank a query the same way.
    query = {"query": "the 1th record describes item 8", "max_num_results": 5}
    ranked = [
        [(hit["filename"], hit["score"]) for hit in search(api, store, query)]
        for store in (indexed, again)
    ]
    assert ranked[0] == ranked[1] and len(ranked[0]) == 5


def search(api: httpx.Client, store_id: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = ok(api.post(f"/v1/vector_stores/{store_id}/search", json=body))[
        "data"
    ]
    return hits


def test_searches_and_ingests_are_audited(api: httpx.Client, indexed: str) -> None:
    def latest_search() -> dict[str, Any] | None:
        entries = ok(api.get(f"/admin/audit?operation=search&store={indexed}&limit=1"))["data"]
        return entries[0] if entries else None

    earlier = latest_search()
    assert len(search(api, indexed, {"query": "item", "max_num_results": 3})) == 3
    deadline = time.monotonic() + 10
    # The gateway sends audit entries in the background, about once a second; an earlier
    # search of this store (k=5) may still arrive after `earlier` was read.
    while (latest := latest_search()) is None or latest == earlier or latest["k"] != 3:
        assert time.monotonic() < deadline, "the search was not audited"
        time.sleep(0.2)
    assert (latest["vector_store_id"], latest["k"], latest["result_count"]) == (indexed, 3, 3)
    assert latest["degraded"] is False and latest["latency_ms"] > 0 and latest["at"] > 1.7e9
    ingests = ok(api.get(f"/admin/audit?operation=ingest&store={indexed}"))["data"]
    assert len(ingests) == 3 and all("completed" in e["detail"] for e in ingests), ingests
    assert all(e["result_count"] > 1 for e in ingests)
    page = ok(api.get("/admin/audit?limit=1"))
    assert len(page["data"]) == 1 and page["has_more"]
    older = ok(api.get(f"/admin/audit?limit=1&before={page['last_id']}"))["data"]
    assert older[0]["id"] < page["last_id"]
    bad = api.get("/admin/audit?operation=remove")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "operation"


def test_stats_cover_every_store_and_add_up(api: httpx.Client, indexed: str) -> None:
    stats = ok(api.get("/admin/stats"))
    totals, stores = stats["global"], stats["vector_stores"]
    assert totals["vector_stores"] == len(stores) >= 1
    assert totals["chunks"] == sum(s["chunks"] for s in stores) == totals["vectors"]
    assert totals["usage_bytes"] == sum(s["usage_bytes"] for s in stores)
    (mine,) = [s for s in stores if s["id"] == indexed]
    public = ok(api.get(f"/v1/vector_stores/{indexed}"))
    assert (mine["chunks"], mine["usage_bytes"]) == (public["chunk_count"], public["usage_bytes"])
    assert mine["embedding_model"] == {"name": MODEL, "dimensions": 384}
    assert totals["schema_version"] >= 4 and totals["db_bytes"] > 0


def test_backup_route_writes_a_consistent_copy_inside_the_backup_dir(
    own_stack: Stack, api: httpx.Client, indexed: str
) -> None:
    backups = Path(own_stack.env["RAGD_DB_PATH"]).parent / "backups"
    made = ok(api.post("/admin/backup", json={"path": "api/first.db"}))
    path = Path(made["path"])
    assert path == (backups / "api" / "first.db").resolve()
    assert made["bytes"] == path.stat().st_size > 0 and made["seconds"] >= 0
    conn = open_readonly(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
    check_invariants(path)
    default = ok(api.post("/admin/backup"))
    assert Path(default["path"]).parent == backups.resolve()
    taken = api.post("/admin/backup", json={"path": "api/first.db"})
    assert taken.status_code == 409, taken.text
    for bad in ("../escape.db", "/tmp/absolute.db"):
        refused = api.post("/admin/backup", json={"path": bad})
        assert refused.status_code == 400, refused.text
        assert "backup directory" in refused.json()["error"]["message"]
    assert not (backups.parent / "escape.db").exists()


def test_vacuum_route_gives_back_a_deleted_stores_space(api: httpx.Client) -> None:
    doomed = ok(api.post("/v1/vector_stores", json={"name": "doomed"}))["id"]
    attach = {"text": document(7), "filename": "d.txt"}
    ok(api.post(f"/v1/vector_stores/{doomed}/files", json=attach))
    wait_completed(api, doomed, 1)
    ok(api.delete(f"/v1/vector_stores/{doomed}"))
    result = ok(api.post("/admin/vacuum"))
    # A vec0 table allocates 1024 vectors (1.5 MB at 384 dims) at a time.
    assert result["bytes_before"] - result["bytes_after"] > 1_000_000, result
    assert set(result) >= {"bytes_before", "bytes_after", "seconds", "compacted_vector_stores"}


def test_a_store_of_another_model_is_a_400_naming_both(
    own_stack: Stack, api: httpx.Client, corpus: list[str]
) -> None:
    with grpc.insecure_channel(own_stack.store_target) as channel:
        other = store_pb2_grpc.StoreStub(channel).CreateVectorStore(
            store_pb2.CreateVectorStoreRequest(name="other", model="other-model", dimensions=384)
        )
    files_before = len(ok(api.get("/v1/files?limit=100"))["data"])
    attempts = [
        api.post(f"/v1/vector_stores/{other.id}/search", json={"query": "anything"}),
        api.post(f"/v1/vector_stores/{other.id}/files", json={"file_id": corpus[0]}),
        api.post(f"/v1/vector_stores/{other.id}/file_batches", json={"file_ids": corpus}),
        api.post(
            f"/v1/vector_stores/{other.id}/files", json={"text": "new text", "filename": "n.txt"}
        ),
    ]
    for reply in attempts:
        assert reply.status_code == 400, reply.text
        message = reply.json()["error"]["message"]
        assert "other-model (384 dims)" in message and MODEL in message, message
        assert "create" in message, message
    # The refused upload left no file behind, and the store stayed empty.
    assert len(ok(api.get("/v1/files?limit=100"))["data"]) == files_before
    assert ok(api.get(f"/v1/vector_stores/{other.id}"))["file_counts"]["total"] == 0
    # Readiness names the stores no embedder here can serve; the stack stays ready.
    ready = api.get("/ready")
    assert ready.status_code == 200
    [unserved] = ready.json()["unserved_models"]
    assert unserved == {
        "model": "other-model",
        "dimensions": 384,
        "vector_stores": 1,
        "sample_ids": [other.id],
    }
