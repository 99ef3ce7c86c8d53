"""Tenancy through the real stack, tried as a tenant with a key of their own would: a key
reaches its project's objects only, a key limited to one vector store reaches its files and
its own uploads, conversations and responses, and everything else answers exactly as an
unknown id does; revocations reach every gateway within a second, an open gRPC ingest stream
included; requests without a valid key leave no audit row each."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from services.client.errors import Unauthenticated
from services.client.ingest import Document, IngestClient, Progress, State
from services.launcher import Stack, spawn, wait_http_ok, wait_ports_file
from services.pb import ingest_pb2, ingest_pb2_grpc
from tests.chat_fixtures import CHAT_CONTEXT, chat_upstream
from tests.harness import ok, started_stack

ADMIN = "tenancy-admin-key-1"
SECRET_B = "The bravo vault combination is 7-3-9-1 and only bravo may know it."
TEXT_A = "The alpha garden grows blue tomatoes beside the river."
UNKNOWN = {
    "vector_store": "vs_000000000000000000000000",
    "file": "file-000000000000000000000000",
    "conversation": "conv_" + "0" * 48,
    "response": "resp_" + "0" * 24,
}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with chat_upstream(tmp_path_factory.mktemp("chat-logs")) as url:
        yield url


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("tenancy"),
        RAGD_API_KEYS=ADMIN,
        RAGD_CHAT_BASE_URL=upstream,
        RAGD_CHAT_MODEL="smollm2",
        RAGD_CHAT_CONTEXT_TOKENS=str(CHAT_CONTEXT),
        RAGD_CHAT_MAX_OUTPUT_TOKENS="16",
        RAGD_CHAT_DEFAULT_OUTPUT_TOKENS="16",
    )


def client(stack: Stack, key: str | None, **headers: str) -> httpx.Client:
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Client(base_url=stack.gateway_url, headers=headers, timeout=120)


def wait_completed(http: httpx.Client, store_id: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while ok(http.get(f"/v1/vector_stores/{store_id}"))["file_counts"]["completed"] < count:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def upload(http: httpx.Client, name: str, text: str) -> str:
    return str(
        ok(
            http.post(
                "/v1/files",
                files={"file": (name, text.encode())},
                data={"purpose": "assistants"},
            )
        )["id"]
    )


def make_key(http: httpx.Client, name: str, scope: str, **options: Any) -> str:
    return str(ok(http.post("/admin/keys", json={"name": name, "scope": scope, **options}))["key"])


@pytest.fixture(scope="module")
def world(own_stack: Stack) -> dict[str, Any]:
    """Vector stores alpha and bravo (a file each) and a loose file of the default project; a
    conversation and a response of the admin's; keys limited to alpha (read and write); a
    project team-b with a store and a write key of its own."""
    with client(own_stack, ADMIN) as admin:
        file_a = upload(admin, "alpha.txt", TEXT_A)
        file_b = upload(admin, "bravo.txt", SECRET_B)
        loose = upload(admin, "loose.txt", "a loose file nobody attached")
        alpha = ok(admin.post("/v1/vector_stores", json={"name": "alpha", "file_ids": [file_a]}))
        bravo = ok(admin.post("/v1/vector_stores", json={"name": "bravo", "file_ids": [file_b]}))
        wait_completed(admin, alpha["id"], 1)
        wait_completed(admin, bravo["id"], 1)
        conversation = ok(
            admin.post(
                "/v1/conversations",
                json={"items": [{"role": "user", "content": "admin's private bravo plan"}]},
            )
        )["id"]
        response = ok(
            admin.post(
                "/v1/responses",
                json={
                    "input": "What is the bravo vault combination?",
                    "tools": [{"type": "file_search", "vector_store_ids": [bravo["id"]]}],
                    "max_output_tokens": 16,
                },
            )
        )["id"]
        keys = {
            scope: make_key(admin, f"alpha-{scope}", scope, vector_stores=[alpha["id"]])
            for scope in ("read", "write")
        }
        shared = make_key(
            admin,
            "alpha-support",
            "read",
            vector_stores=[alpha["id"]],
            project_conversations=True,
        )
        team = ok(admin.post("/admin/projects", json={"name": "team-b"}))
        team_key = make_key(admin, "team-b-writer", "write", project="team-b")
    with client(own_stack, team_key) as team_http:
        file_c = upload(team_http, "charlie.txt", "charlie's notes on the team-b roadmap")
        charlie = ok(team_http.post("/v1/vector_stores", json={"name": "alpha"}))
        ok(team_http.post(f"/v1/vector_stores/{charlie['id']}/files", json={"file_id": file_c}))
        wait_completed(team_http, charlie["id"], 1)
    return {
        "alpha": alpha["id"],
        "bravo": bravo["id"],
        "file_a": file_a,
        "file_b": file_b,
        "loose": loose,
        "conversation": conversation,
        "response": response,
        "keys": keys,
        "shared": shared,
        "team": team,
        "team_key": team_key,
        "charlie": charlie["id"],
        "file_c": file_c,
    }


def hidden(response: httpx.Response, kind: str, public_id: str, unknown: httpx.Response) -> None:
    """`response` answers as for an id that does not exist: same status, same error."""
    assert response.status_code == 404, response.text
    assert unknown.status_code == 404, unknown.text
    mine = response.json()["error"]
    never = unknown.json()["error"]
    assert mine["message"].replace(public_id, "ID") == never["message"].replace(UNKNOWN[kind], "ID")
    assert (mine["type"], mine["code"], mine["param"]) == (
        never["type"],
        never["code"],
        never["param"],
    )


@pytest.mark.parametrize("scope", ["read", "write"])
def test_files_of_other_vector_stores_are_out_of_reach(
    own_stack: Stack, world: dict[str, Any], scope: str
) -> None:
    """Hole 1: a key limited to alpha lists, reads, deletes and attaches only the files of
    alpha and its own uploads."""
    file_b = world["file_b"]
    with client(own_stack, world["keys"][scope]) as key:
        listed = {f["id"] for f in ok(key.get("/v1/files"))["data"]}
        assert listed == {world["file_a"]}
        for path in ("/v1/files/{}", "/v1/files/{}/content"):
            hidden(
                key.get(path.format(file_b)),
                "file",
                file_b,
                key.get(path.format(UNKNOWN["file"])),
            )
        found = ok(key.post(f"/v1/vector_stores/{world['alpha']}/search", json={"query": "vault"}))
        assert all(hit["file_id"] == world["file_a"] for hit in found["data"])
        if scope == "read":
            assert key.delete(f"/v1/files/{file_b}").status_code == 403
            return
        hidden(
            key.delete(f"/v1/files/{file_b}"),
            "file",
            file_b,
            key.delete(f"/v1/files/{UNKNOWN['file']}"),
        )
        attach = f"/v1/vector_stores/{world['alpha']}/files"
        for loose in (file_b, world["loose"], world["file_c"]):
            hidden(
                key.post(attach, json={"file_id": loose}),
                "file",
                loose,
                key.post(attach, json={"file_id": UNKNOWN["file"]}),
            )
            batch = f"/v1/vector_stores/{world['alpha']}/file_batches"
            hidden(
                key.post(batch, json={"file_ids": [world["file_a"], loose]}),
                "file",
                loose,
                key.post(batch, json={"file_ids": [world["file_a"], UNKNOWN["file"]]}),
            )
        # Nor named in a new store's file_ids (and no empty store is left behind) ...
        made = key.post("/v1/vector_stores", json={"name": "x", "file_ids": [file_b]})
        assert made.status_code in (403, 404)
        # Its own upload is in reach: listed, attached, searched.
        own = upload(key, "own.txt", "the writer's own note about green peppers")
        assert own in {f["id"] for f in ok(key.get("/v1/files"))["data"]}
        ok(key.post(attach, json={"file_id": own}))
    with client(own_stack, ADMIN) as admin:
        # Nothing of bravo was touched; the admin still sees every file of the project.
        assert ok(admin.get(f"/v1/files/{file_b}"))["id"] == file_b
        listed = {f["id"] for f in ok(admin.get("/v1/files"))["data"]}
        assert {world["file_a"], file_b, world["loose"]} <= listed
        assert world["file_c"] not in listed  # team-b's


@pytest.mark.parametrize("scope", ["read", "write"])
def test_file_search_reaches_only_the_keys_vector_stores(
    own_stack: Stack, world: dict[str, Any], scope: str
) -> None:
    """Hole 2: file_search over bravo with an alpha key is a 404 before anything is searched
    or sent to the model; over alpha it answers from alpha only; the audit names the stores."""
    bravo = world["bravo"]
    turn = {
        "input": "What is the bravo vault combination?",
        "tools": [{"type": "file_search", "vector_store_ids": [bravo]}],
        "include": ["file_search_call.results"],
        "max_output_tokens": 16,
    }
    with client(own_stack, world["keys"][scope]) as key:
        refused = key.post("/v1/responses", json=turn)
        unknown = key.post(
            "/v1/responses",
            json={
                **turn,
                "tools": [{"type": "file_search", "vector_store_ids": [UNKNOWN["vector_store"]]}],
            },
        )
        if scope == "read":
            # Making a response writes: a read key may not, whatever it names.
            assert refused.status_code == unknown.status_code == 403
            return
        hidden(refused, "vector_store", bravo, unknown)
        assert SECRET_B not in refused.text
        both = {
            **turn,
            "tools": [{"type": "file_search", "vector_store_ids": [world["alpha"], bravo]}],
        }
        hidden(key.post("/v1/responses", json=both), "vector_store", bravo, unknown)
        allowed = ok(
            key.post(
                "/v1/responses",
                json={
                    **turn,
                    "tools": [{"type": "file_search", "vector_store_ids": [world["alpha"]]}],
                },
            )
        )
        results = [
            result
            for item in allowed["output"]
            if item["type"] == "file_search_call"
            for result in item["results"] or []
        ]
        assert results and all(r["file_id"] != world["file_b"] for r in results)
        assert SECRET_B not in json.dumps(allowed)
    time.sleep(1.5)  # audit entries reach the store about once a second
    with client(own_stack, ADMIN) as admin:
        entries = ok(admin.get("/admin/audit", params={"key": "alpha-write", "limit": 50}))["data"]
    turns = [e for e in entries if "/v1/responses" in e["detail"]]
    assert {e["vector_store_id"] for e in turns} >= {bravo, world["alpha"]}
    assert all(e["project"] == "proj_default" for e in turns)


@pytest.mark.parametrize("scope", ["read", "write"])
def test_conversations_and_responses_of_others_are_out_of_reach(
    own_stack: Stack, world: dict[str, Any], scope: str
) -> None:
    """Hole 3: a key limited to alpha lists, reads, searches, continues, appends to and
    deletes only the conversations and responses it made."""
    conversation, response = world["conversation"], world["response"]
    conv_unknown, resp_unknown = UNKNOWN["conversation"], UNKNOWN["response"]
    with client(own_stack, world["keys"][scope]) as key:
        assert conversation not in {c["id"] for c in ok(key.get("/v1/conversations"))["data"]}
        found = ok(key.post("/v1/conversations/search", json={"query": "private bravo plan"}))
        assert found["data"] == []
        for path in ("/v1/conversations/{}", "/v1/conversations/{}/items"):
            hidden(
                key.get(path.format(conversation)),
                "conversation",
                conversation,
                key.get(path.format(conv_unknown)),
            )
        search = "/v1/conversations/{}/search"
        hidden(
            key.post(search.format(conversation), json={"query": "plan"}),
            "conversation",
            conversation,
            key.post(search.format(conv_unknown), json={"query": "plan"}),
        )
        for path in ("/v1/responses/{}", "/v1/responses/{}/input_items"):
            hidden(
                key.get(path.format(response)),
                "response",
                response,
                key.get(path.format(resp_unknown)),
            )
        if scope == "read":
            return
        items = {"items": [{"role": "user", "content": "appended by a stranger"}]}
        hidden(
            key.post(f"/v1/conversations/{conversation}/items", json=items),
            "conversation",
            conversation,
            key.post(f"/v1/conversations/{conv_unknown}/items", json=items),
        )
        for field, value, kind, unknown in (
            ("conversation", conversation, "conversation", conv_unknown),
            ("previous_response_id", response, "response", resp_unknown),
        ):
            hidden(
                key.post("/v1/responses", json={"input": "go on", field: value}),
                kind,
                value,
                key.post("/v1/responses", json={"input": "go on", field: unknown}),
            )
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        hidden(
            key.post(
                "/v1/chat/completions", json=chat, headers={"X-Ragd-Conversation": conversation}
            ),
            "conversation",
            conversation,
            key.post(
                "/v1/chat/completions", json=chat, headers={"X-Ragd-Conversation": conv_unknown}
            ),
        )
        for path, kind, value, unknown in (
            ("/v1/conversations/{}", "conversation", conversation, conv_unknown),
            ("/v1/responses/{}", "response", response, resp_unknown),
        ):
            hidden(key.delete(path.format(value)), kind, value, key.delete(path.format(unknown)))
        # Its own conversation is its own.
        mine = ok(key.post("/v1/conversations", json={"items": [{"role": "user", "content": "x"}]}))
        assert mine["id"] in {c["id"] for c in ok(key.get("/v1/conversations"))["data"]}
    if scope == "write":
        with client(own_stack, ADMIN) as admin:
            running = ok(
                admin.post(
                    "/v1/responses",
                    json={"input": "a long job", "background": True, "max_output_tokens": 16},
                )
            )["id"]
        with client(own_stack, world["keys"][scope]) as key:
            # A background response of another key, running or ended, is out of reach too.
            for method, path in (("GET", "/v1/responses/{}"), ("POST", "/v1/responses/{}/cancel")):
                hidden(
                    key.request(method, path.format(running)),
                    "response",
                    running,
                    key.request(method, path.format(resp_unknown)),
                )
    with client(own_stack, world["shared"]) as shared:
        # With project_conversations it reaches the project's, its stores still limited.
        assert ok(shared.get(f"/v1/conversations/{conversation}"))["id"] == conversation
        assert ok(shared.get(f"/v1/responses/{response}"))["id"] == response
    with client(own_stack, ADMIN) as admin:
        assert ok(admin.get(f"/v1/conversations/{conversation}"))["id"] == conversation
        assert ok(admin.get(f"/v1/responses/{response}"))["id"] == response


def test_a_project_is_a_world_of_its_own(own_stack: Stack, world: dict[str, Any]) -> None:
    """team-b's key sees team-b's objects only; an admin acts in a project it names with
    OpenAI's OpenAI-Project header (as the SDKs send `project=`); another key may not."""
    team_id = world["team"]["id"]
    with client(own_stack, world["team_key"]) as team:
        stores = ok(team.get("/v1/vector_stores"))["data"]
        assert [s["id"] for s in stores] == [world["charlie"]]  # named alpha too: no clash
        assert {f["id"] for f in ok(team.get("/v1/files"))["data"]} == {world["file_c"]}
        for kind, public_id, path in (
            ("vector_store", world["alpha"], "/v1/vector_stores/{}"),
            ("file", world["file_a"], "/v1/files/{}"),
            ("conversation", world["conversation"], "/v1/conversations/{}"),
            ("response", world["response"], "/v1/responses/{}"),
        ):
            hidden(
                team.get(path.format(public_id)),
                kind,
                public_id,
                team.get(path.format(UNKNOWN[kind])),
            )
        # Another project's file named in a new store's file_ids: 404, and no store is made.
        hidden(
            team.post("/v1/vector_stores", json={"name": "x", "file_ids": [world["file_a"]]}),
            "file",
            world["file_a"],
            team.post("/v1/vector_stores", json={"name": "x", "file_ids": [UNKNOWN["file"]]}),
        )
        assert [s["id"] for s in ok(team.get("/v1/vector_stores"))["data"]] == [world["charlie"]]
        assert team.get("/v1/files", headers={"OpenAI-Project": "proj_default"}).status_code == 403
        assert team.get("/admin/keys").status_code == 403
    with client(own_stack, ADMIN, **{"OpenAI-Project": team_id}) as admin_in_b:
        assert [s["id"] for s in ok(admin_in_b.get("/v1/vector_stores"))["data"]] == [
            world["charlie"]
        ]
    with client(own_stack, ADMIN) as admin:
        listed = {s["id"] for s in ok(admin.get("/v1/vector_stores"))["data"]}
        assert listed == {world["alpha"], world["bravo"]}
        keys = {k["name"]: k for k in ok(admin.get("/admin/keys"))["data"]}
        assert keys["team-b-writer"]["project"] == team_id
        assert keys["alpha-read"]["project"] == "proj_default"
        projects = [p["name"] for p in ok(admin.get("/admin/projects"))["data"]]
        assert projects == ["default", "team-b"]


def test_grpc_ingest_keeps_to_the_keys_project(own_stack: Stack, world: dict[str, Any]) -> None:
    """The bulk door goes through the same check: team-b's key finds its own "alpha" by name,
    never the default project's."""
    with IngestClient(own_stack.ingest_target, world["team_key"]) as team:
        events = list(
            team.ingest([Document("g.txt", text="over gRPC into team-b")], vector_store="alpha")
        )
    final = [e for e in events if isinstance(e, Progress) and e.final]
    assert final[0].state is State.COMPLETED
    assert final[0].vector_store_id == world["charlie"]
    with client(own_stack, ADMIN) as admin:
        alpha_files = ok(admin.get(f"/v1/vector_stores/{world['alpha']}/files"))["data"]
        assert final[0].file_id not in {f["id"] for f in alpha_files}


def second_gateway(stack: Stack, tmp: Path) -> tuple[Any, str]:
    """Another gateway on the same store (what a second replica behind a load balancer is)."""
    env = {
        **stack._service_env("gateway"),
        "RAGD_PORT": "0",
        "RAGD_INGEST_LISTEN": "off",
        "RAGD_PORTS_FILE": str(tmp / "ports.json"),
    }
    child = spawn("gateway", env, tmp / "gateway-2.log")
    ports = wait_ports_file(child, tmp / "ports.json", 60)
    url = f"http://127.0.0.1:{ports['http']}"
    wait_http_ok(child, url + "/health", 60)
    return child, url


def test_a_revoked_key_stops_within_a_second_on_every_gateway(
    own_stack: Stack, world: dict[str, Any], tmp_path: Path
) -> None:
    with client(own_stack, ADMIN) as admin:
        secret = make_key(admin, "short-lived", "read")
    child, url = second_gateway(own_stack, tmp_path)
    try:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=60
        ) as other:
            ok(other.get("/v1/vector_stores"))  # known (and cached) there
            with client(own_stack, ADMIN) as admin:
                ok(admin.delete("/admin/keys/short-lived"))
            revoked_at = time.monotonic()
            while other.get("/v1/vector_stores").status_code == 200:
                assert time.monotonic() - revoked_at < 1.0, "still accepted after 1 s"
                time.sleep(0.02)
            refused = other.get("/v1/vector_stores")
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_api_key"
    finally:
        child.stop()


def test_an_open_ingest_stream_rechecks_its_key(own_stack: Stack, world: dict[str, Any]) -> None:
    """A key revoked while its gRPC stream is open: the documents after the revocation are
    refused and the stream ends UNAUTHENTICATED."""
    with client(own_stack, ADMIN) as admin:
        secret = make_key(admin, "streamer", "write")

    def documents() -> Iterator[Document]:
        yield Document("before.txt", text="sent before the revocation")
        with client(own_stack, ADMIN) as admin:
            ok(admin.delete("/admin/keys/streamer"))
        time.sleep(1.0)
        for n in range(3):
            yield Document(f"after-{n}.txt", text=f"sent after the revocation {n}")

    seen: list[Progress] = []
    with (
        IngestClient(own_stack.ingest_target, secret) as streamer,
        pytest.raises(Unauthenticated, match="invalid API key"),
    ):
        for event in streamer.ingest(documents(), vector_store=world["alpha"]):
            if isinstance(event, Progress):
                seen.append(event)
    accepted = {e.position for e in seen if e.state is not State.FAILED}
    assert accepted <= {0}
    with client(own_stack, ADMIN) as admin:
        names = {
            f["filename"]
            for f in ok(admin.get(f"/v1/vector_stores/{world['alpha']}/files"))["data"]
        }
    assert not any(name.startswith("after-") for name in names)


def test_each_streamed_document_counts_against_the_rate_limit(
    own_stack: Stack, world: dict[str, Any]
) -> None:
    """A key of 2 requests a minute: the stream is one, its first document the second; the
    next document waits for the minute (the stream is not read meanwhile)."""
    with client(own_stack, ADMIN) as admin:
        secret = make_key(admin, "slow-lane", "write", requests_per_minute=2)
    requests = [
        ingest_pb2.IngestRequest(
            document=ingest_pb2.Document(
                ref=f"r{n}", vector_store=world["alpha"], filename=f"rl-{n}.txt", text=f"rate {n}"
            )
        )
        for n in range(3)
    ]
    seen = []
    with grpc.insecure_channel(own_stack.ingest_target) as channel:
        call = ingest_pb2_grpc.IngestStub(channel).IngestDocuments(
            iter(requests), metadata=(("authorization", f"Bearer {secret}"),), timeout=6
        )
        with pytest.raises(grpc.RpcError) as ended:
            for response in call:
                seen.append(response.document.ref)
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert set(seen) == {"r0"}


def test_requests_without_a_valid_key_leave_no_row_each(
    own_stack: Stack, world: dict[str, Any]
) -> None:
    def audit_count(admin: httpx.Client) -> int:
        return len(ok(admin.get("/admin/audit", params={"limit": 1000}))["data"])

    with client(own_stack, ADMIN) as admin:
        time.sleep(1.5)
        before = audit_count(admin)
        metrics = admin.get("/metrics").text
    refused_before = _metric(metrics, 'ragd_http_refused_total{reason="missing_key"}')
    sent = 0

    def hammer() -> None:
        nonlocal sent
        with httpx.Client(base_url=own_stack.gateway_url, timeout=30) as anonymous:
            for n in range(150):
                headers = {"Authorization": f"Bearer rk-wrong-{n}"} if n % 2 else {}
                assert anonymous.get("/v1/vector_stores", headers=headers).status_code == 401
                sent += 1

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(1.5)
    with client(own_stack, ADMIN) as admin:
        after = audit_count(admin)
        metrics = admin.get("/metrics").text
    # The two audit reads themselves are rows; the 600 refusals are not.
    assert after - before <= 2
    assert _metric(metrics, 'ragd_http_refused_total{reason="missing_key"}') - refused_before == 300
    assert _metric(metrics, 'ragd_http_refused_total{reason="invalid_key"}') >= 300
    assert sent == 600


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_refusals_are_written_as_one_entry_per_minute() -> None:
    """In process: the audit log folds refusals into one "refused" entry per window."""
    import asyncio

    from services.gateway.audit import AuditLog
    from services.pb import store_pb2

    sent: list[store_pb2.RecordAuditRequest] = []

    class Store:
        async def RecordAudit(self, request: store_pb2.RecordAuditRequest) -> None:
            sent.append(request)

    log = AuditLog(Store())  # type: ignore[arg-type]
    for n in range(1000):
        log.refused("missing_key" if n % 4 else "invalid_key")
    asyncio.run(log.flush())
    assert sent == []  # the minute is not over
    asyncio.run(log.flush(final=True))
    (request,) = sent
    (entry,) = request.entries
    assert (entry.operation, entry.result_count) == ("refused", 1000)
    assert "invalid_key 250" in entry.detail and "missing_key 750" in entry.detail
    json.dumps(entry.detail)
