"""The failover drill: the store's machine is lost mid-ingest and a new store comes back from
the Litestream replica.

The real stack with replication on (a file replica in a directory of its own). Files are
uploaded and attached and conversation turns added, each noted with the moment the gateway
acknowledged it; the store and Litestream are SIGKILLed together, the store's data directory
is deleted, and a new store starts on the empty directory with the same replica. Then:
acknowledged writes present vs lost (Litestream replicates asynchronously: only the writes of
the last moments before the kill may be lost, never one acknowledged earlier than the loss
window, and a lost write is gone, never reported as there), the time from the kill to a
serving store and gateway (RTO), integrity_check and the store's invariants, every restored
file intact and indexed. The figures are printed.

Short by default (RAGD_TEST_FAILOVER_FILES=20); `make test-failover` runs 200.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from services.cli.main import cli
from services.launcher import REPLICATOR, Stack
from services.store.replica import MONITOR_INTERVAL
from tests.harness import ok, started_stack, wait_ready
from tests.store_fixtures import (
    check_conversation_invariants,
    check_invariants,
    open_readonly,
)

FILES = int(os.environ.get("RAGD_TEST_FAILOVER_FILES", "20"))
SYNC_INTERVAL = float(os.environ.get("RAGD_TEST_FAILOVER_SYNC", "1"))
# Seconds between files: the writes span several sync intervals, as a team's would, rather
# than all landing in the last one.
PACE = float(os.environ.get("RAGD_TEST_FAILOVER_PACE", "0.25"))
# The loss window the drill allows: a commit waits up to MONITOR_INTERVAL for Litestream to
# read it and up to SYNC_INTERVAL to be shipped; SLACK for a machine busy with other work.
SLACK = 3.0
ALLOWED_LOSS = SYNC_INTERVAL + MONITOR_INTERVAL + SLACK


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("failover")
    yield from started_stack(
        root,
        # The store's "volume" and the replica's: separate directories.
        RAGD_DB_PATH=str(root / "volume" / "ragd.db"),
        RAGD_REPLICA_URL=f"file://{root / 'replica' / 'ragd'}",
        RAGD_REPLICA_SYNC_INTERVAL=str(SYNC_INTERVAL),
        # Jobs the lost store had leased are taken up again soon by the new one.
        RAGD_INGEST_LEASE_SECONDS="5",
    )


@pytest.fixture(scope="module")
def api(own_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=60) as http:
        yield http


@dataclass
class Write:
    kind: str  # "file", "attach" or "turn"
    id: str
    acknowledged_at: float
    detail: dict[str, str] = field(default_factory=dict)


def text_of(index: int) -> str:
    return "\n\n".join(
        f"Failover file {index}, part {part}: crate {index * 31 + part} holds {part + 2} "
        "spare parts for the north line, checked and counted twice. " * 3
        for part in range(3)
    )


def write_until_stopped(
    api: httpx.Client,
    store_id: str,
    conversation_id: str,
    acknowledged: list[Write],
    stop: threading.Event,
) -> None:
    """Uploads and attaches files and adds a turn every third file, in order, noting each
    acknowledgement; a refused or failed request is not acknowledged, and ends the run."""
    try:
        for index in range(FILES):
            if stop.wait(PACE):
                return
            text = text_of(index)
            reply = api.post(
                "/v1/files",
                files={"file": (f"f{index}.txt", text.encode())},
                data={"purpose": "assistants"},
            )
            if reply.status_code != 200:
                return
            file_id = reply.json()["id"]
            sha = hashlib.sha256(text.encode()).hexdigest()
            acknowledged.append(Write("file", file_id, time.time(), {"sha256": sha}))
            reply = api.post(f"/v1/vector_stores/{store_id}/files", json={"file_id": file_id})
            if reply.status_code != 200:
                return
            acknowledged.append(Write("attach", file_id, time.time()))
            if index % 3 == 0:
                turn = f"Turn {index}: where are the spare parts of crate {index * 31}?"
                reply = api.post(
                    f"/v1/conversations/{conversation_id}/items",
                    json={
                        "items": [
                            {
                                "type": "message",
                                "role": "user",
                                "content": [{"type": "input_text", "text": turn}],
                            }
                        ]
                    },
                )
                if reply.status_code != 200:
                    return
                item_id = reply.json()["data"][0]["id"]
                acknowledged.append(Write("turn", item_id, time.time(), {"text": turn}))
    except httpx.HTTPError:
        return  # the request the kill cut off: not acknowledged


def present(api: httpx.Client, write: Write, store_id: str, conversation_id: str) -> bool:
    """Whether the write is in the restored store; a write that is there must be whole."""
    if write.kind == "file":
        reply = api.get(f"/v1/files/{write.id}/content")
        if reply.status_code == 404:
            return False
        assert reply.status_code == 200, reply.text
        assert hashlib.sha256(reply.content).hexdigest() == write.detail["sha256"], write
        return True
    if write.kind == "attach":
        reply = api.get(f"/v1/vector_stores/{store_id}/files/{write.id}")
    else:
        reply = api.get(f"/v1/conversations/{conversation_id}/items/{write.id}")
    if reply.status_code == 404:
        return False
    body = ok(reply)
    if write.kind == "turn":
        assert body["content"][0]["text"] == write.detail["text"], body
    return True


def wait_completed(api: httpx.Client, store_id: str, expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        counts = ok(api.get(f"/v1/vector_stores/{store_id}"))["file_counts"]
        assert counts["failed"] == counts["cancelled"] == 0, counts
        if counts["completed"] >= expected:
            return
        assert time.monotonic() < deadline, counts
        time.sleep(0.2)


def replica_state(api: httpx.Client) -> dict[str, Any]:
    found: dict[str, Any] = ok(api.get("/admin/stats"))["replica"]
    return found


def wait_replica_current(api: httpx.Client, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (found := replica_state(api))["state"] != "current":
        assert time.monotonic() < deadline, found
        time.sleep(0.2)
    return found


def test_the_store_comes_back_from_the_replica_after_losing_its_disk(
    own_stack: Stack, api: httpx.Client
) -> None:
    db_path = Path(own_stack.env["RAGD_DB_PATH"])
    store_id = ok(api.post("/v1/vector_stores", json={"name": "drill"}))["id"]
    conversation_id = ok(api.post("/v1/conversations", json={"metadata": {"drill": "1"}}))["id"]
    wait_replica_current(api)
    acknowledged: list[Write] = []
    stop = threading.Event()
    writer = threading.Thread(
        target=write_until_stopped,
        args=(api, store_id, conversation_id, acknowledged, stop),
        daemon=True,
    )
    writer.start()
    # Kill about two thirds of the way in, with files still being indexed.
    deadline = time.monotonic() + 300
    while sum(w.kind == "file" for w in acknowledged) < max(2 * FILES // 3, 1):
        assert writer.is_alive() and time.monotonic() < deadline, "writes stalled"
        time.sleep(0.01)
    in_flight = ok(api.get(f"/v1/vector_stores/{store_id}"))["file_counts"]["in_progress"]

    # The machine is lost: the store and Litestream die at once, then the disk goes.
    killed_at, killed = time.time(), time.monotonic()
    own_stack.children["store"].kill()
    own_stack.children[REPLICATOR].kill()
    stop.set()
    writer.join(120)
    assert not writer.is_alive()
    shutil.rmtree(db_path.parent)

    own_stack.start_service("store")
    store_ready = time.monotonic() - killed
    own_stack.start_replicator()
    wait_ready(api, timeout=120)
    gateway_ready = time.monotonic() - killed

    lost = [w for w in acknowledged if not present(api, w, store_id, conversation_id)]
    window = max((killed_at - w.acknowledged_at for w in lost), default=0.0)
    kinds = {kind: sum(w.kind == kind for w in acknowledged) for kind in ("file", "attach", "turn")}
    lost_kinds = {kind: sum(w.kind == kind for w in lost) for kind in kinds}
    print(
        f"\nfailover drill: {len(acknowledged)} acknowledged writes ({kinds}), "
        f"{in_flight} files being indexed at the kill; lost {len(lost)} ({lost_kinds}), "
        f"the oldest acknowledged {window:.2f} s before the kill "
        f"(RPO bound at sync interval {SYNC_INTERVAL:g} s: {SYNC_INTERVAL + MONITOR_INTERVAL:g} s "
        f"+ scheduling); RTO: store serving {store_ready:.1f} s, gateway ready "
        f"{gateway_ready:.1f} s after the kill"
    )
    # Asynchronous replication may lose the last moments, never anything older.
    assert window <= ALLOWED_LOSS, [(w.kind, w.id, killed_at - w.acknowledged_at) for w in lost]
    assert len(lost) < len(acknowledged)
    # Later writes of one file depend on it: what is lost is a tail of each kind's sequence.
    for kind in kinds:
        of_kind = [w in lost for w in acknowledged if w.kind == kind]
        assert of_kind == sorted(of_kind), kind

    # What survived is served whole and gets indexed: jobs the lost store held resume.
    attached = [w for w in acknowledged if w.kind == "attach" and w not in lost]
    wait_completed(api, store_id, len(attached), timeout=120 + 2 * FILES)
    hits = ok(api.post(f"/v1/vector_stores/{store_id}/search", json={"query": "spare parts"}))
    assert hits["data"], hits
    conn = open_readonly(db_path)
    try:
        assert [row[0] for row in conn.execute("PRAGMA integrity_check")] == ["ok"]
    finally:
        conn.close()
    check_invariants(db_path)
    check_conversation_invariants(db_path)

    # The new store replicates again, to the same replica.
    ok(
        api.post(
            "/v1/files",
            files={"file": ("after.txt", b"written after the failover")},
            data={"purpose": "assistants"},
        )
    )
    found = wait_replica_current(api)
    assert found["lag_seconds"] == 0 and found["replica_txid"] >= 1, found


def test_an_operator_restores_the_replica_at_a_point_in_time(
    own_stack: Stack, api: httpx.Client
) -> None:
    def upload(name: str) -> str:
        reply = api.post(
            "/v1/files", files={"file": (name, name.encode())}, data={"purpose": "assistants"}
        )
        file_id: str = ok(reply)["id"]
        return file_id

    kept = upload("kept.txt")
    wait_replica_current(api)
    # The replica's timestamps have whole seconds: a clear second between the two writes.
    time.sleep(1.5)
    moment = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    time.sleep(1.5)
    undone = upload("undone.txt")
    wait_replica_current(api)

    runner = CliRunner()
    url = ["--url", own_stack.gateway_url]
    status = runner.invoke(cli, [*url, "db", "status"])
    # (The audit log's writes each second may be on their way: current or just behind.)
    assert status.exit_code == 0, status.output
    assert re.search(r"replica: (current|behind) file://", status.output), status.output
    assert re.search(r"replica txid \d+, local txid \d+; lag \d", status.output), status.output
    restored = runner.invoke(
        cli, [*url, "db", "restore", "--from-replica", "--timestamp", moment, "--yes", "--json"]
    )
    assert restored.exit_code == 0, restored.output
    assert api.get(f"/v1/files/{kept}").status_code == 200
    assert api.get(f"/v1/files/{undone}").status_code == 404
    # The database it replaced is kept, like any restore's: restoring it undoes the restore.
    replaced = Path(json.loads(restored.output)["replaced_path"])
    assert replaced.parent.name == "replaced"
    # At once: this restore's own copy gets a name of its own, even in the same second.
    undo = runner.invoke(cli, [*url, "db", "restore", f"replaced/{replaced.name}", "--yes"])
    assert undo.exit_code == 0, undo.output
    assert api.get(f"/v1/files/{undone}").status_code == 200
    refused = runner.invoke(cli, [*url, "db", "restore", "--from-replica", "--timestamp", "x"])
    assert refused.exit_code != 0
