"""A full disk under the store, through the whole stack (a real tmpfs; needs root): uploads are
refused with 507 storage_full and Retry-After, /ready and /admin/stats say so, and once space
returns every acknowledged file is indexed exactly once."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.launcher import Stack
from tests.harness import started_stack


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    mount = tmp_path_factory.mktemp("disk")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def stack(disk: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("full"),
        RAGD_DB_PATH=str(disk / "ragd.db"),
        RAGD_INGEST_LEASE_SECONDS="5",
        RAGD_INGEST_FULL_DISK_RETRY_SECONDS="1",
        RAGD_EMBED_CACHE="false",
    )


def document(index: int) -> dict[str, str]:
    text = f"Record {index}: the tide tables for harbour {index} list two high waters a day. "
    return {"text": text * 20, "filename": f"tide-{index}.txt"}


def fill(path: Path) -> None:
    with open(path, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
                handle.flush()
        except OSError:
            pass


def test_uploads_are_507_while_full_and_every_acknowledged_file_completes_after(
    stack: Stack, disk: Path
) -> None:
    with httpx.Client(base_url=stack.gateway_url, timeout=60) as api:
        store_id = api.post("/v1/vector_stores", json={"name": "full"}).json()["id"]
        acknowledged = []
        for index in range(5):
            reply = api.post(f"/v1/vector_stores/{store_id}/files", json=document(index))
            assert reply.status_code == 200, reply.text
            acknowledged.append(reply.json()["id"])
        ballast = disk / "ballast"
        fill(ballast)
        refusals = []
        for index in range(5, 60):
            reply = api.post(f"/v1/vector_stores/{store_id}/files", json=document(index))
            if reply.status_code == 200:
                acknowledged.append(reply.json()["id"])
                continue
            assert reply.status_code == 507, reply.text
            refusals.append(reply)
        assert refusals, "the disk never filled"
        error = refusals[0].json()["error"]
        assert error["code"] == "storage_full" and "disk is full" in error["message"]
        assert int(refusals[0].headers["Retry-After"]) > 0
        ready = api.get("/ready")
        assert ready.status_code == 200 and ready.json()["disk"]["full"] is True
        assert api.get("/admin/stats").json()["global"]["disk"]["full"] is True
        # Searches go on.
        found = api.post(f"/v1/vector_stores/{store_id}/search", json={"query": "tide"})
        assert found.status_code == 200, found.text

        ballast.unlink()
        deadline = time.monotonic() + 90
        while True:
            counts = api.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]
            if counts["in_progress"] == 0:
                break
            assert time.monotonic() < deadline, counts
            time.sleep(0.5)
        listed = api.get(f"/v1/vector_stores/{store_id}/files", params={"limit": 100}).json()
        statuses = {item["id"]: item["status"] for item in listed["data"]}
        assert set(statuses) == set(acknowledged)
        assert set(statuses.values()) == {"completed"}, statuses
        assert api.get("/ready").json()["disk"]["full"] is False
