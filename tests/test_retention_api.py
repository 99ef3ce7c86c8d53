"""Retention through the real processes: a store with RAGD_CONVERSATIONS_TTL_DAYS and
RAGD_RESPONSES_TTL_DAYS of about nine seconds deletes a conversation and a response (their
items, full-text rows and the vectors the gateway made for them) on its own, and the audit
log says what went and why. tests/test_store_retention.py covers the rules on a fake clock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from services.launcher import Stack
from services.pb import store_pb2, store_pb2_grpc
from tests.harness import ok, started_stack
from tests.store_fixtures import check_conversation_invariants, open_readonly, scalar

# 0.0001 day: 8.64 s; the store then sweeps every second.
TTL_DAYS = "0.0001"


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("retention"),
        RAGD_CONVERSATIONS_TTL_DAYS=TTL_DAYS,
        RAGD_RESPONSES_TTL_DAYS=TTL_DAYS,
        RAGD_INGEST_POLL_SECONDS="0.2",
    )


def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def in_db(path: Path, sql: str, *params: object) -> int:
    conn = open_readonly(path)
    try:
        return scalar(conn, sql, *params)
    finally:
        conn.close()


def message(role: str, text: str) -> store_pb2.NewItem:
    kind = "input_text" if role == "user" else "output_text"
    body = json.dumps({"content": [{"type": kind, "text": text}]})
    return store_pb2.NewItem(type="message", role=role, body_json=body, text=text)


def test_expired_conversations_and_responses_go_with_what_they_hold(own_stack: Stack) -> None:
    db = Path(own_stack.env["RAGD_DB_PATH"])
    with httpx.Client(base_url=own_stack.gateway_url, timeout=30) as client:
        conversation = ok(
            client.post(
                "/v1/conversations",
                json={"items": [{"role": "user", "content": "Where do zanzibar quokkas sleep?"}]},
            )
        )["id"]
        # A turn outside any conversation, recorded the way the gateway records one.
        with grpc.insecure_channel(own_stack.store_target) as channel:
            store_pb2_grpc.StoreStub(channel).RecordResponse(
                store_pb2.RecordResponseRequest(
                    id="resp_retention01",
                    created_at=time.time(),
                    completed_at=time.time(),
                    status="completed",
                    model="smollm2",
                    inputs=[message("user", "What do zanzibar walruses eat?")],
                    outputs=[message("assistant", "Clams, mostly.")],
                )
            )
        assert ok(client.get("/v1/responses/resp_retention01"))["status"] == "completed"
        matches = "SELECT count(*) FROM items_fts WHERE items_fts MATCH 'zanzibar'"
        assert in_db(db, matches) == 2
        # The gateway embeds conversation items in the background: its vector is there too.
        until(lambda: in_db(db, "SELECT count(*) FROM item_vectors") == 1, "no item vector")

        until(
            lambda: client.get(f"/v1/conversations/{conversation}").status_code == 404,
            "the conversation outlived its time to live",
        )
        until(
            lambda: client.get("/v1/responses/resp_retention01").status_code == 404,
            "the response outlived its time to live",
        )
        assert in_db(db, "SELECT count(*) FROM items") == 0
        assert in_db(db, matches) == 0
        assert in_db(db, "SELECT count(*) FROM item_vectors") == 0
        assert ok(client.post("/v1/conversations/search", json={"query": "zanzibar"}))["data"] == []
        entries = ok(client.get("/admin/audit", params={"operation": "expire"}))["data"]
        details = {entry["detail"].split(" (")[0] for entry in entries}
        assert details == {f"conversation {conversation}", "response resp_retention01"}
        assert all("TTL_DAYS=0.0001" in entry["detail"] for entry in entries)
    check_conversation_invariants(db)
