"""The gateway's channel to several stores (RAGD_STORE_TARGET with several addresses; issue 31):
calls spread over every store that serves, and the idempotent ones move to another store when
one dies.

The first test is of the balancing only: each store process has a SQLite database of its own,
which two stores of one deployment never do; there the different contents show which store
answered. The last runs two stores on one PostgreSQL database, as a deployment does.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.gateway.clients import STORE_READS, open_channel, store_stub
from services.pb import store_pb2 as pb
from tests.engines import Database
from tests.store_fixtures import DIMS, MODEL

ROOT = Path(__file__).resolve().parent.parent
CALLS = 20


def _spawn(folder: Path, url: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    folder.mkdir()
    ports = folder / "ports.json"
    env = {
        **os.environ,
        "RAGD_STORE_LISTEN": "127.0.0.1:0",
        "RAGD_DB_PATH": str(folder / "ragd.db"),
        "RAGD_STORE_THREADS": "2",
        "RAGD_PORTS_FILE": str(ports),
    }
    env.pop("RAGD_DATABASE_URL", None)
    if url is not None:
        env["RAGD_DATABASE_URL"] = url
    with (folder / "store.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.store"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
    deadline = time.monotonic() + 60
    while not ports.exists():
        assert process.poll() is None, (folder / "store.log").read_text()
        assert time.monotonic() < deadline, "the store did not start"
        time.sleep(0.05)
    port: int = json.loads(ports.read_text())["grpc"]
    return process, port


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], int]]]:
    started = [_spawn(tmp_path / name) for name in ("one", "two")]
    try:
        yield started
    finally:
        for process, _ in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)


async def _names(target: str, calls: int) -> list[str]:
    """The vector store each of `calls` ListVectorStores through one channel saw."""
    channel = open_channel(target, "store", timeout=10.0)
    try:
        stub = store_stub(channel)
        seen = []
        for _ in range(calls):
            listed = await stub.ListVectorStores(pb.ListVectorStoresRequest())
            seen += [store.name for store in listed.vector_stores]
        return seen
    finally:
        await channel.close()


async def _create(port: int, name: str) -> None:
    channel = open_channel(f"127.0.0.1:{port}", "store", timeout=10.0)
    try:
        request = pb.CreateVectorStoreRequest(name=name, model=MODEL, dimensions=DIMS)
        await store_stub(channel).CreateVectorStore(request)
    finally:
        await channel.close()


def test_calls_spread_over_the_stores_and_fail_over(
    stores: list[tuple[subprocess.Popen[bytes], int]],
) -> None:
    (first, first_port), (_, second_port) = stores
    target = f"127.0.0.1:{first_port},127.0.0.1:{second_port}"

    async def scenario() -> None:
        await _create(first_port, "one")
        await _create(second_port, "two")
        # A channel's subchannels connect as calls come: a round or two of calls reach both.
        seen = await _names(target, CALLS)
        assert len(seen) == CALLS
        assert {"one", "two"} == set(seen), seen
        assert abs(seen.count("one") - seen.count("two")) <= 2, seen

        channel = open_channel(target, "store", timeout=10.0)
        try:
            stub = store_stub(channel)
            for _ in range(4):
                await stub.ListVectorStores(pb.ListVectorStoresRequest())
            first.kill()
            first.wait(timeout=10)
            # Every call still succeeds: a call that meets the dead store is UNAVAILABLE and
            # retried on the other (ListVectorStores is idempotent), and health checking
            # takes the dead one out of the rotation.
            after = []
            for _ in range(CALLS):
                listed = await stub.ListVectorStores(pb.ListVectorStoresRequest())
                after += [store.name for store in listed.vector_stores]
            assert after == ["two"] * CALLS
        finally:
            await channel.close()

    asyncio.run(scenario())


def test_only_reads_of_the_store_are_retried() -> None:
    methods = {method.name for method in pb.DESCRIPTOR.services_by_name["Store"].methods}
    assert set(STORE_READS) <= methods
    reads = ("Get", "List", "Search", "Authenticate")
    assert all(name.startswith(reads) for name in STORE_READS)
    # Every method named like a read is in the list, so a new one is decided on, not missed.
    assert {m for m in methods if m.startswith(reads)} == set(STORE_READS)


@pytest.mark.engines("postgres")
def test_two_stores_on_one_postgres_database_serve_alike_and_survive_a_kill(
    database: Database, tmp_path: Path
) -> None:
    started = [_spawn(tmp_path / name, database.url) for name in ("one", "two")]
    (first, first_port), (_, second_port) = started
    target = f"127.0.0.1:{first_port},127.0.0.1:{second_port}"

    async def scenario() -> None:
        channel = open_channel(target, "store", timeout=10.0)
        try:
            stub = store_stub(channel)
            # Writes spread over both stores land in the one database.
            for n in range(6):
                request = pb.CreateVectorStoreRequest(name=f"vs{n}", model=MODEL, dimensions=DIMS)
                await stub.CreateVectorStore(request)
            for port in (first_port, second_port):
                assert sorted(await _names(f"127.0.0.1:{port}", 1)) == [f"vs{n}" for n in range(6)]
            first.kill()
            first.wait(timeout=10)
            # Reads meeting the dead store move to the other; once health checking has taken
            # it out, writes go to the live one too.
            for _ in range(CALLS):
                listed = await stub.ListVectorStores(pb.ListVectorStoresRequest())
                assert len(listed.vector_stores) == 6
            request = pb.CreateVectorStoreRequest(name="after", model=MODEL, dimensions=DIMS)
            await stub.CreateVectorStore(request)
            assert "after" in await _names(f"127.0.0.1:{second_port}", 1)
        finally:
            await channel.close()

    try:
        asyncio.run(scenario())
    finally:
        for process, _ in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
