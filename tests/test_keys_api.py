"""Scoped API keys through the real stack: made by an admin (the bootstrap key), limited to a
scope, to vector stores (others answer 404 like unknown ids) and to requests per minute (429
with Retry-After in OpenAI's shape), counted, revoked; `ragd keys` drives it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from services.cli.main import cli
from services.client.errors import ClientError, Unauthenticated
from services.client.ingest import Document, IngestClient, Progress, State, Summary
from services.launcher import Stack
from tests.harness import document, ok, started_stack

ADMIN = "bootstrap-admin-key-1"


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("keys"), RAGD_API_KEYS=ADMIN)


def client(stack: Stack, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=stack.gateway_url, headers=headers, timeout=60)


@pytest.fixture(scope="module")
def stores(own_stack: Stack) -> tuple[str, str]:
    """Two vector stores with a file each."""
    made: list[str] = []
    with client(own_stack, ADMIN) as admin:
        for name in ("mine", "theirs"):
            file_id = ok(
                admin.post(
                    "/v1/files",
                    files={"file": (f"{name}.txt", document(len(made)).encode())},
                    data={"purpose": "assistants"},
                )
            )["id"]
            store_id = ok(
                admin.post("/v1/vector_stores", json={"name": name, "file_ids": [file_id]})
            )["id"]
            made.append(store_id)
        deadline = time.monotonic() + 60
        for store_id in made:
            while ok(admin.get(f"/v1/vector_stores/{store_id}"))["file_counts"]["completed"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    return made[0], made[1]


def test_a_read_key_limited_to_one_store(own_stack: Stack, stores: tuple[str, str]) -> None:
    mine, theirs = stores
    runner = CliRunner()
    base = ["--url", own_stack.gateway_url, "--api-key", ADMIN, "keys"]
    made = runner.invoke(
        cli, [*base, "create", "reader", "--scope", "read", "--stores", "mine", "--rpm", "5"]
    )
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("rk-")
    with client(own_stack, secret) as reader:
        hits = ok(reader.post(f"/v1/vector_stores/{mine}/search", json={"query": "record"}))
        assert hits["data"]
        listed = ok(reader.get("/v1/vector_stores"))["data"]
        assert [s["id"] for s in listed] == [mine]
        # Another store is as unknown as an id that never existed.
        hidden = reader.get(f"/v1/vector_stores/{theirs}")
        assert hidden.status_code == 404
        with client(own_stack, ADMIN) as admin:
            unknown = admin.get("/v1/vector_stores/vs_000000000000000000000000")
        assert hidden.json() == {
            "error": {**unknown.json()["error"], "message": f"no vector store with id {theirs!r}"}
        }
        assert unknown.json()["error"]["message"] == (
            "no vector store with id 'vs_000000000000000000000000'"
        )
        assert (
            reader.post(f"/v1/vector_stores/{theirs}/search", json={"query": "x"}).status_code
            == 404
        )
        # Reading is all it may do.
        written = reader.post("/v1/vector_stores", json={"name": "new"})
        assert written.status_code == 403
        assert written.json()["error"]["type"] == "permission_error"
        assert reader.get("/admin/stats").status_code == 403
        # Five requests a minute: two made, three more, then 429 (refusals do not count).
        for _ in range(5):
            reply = reader.get(f"/v1/vector_stores/{mine}")
            if reply.status_code == 429:
                break
        assert reply.status_code == 429
        assert reply.json()["error"] == {
            "message": reply.json()["error"]["message"],
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        assert 1 <= int(reply.headers["Retry-After"]) <= 61
    # Usage reaches the store within about a second.
    deadline = time.monotonic() + 10
    while True:
        listed = runner.invoke(cli, [*base, "usage", "--json"])
        usage = json.loads(listed.output)["reader"]
        if usage["requests"] >= 5:
            break
        assert time.monotonic() < deadline, usage
        time.sleep(0.2)
    # Only requests let through count (the refused search of the other store does not).
    assert usage["searches"] == 1 and usage["requests"] == 5
    # The audit log names the key on what it did, and on what it was refused.
    audited = json.loads(
        runner.invoke(cli, [*base[:-1], "audit", "--key", "reader", "--json"]).output
    )
    codes = {entry["error_code"] for entry in audited}
    assert {None, "not_found", "permission_denied", "rate_limit_exceeded"} <= codes
    # The other store's refused read and search: a search is still a search though its
    # route never ran to say so.
    refused = [e for e in audited if e["error_code"] == "not_found"]
    assert sorted(e["operation"] for e in refused) == ["read", "search"], refused
    table = runner.invoke(cli, [*base, "list"], env={"COLUMNS": "200"})
    assert "reader" in table.output and mine in table.output
    revoked = runner.invoke(cli, [*base, "revoke", "reader"])
    assert revoked.exit_code == 0, revoked.output
    with client(own_stack, secret) as reader:
        assert reader.get(f"/v1/vector_stores/{mine}").status_code == 401


def test_a_write_key_ingests_and_embeds_but_administers_nothing(
    own_stack: Stack, stores: tuple[str, str]
) -> None:
    with client(own_stack, ADMIN) as admin:
        made = ok(admin.post("/admin/keys", json={"name": "writer", "scope": "write"}))
    assert made["key"].startswith("rk-") and made["scope"] == "write"
    with client(own_stack, made["key"]) as writer:
        store_id = ok(writer.post("/v1/vector_stores", json={"name": "w"}))["id"]
        embedded = ok(writer.post("/v1/embeddings", json={"input": "four words of text"}))
        tokens = embedded["usage"]["prompt_tokens"]
        assert tokens >= 4
        # Query tokens count too, the bytes of the files it stores, and the tokens of the
        # files it ingests (embedded later by a worker).
        ok(writer.post(f"/v1/vector_stores/{stores[0]}/search", json={"query": "four words"}))
        content = document(7).encode()
        file_id = ok(
            writer.post(
                "/v1/files", files={"file": ("w.txt", content)}, data={"purpose": "assistants"}
            )
        )["id"]
        ok(writer.post(f"/v1/vector_stores/{store_id}/files", json={"file_id": file_id}))
        deadline = time.monotonic() + 60
        while ok(writer.get(f"/v1/vector_stores/{store_id}"))["file_counts"]["completed"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert writer.post("/admin/backup", json={}).status_code == 403
        assert writer.get("/metrics").status_code == 403
        assert ok(writer.delete(f"/v1/vector_stores/{store_id}"))["deleted"]
    with client(own_stack, ADMIN) as admin:
        deadline = time.monotonic() + 10
        while True:
            rows = ok(admin.get("/admin/audit", params={"key": "writer"}))["data"]
            spent = {row["operation"]: row["embedded_tokens"] for row in rows}
            (key,) = [k for k in ok(admin.get("/admin/keys"))["data"] if k["name"] == "writer"]
            if sum(spent.values()) == key["usage"]["embedded_tokens"] and "ingest" in spent:
                break
            assert time.monotonic() < deadline, (key, rows)
            time.sleep(0.2)
        assert spent["embeddings"] == tokens and spent["search"] >= 2
        assert spent["ingest"] > 3 * tokens  # the file's chunks, well beyond the short input
        assert key["usage"]["embedded_tokens_today"] == key["usage"]["embedded_tokens"]
        assert key["usage"]["bytes_stored"] == len(content)
        assert "key" not in key
        bad = admin.post("/admin/keys", json={"name": "writer", "scope": "read"})
        assert bad.status_code == 409
        bad = admin.post("/admin/keys", json={"name": "x", "scope": "root"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "scope"
        bad = admin.post(
            "/admin/keys", json={"name": "x", "scope": "read", "vector_stores": ["vs_no"]}
        )
        assert bad.status_code == 404


def test_an_open_stack_closes_once_it_holds_a_key(tmp_path_factory: pytest.TempPathFactory) -> None:
    for stack in started_stack(tmp_path_factory.mktemp("open")):
        with client(stack, None) as anyone:
            assert ok(anyone.get("/v1/vector_stores"))["data"] == []
            made = ok(anyone.post("/admin/keys", json={"name": "first", "scope": "admin"}))
            # From now on this gateway wants a key.
            assert anyone.get("/v1/vector_stores").status_code == 401
            assert anyone.get("/health").status_code == 200
            assert anyone.get("/version").status_code == 200
        with client(stack, made["key"]) as admin:
            ok(admin.get("/v1/vector_stores"))
            ok(admin.delete("/admin/keys/first"))
        # Revoking the last key does not open the API again (RAGD_API_KEYS lets one in).
        time.sleep(5.5)
        with client(stack, None) as anyone:
            assert anyone.get("/v1/vector_stores").status_code == 401
        with client(stack, made["key"]) as revoked:
            assert revoked.get("/v1/vector_stores").status_code == 401


def test_the_grpc_ingest_door_takes_stored_keys_by_scope(
    own_stack: Stack, stores: tuple[str, str]
) -> None:
    mine, theirs = stores
    bodies: dict[str, dict[str, Any]] = {
        "grpc-writer": {"scope": "write"},
        "grpc-reader": {"scope": "read"},
        "grpc-limited": {"scope": "write", "vector_stores": [mine]},
    }
    with client(own_stack, ADMIN) as admin:
        made = {
            name: ok(admin.post("/admin/keys", json={"name": name, **body}))["key"]
            for name, body in bodies.items()
        }
    with IngestClient(own_stack.ingest_target, made["grpc-writer"]) as writer:
        events = list(writer.ingest([Document("g.txt", text="sent over gRPC")], vector_store=mine))
    summary = events[-1]
    assert isinstance(summary, Summary) and summary.completed == 1
    with IngestClient(own_stack.ingest_target, made["grpc-reader"]) as reader:
        assert reader.info().dimensions == 384
        with pytest.raises(ClientError, match=r"PERMISSION_DENIED.*read scope"):
            list(reader.ingest([Document("r.txt", text="no")], vector_store=mine))
    # A key limited to some stores ingests into those; another store is as unknown to it as
    # a store that does not exist.
    mine_doc = Document("l.txt", text="limited but allowed", vector_store=mine)
    theirs_doc = Document("t.txt", text="not for this key", vector_store=theirs)
    with IngestClient(own_stack.ingest_target, made["grpc-limited"]) as limited:
        events = list(limited.ingest([mine_doc, theirs_doc]))
    outcome = {e.ref or e.position: e for e in events if isinstance(e, Progress) and e.final}
    assert outcome[0].state is State.COMPLETED
    assert (outcome[1].state, outcome[1].error_code) == (State.FAILED, "not_found")
    assert f"no vector store has the id or name '{theirs}'" in outcome[1].error_message
    # The bytes it stored are counted (sent to the store about once a second).
    with client(own_stack, ADMIN) as admin:
        deadline = time.monotonic() + 10
        while True:
            names = {k["name"]: k for k in ok(admin.get("/admin/keys"))["data"]}
            if names["grpc-limited"]["usage"]["bytes_stored"]:
                break
            assert time.monotonic() < deadline, names["grpc-limited"]
            time.sleep(0.2)
        assert names["grpc-limited"]["usage"]["bytes_stored"] == len(mine_doc.text or "")
    with (
        IngestClient(own_stack.ingest_target, "rk-not-a-key") as wrong,
        pytest.raises(Unauthenticated, match="invalid API key"),
    ):
        wrong.info()
