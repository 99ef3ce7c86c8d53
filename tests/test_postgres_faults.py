"""The PostgreSQL engine's faults through the real processes (issue 31): the database stopped
mid-ingest answers 503 naming it, loses no acknowledged file, and serves again on its return."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engines import Database
from tests.harness import ok, started_stack
from tests.postgres_server import start_server, start_standby

pytestmark = pytest.mark.engines("postgres")

TEXT = "The lighthouse keeper of bay {n} logs every ship that passes at night. " * 40


def upload(api: httpx.Client, name: str, text: str) -> httpx.Response:
    return api.post(
        "/v1/files", files={"file": (name, text.encode())}, data={"purpose": "assistants"}
    )


def counts(api: httpx.Client, vector_store_id: str) -> dict[str, int]:
    found: dict[str, int] = ok(api.get(f"/v1/vector_stores/{vector_store_id}"))["file_counts"]
    return found


def until(check: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_postgres_stopped_mid_ingest_loses_nothing_acknowledged(
    engine: str, tmp_path: Path
) -> None:
    server = start_server(tmp_path / "postgres")
    try:
        database = Database(engine, tmp_path / "ragd.db", server.url(server.create_database()))
        stack_of = contextmanager(started_stack)
        with (
            # A job whose result could not be written waits out its lease: a short one.
            stack_of(
                tmp_path / "stack", 1, RAGD_INGEST_LEASE_SECONDS="5", **database.env()
            ) as stack,
            httpx.Client(base_url=stack.gateway_url, timeout=60.0) as api,
        ):
            files = [ok(upload(api, f"bay{n}.txt", TEXT.format(n=n)))["id"] for n in range(6)]
            created = api.post("/v1/vector_stores", json={"name": "bays", "file_ids": files})
            vector_store = ok(created)["id"]
            server.stop()

            search = api.post(
                f"/v1/vector_stores/{vector_store}/search", json={"query": "ships at night"}
            )
            assert search.status_code == 503, search.text
            assert "PostgreSQL" in search.json()["error"]["message"]
            refused = upload(api, "late.txt", "written while the database was away")
            assert refused.status_code == 503, refused.text

            server.start()
            until(
                lambda: (
                    api.post(
                        f"/v1/vector_stores/{vector_store}/search", json={"query": "ships"}
                    ).status_code
                    == 200
                )
            )
            done = until(lambda: counts(api, vector_store)["completed"] == len(files))
            assert done
            assert counts(api, vector_store)["failed"] == 0
            hits = ok(
                api.post(
                    f"/v1/vector_stores/{vector_store}/search",
                    json={"query": "lighthouse keeper of bay 3"},
                )
            )["data"]
            assert {hit["file_id"] for hit in hits} <= set(files) and hits
            # The refused upload left nothing behind.
            listed = ok(api.get("/v1/files", params={"limit": 100}))["data"]
            assert sorted(f["id"] for f in listed) == sorted(files)
    finally:
        server.close()


def test_a_promoted_standby_takes_over_from_a_lost_primary(engine: str, tmp_path: Path) -> None:
    """The URL names the primary and its standby (target_session_attrs=read-write): after the
    primary is lost and the standby promoted, the store writes to it without a restart, and
    every acknowledged write is there (synchronous replication)."""
    folder = tmp_path / "cluster"
    folder.mkdir()
    os.chmod(folder, 0o777)  # the standby's directory is made by the server's user
    primary = start_server(folder / "primary", settings={"synchronous_commit": "on"})
    try:
        name = primary.create_database()
        standby = start_standby(primary, folder / "standby")
        try:
            primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            primary.execute("SELECT pg_reload_conf()")
            hosts = f"{primary.directory},{standby.directory}"
            url = f"postgresql://postgres@/{name}?host={hosts}&target_session_attrs=read-write"
            stack_of = contextmanager(started_stack)
            with (
                stack_of(
                    tmp_path / "stack", 1, **Database(engine, tmp_path / "ragd.db", url).env()
                ) as stack,
                httpx.Client(base_url=stack.gateway_url, timeout=60.0) as api,
            ):
                conversation = ok(api.post("/v1/conversations", json={}))["id"]
                path = f"/v1/conversations/{conversation}/items"

                def add(text: str) -> httpx.Response:
                    item = {"type": "message", "role": "user", "content": text}
                    return api.post(path, json={"items": [item]})

                for n in range(5):
                    ok(add(f"before {n}"))
                primary.crash()
                refused = add("while no server takes writes")
                assert refused.status_code == 503, refused.text
                assert "PostgreSQL" in refused.json()["error"]["message"]
                standby.promote()
                until(lambda: add("after").status_code == 200, timeout=60)
                items = ok(api.get(path, params={"limit": 100, "order": "asc"}))["data"]
                texts = [item["content"][0]["text"] for item in items]
                assert texts == [f"before {n}" for n in range(5)] + ["after"]
        finally:
            standby.close()
    finally:
        primary.close()
