"""Restore through the real stack: a backup taken while files are being indexed comes back
with exactly the files acknowledged before it, the ingest it caught half-way finishes, the
replaced database is kept, backups can be listed and downloaded through the gateway, and a
file that is not ragd's is refused with the service untouched."""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest
from click.testing import CliRunner

from services.cli.main import cli
from services.launcher import Stack
from services.store import migrations
from tests.harness import document, ok, started_stack
from tests.store_fixtures import check_invariants


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Short leases: jobs the backup caught leased are taken up again soon after a restore.
    # The service token: the download's streaming call to the store must carry it too.
    yield from started_stack(
        tmp_path_factory.mktemp("restore"),
        RAGD_INGEST_LEASE_SECONDS="5",
        RAGD_SERVICE_TOKEN="restore-token-123",
    )


@pytest.fixture(scope="module")
def api(own_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=120) as http:
        yield http


def upload(api: httpx.Client, name: str, text: str) -> str:
    reply = api.post(
        "/v1/files", files={"file": (name, text.encode())}, data={"purpose": "assistants"}
    )
    file_id: str = ok(reply)["id"]
    return file_id


def counts(api: httpx.Client, store_id: str) -> dict[str, int]:
    found: dict[str, int] = ok(api.get(f"/v1/vector_stores/{store_id}"))["file_counts"]
    return found


def wait_completed(api: httpx.Client, store_id: str, files: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while counts(api, store_id)["completed"] < files:
        assert time.monotonic() < deadline, counts(api, store_id)
        time.sleep(0.1)


def ranked(page: dict[str, Any]) -> list[str]:
    """The files found, best first."""
    return [hit["file_id"] for hit in page["data"]]


def test_a_backup_taken_during_ingest_restores_exactly_the_acknowledged_files(
    own_stack: Stack, api: httpx.Client
) -> None:
    db_path = Path(own_stack.env["RAGD_DB_PATH"])
    backups = db_path.parent / "backups"
    # Long enough files that the backup lands while some are still being indexed.
    acknowledged = [upload(api, f"a{i}.txt", document(i) * 6) for i in range(8)]
    store_id = ok(api.post("/v1/vector_stores", json={"name": "kept", "file_ids": acknowledged}))[
        "id"
    ]
    taken = ok(api.post("/admin/backup", json={"path": "during/ingest.db"}))
    at_backup = counts(api, store_id)
    later = upload(api, "later.txt", document(99))
    other = ok(api.post("/v1/vector_stores", json={"name": "later", "file_ids": [later]}))["id"]
    wait_completed(api, store_id, len(acknowledged))
    wait_completed(api, other, 1)
    # Vector mode: a hybrid score carries bm25, whose statistics count the later store's
    # chunks before the restore and not after.
    query = {"query": "record", "mode": "vector"}
    hits_before = ok(api.post(f"/v1/vector_stores/{store_id}/search", json=query))

    listed = ok(api.get("/admin/backups"))["data"]
    assert [b["path"] for b in listed] == ["during/ingest.db"]
    assert listed[0]["bytes"] == taken["bytes"] == (backups / "during/ingest.db").stat().st_size

    restored = ok(api.post("/admin/restore", json={"path": "during/ingest.db"}))
    assert restored["path"] == str((backups / "during/ingest.db").resolve())
    replaced = Path(restored["replaced_path"])
    assert replaced.parent == (backups / "replaced").resolve()
    assert replaced.name.startswith("replaced-")
    assert restored["schema_version"] == restored["restored_schema_version"] >= 9

    files = {f["id"] for f in ok(api.get("/v1/files", params={"limit": 100}))["data"]}
    assert files == set(acknowledged)
    stores = {s["id"] for s in ok(api.get("/v1/vector_stores"))["data"]}
    assert stores == {store_id}
    assert api.get(f"/v1/vector_stores/{other}").status_code == 404
    after = counts(api, store_id)
    assert after["completed"] <= at_backup["completed"] and after["failed"] == 0, after
    assert after["total"] == len(acknowledged)
    # What the backup caught half-way is indexed again, and searches see it.
    wait_completed(api, store_id, len(acknowledged))
    hits_after = ok(api.post(f"/v1/vector_stores/{store_id}/search", json=query))
    # (Which of the many equally good chunks fill the top k may change: chunk ids are new.)
    assert len(ranked(hits_after)) == len(ranked(hits_before))
    assert set(ranked(hits_after)) <= set(acknowledged)
    assert hits_after["data"][0]["score"] == pytest.approx(
        hits_before["data"][0]["score"], abs=2e-3
    )
    check_invariants(db_path)

    # The replaced database is a database with the later store in it: restoring it undoes
    # the restore.
    ok(api.post("/admin/restore", json={"path": f"replaced/{replaced.name}"}))
    stores = {s["id"] for s in ok(api.get("/v1/vector_stores"))["data"]}
    assert stores == {store_id, other}


def test_backups_download_through_the_gateway(own_stack: Stack, tmp_path: Path) -> None:
    runner = CliRunner()
    url = ["--url", own_stack.gateway_url]
    made = runner.invoke(cli, [*url, "db", "backup", "fetched.db"])
    assert made.exit_code == 0, made.output
    target = tmp_path / "copy.db"
    fetched = runner.invoke(cli, [*url, "db", "download", "fetched.db", "-o", str(target)])
    assert fetched.exit_code == 0, fetched.output
    original = Path(own_stack.env["RAGD_DB_PATH"]).parent / "backups" / "fetched.db"
    assert (
        hashlib.sha256(target.read_bytes()).digest()
        == hashlib.sha256(original.read_bytes()).digest()
    )
    listed = runner.invoke(cli, [*url, "db", "backups"])
    assert "fetched.db" in listed.output
    missing = runner.invoke(cli, [*url, "db", "download", "nothing.db", "-o", str(target)])
    assert missing.exit_code == 3, missing.output


def test_a_file_that_is_not_a_backup_is_refused_and_nothing_changes(
    own_stack: Stack, api: httpx.Client
) -> None:
    backups = Path(own_stack.env["RAGD_DB_PATH"]).parent / "backups"
    (backups / "junk.db").write_bytes(b"not a database at all" * 100)
    before = ok(api.get("/v1/vector_stores"))["data"]
    for name, status in (("junk.db", 400), ("absent.db", 404), ("../escape.db", 400)):
        reply = api.post("/admin/restore", json={"path": name})
        assert reply.status_code == status, (name, reply.text)
        assert reply.json()["error"]["message"]
    assert ok(api.get("/v1/vector_stores"))["data"] == before
    runner = CliRunner()
    refused = runner.invoke(
        cli, ["--url", own_stack.gateway_url, "db", "restore", "--yes", "junk.db"]
    )
    assert refused.exit_code == 1, refused.output
    assert "junk.db" in refused.output


def test_a_sqlite_file_that_is_not_ragds_is_refused_and_every_route_still_works(
    own_stack: Stack, api: httpx.Client
) -> None:
    backups = Path(own_stack.env["RAGD_DB_PATH"]).parent / "backups"
    store_id = ok(api.post("/v1/vector_stores", json={"name": "untouched"}))["id"]
    ok(
        api.post(
            f"/v1/vector_stores/{store_id}/files",
            json={"text": document(7), "filename": "seven.txt"},
        )
    )
    wait_completed(api, store_id, 1)
    # A file with ragd's schema version and tables of its own (the probe's), and a real backup
    # with one trigger added.
    foreign = apsw.Connection(str(backups / "foreign.db"))
    foreign.execute(
        f"CREATE TABLE vector_stores (x); PRAGMA user_version = {len(migrations.MIGRATIONS)}"
    )
    foreign.close()
    good = Path(ok(api.post("/admin/backup", json={"path": "good.db"}))["path"])
    shutil.copyfile(good, backups / "tampered.db")
    tampered = apsw.Connection(str(backups / "tampered.db"))
    tampered.execute("CREATE TRIGGER evil AFTER INSERT ON files BEGIN DELETE FROM files; END")
    tampered.close()
    before = {
        path: ok(api.get(path))["data"]
        for path in ("/v1/vector_stores", "/v1/files", "/admin/backups")
    }

    for name, says in (
        ("foreign.db", "table 'vector_stores' differs"),
        ("tampered.db", "trigger 'evil' is not one of ragd's"),
    ):
        reply = api.post("/admin/restore", json={"path": name})
        assert reply.status_code == 400, reply.text
        message = reply.json()["error"]["message"]
        assert name in message and says in message, message
        refused = CliRunner().invoke(
            cli, ["--url", own_stack.gateway_url, "db", "restore", "--yes", name]
        )
        assert refused.exit_code == 1 and says in refused.output, refused.output

    # Nothing changed, nothing was copied aside, and the service answers as before.
    assert api.get("/ready").status_code == 200
    assert {path: ok(api.get(path))["data"] for path in before} == before
    hits = ok(api.post(f"/v1/vector_stores/{store_id}/search", json={"query": "record 7"}))
    assert hits["data"] and hits["data"][0]["filename"] == "seven.txt"
    ok(api.get(f"/v1/vector_stores/{store_id}/files"))
    ok(api.post("/v1/embeddings", json={"input": "still here"}))
    conversation = ok(
        api.post("/v1/conversations", json={"items": [{"role": "user", "content": "hi"}]})
    )
    assert len(ok(api.get(f"/v1/conversations/{conversation['id']}/items"))["data"]) == 1
    ok(api.get("/admin/stats"))
    ok(api.get("/v1/models"))
    # The sound backup restores, and the new store's file is back to being searched.
    ok(api.post("/admin/restore", json={"path": "good.db"}))
    assert ok(api.post(f"/v1/vector_stores/{store_id}/search", json={"query": "record 7"}))["data"]
    check_invariants(Path(own_stack.env["RAGD_DB_PATH"]))
