"""API keys in the store (services/store/keys.py): made once with their secret, found by it,
never stored in clear, limited to vector stores that exist, revoked for good, usage counted
in total and per UTC day."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from services.pb import store_pb2 as pb
from services.store.errors import InvalidArgument, KeyExists, KeyNotFound, VectorStoreNotFound
from services.store.records import KeyState, KeyUsage
from services.store.repository import Repository
from tests.store_fixtures import FakeClock, RunningStore, expect_status, run_against_store


def test_a_key_is_found_by_its_secret_which_is_never_stored(repo: Repository, vs_id: str) -> None:
    key, secret = repo.create_api_key("ci-reader", "read", [vs_id], requests_per_minute=60)
    assert secret.startswith("rk-") and len(secret) > 40
    assert key.scope == "read" and key.vector_stores == (vs_id,)
    assert key.requests_per_minute == 60 and key.tokens_per_day == 0
    found = repo.authenticate_api_key(secret)
    assert found is not None and found.name == "ci-reader"
    assert repo.authenticate_api_key(secret + "x") is None
    assert repo.authenticate_api_key("") is None
    rows = repo._conn().execute("SELECT * FROM api_keys")
    dump = b"".join(bytes(str(row), "utf-8") for row in rows)
    assert secret.encode() not in dump and secret[3:].encode() not in dump
    # A second key gets another secret.
    _, other = repo.create_api_key("ci-writer", "write")
    assert other != secret
    assert [k.name for k in repo.list_api_keys()] == ["ci-reader", "ci-writer"]
    assert repo.key_state() == KeyState(keys=2, revoked=0)


def test_bad_keys_are_refused(repo: Repository, vs_id: str) -> None:
    with pytest.raises(InvalidArgument, match="scope"):
        repo.create_api_key("x", "owner")
    with pytest.raises(InvalidArgument, match="name"):
        repo.create_api_key("has space", "read")
    with pytest.raises(InvalidArgument, match="limits"):
        repo.create_api_key("x", "read", requests_per_minute=-1)
    with pytest.raises(VectorStoreNotFound):
        repo.create_api_key("x", "read", ["vs_nope"])
    repo.create_api_key("x", "read")
    with pytest.raises(KeyExists):
        repo.create_api_key("x", "admin")
    assert [k.name for k in repo.list_api_keys()] == ["x"]


def test_a_revoked_key_opens_nothing_and_keeps_its_history(
    repo: Repository, clock: FakeClock
) -> None:
    _, secret = repo.create_api_key("old", "admin")
    repo.record_key_usage([KeyUsage("old", requests=3, searches=2, embedded_tokens=40)])
    clock.now += 10
    revoked = repo.revoke_api_key("old")
    assert revoked.requests == 3
    assert repo.authenticate_api_key(secret) is None
    assert repo.list_api_keys() == []
    (history,) = repo.list_api_keys(revoked=True)
    assert history.revoked_at == clock.now and history.embedded_tokens == 40
    with pytest.raises(KeyNotFound):
        repo.revoke_api_key("old")
    # The name is not free again: a revoked key's record stays.
    with pytest.raises(KeyExists):
        repo.create_api_key("old", "read")


def test_usage_adds_up_in_total_and_per_utc_day(repo: Repository, clock: FakeClock) -> None:
    clock.now = 86400 * 20_000 + 100  # early in a UTC day
    repo.create_api_key("busy", "write", tokens_per_day=1000)
    repo.record_key_usage(
        [
            KeyUsage("busy", requests=2, searches=1, embedded_tokens=300, last_used_at=clock.now),
            KeyUsage("busy", requests=1, embedded_tokens=200, bytes_stored=5000),
            KeyUsage("gone", requests=9),
        ]
    )
    (key,) = repo.list_api_keys()
    assert (key.requests, key.searches, key.embedded_tokens, key.bytes_stored) == (3, 1, 500, 5000)
    assert key.embedded_tokens_today == 500 and key.last_used_at == clock.now
    clock.now += 86400
    repo.record_key_usage([KeyUsage("busy", embedded_tokens=7)])
    (key,) = repo.list_api_keys()
    assert key.embedded_tokens_today == 7 and key.embedded_tokens == 507


def test_keys_over_grpc(tmp_path: Path) -> None:
    async def scenario(store: RunningStore) -> None:
        created = await store.stub.CreateApiKey(
            pb.CreateApiKeyRequest(name="bot", scope="write", requests_per_minute=5)
        )
        assert created.key.name == "bot" and created.secret.startswith("rk-")
        found = await store.stub.AuthenticateApiKey(
            pb.AuthenticateApiKeyRequest(secret=created.secret)
        )
        assert found.scope == "write" and found.requests_per_minute == 5
        await expect_status(
            store.stub.AuthenticateApiKey(pb.AuthenticateApiKeyRequest(secret="rk-wrong")),
            grpc.StatusCode.NOT_FOUND,
        )
        await expect_status(
            store.stub.CreateApiKey(pb.CreateApiKeyRequest(name="bot", scope="read")),
            grpc.StatusCode.ALREADY_EXISTS,
        )
        await expect_status(
            store.stub.CreateApiKey(pb.CreateApiKeyRequest(name="x", scope="root")),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        await store.stub.RecordKeyUsage(
            pb.RecordKeyUsageRequest(usages=[pb.KeyUsage(name="bot", requests=2, searches=1)])
        )
        (listed,) = (await store.stub.ListApiKeys(pb.ListApiKeysRequest())).keys
        assert (listed.requests, listed.searches) == (2, 1)
        await store.stub.RevokeApiKey(pb.RevokeApiKeyRequest(name="bot"))
        await expect_status(
            store.stub.AuthenticateApiKey(pb.AuthenticateApiKeyRequest(secret=created.secret)),
            grpc.StatusCode.NOT_FOUND,
        )
        await expect_status(
            store.stub.RevokeApiKey(pb.RevokeApiKeyRequest(name="bot")), grpc.StatusCode.NOT_FOUND
        )

    run_against_store(tmp_path / "ragd.db", scenario)
