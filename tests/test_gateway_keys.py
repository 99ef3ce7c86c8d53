"""The gateway's key logic without a server (services/gateway/keys.py): which scope a request
needs, the per-minute window, and when keys are required."""

from __future__ import annotations

import asyncio

import pytest

from services.gateway.errors import NotFound, Unavailable
from services.gateway.keys import (
    STATE_SECONDS,
    Keys,
    Principal,
    RateLimits,
    required_scope,
    vector_store_in_path,
)
from services.pb import store_pb2


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("GET", "/v1/vector_stores", "read"),
        ("POST", "/v1/vector_stores/vs_1/search", "read"),
        ("POST", "/v1/conversations/search", "read"),
        ("POST", "/v1/conversations/conv_1/search", "read"),
        ("POST", "/v1/vector_stores", "write"),
        ("DELETE", "/v1/files/file-1", "write"),
        ("POST", "/v1/embeddings", "write"),
        ("POST", "/v1/vector_stores/vs_1/search/extra", "write"),
        ("GET", "/admin/stats", "admin"),
        ("GET", "/metrics", "admin"),
    ],
)
def test_required_scope(method: str, path: str, scope: str) -> None:
    assert required_scope(method, path) == scope


def test_store_in_path() -> None:
    assert vector_store_in_path("/v1/vector_stores/vs_1/files/f") == "vs_1"
    assert vector_store_in_path("/v1/vector_stores") is None
    assert vector_store_in_path("/v1/files/vs_1") is None


def test_requests_per_minute_slide() -> None:
    now = [0.0]
    limits = RateLimits(clock=lambda: now[0])
    who = Principal("k", "read", requests_per_minute=2)
    assert limits.check(who) is None
    now[0] = 30.0
    assert limits.check(who) is None
    wait = limits.check(who)
    assert wait is not None and 30 <= wait <= 31
    now[0] = 60.5  # the first request left the window
    assert limits.check(who) is None
    assert limits.check(Principal("free", "read")) is None


def test_keys_are_required_once_the_store_holds_one_and_unknown_means_its_error() -> None:
    now = [0.0]
    held = [0]
    down = [True]

    async def state() -> store_pb2.KeyState:
        if down[0]:
            raise Unavailable("the store service is unavailable; retry shortly")
        return store_pb2.KeyState(keys=held[0])

    async def lookup(secret: str) -> store_pb2.ApiKey:
        if secret != "rk-good":
            raise NotFound("no live API key has this secret")
        return store_pb2.ApiKey(name="good", scope="write", vector_stores=["vs_1"])

    keys = Keys((), lookup, state, lambda: now[0])

    async def scenario() -> None:
        with pytest.raises(Unavailable):
            await keys.required()  # never heard from the store
        down[0] = False
        assert await keys.required() is False
        held[0] = 1
        assert await keys.required() is False  # polled at most every STATE_SECONDS
        now[0] += STATE_SECONDS
        assert await keys.required() is True
        down[0] = True
        now[0] += 10.0
        assert await keys.required() is True  # the last answer, while the store is away
        who = await keys.identify("rk-good")
        assert who is not None and who.allows("read") and not who.allows("admin")
        assert who.reaches("vs_1") and not who.reaches("vs_2")
        assert await keys.identify("rk-bad") is None

    asyncio.run(scenario())
    boot = Keys(("boot",), lookup, state, lambda: now[0])
    assert asyncio.run(boot.required()) is True
    admin = asyncio.run(boot.identify("boot"))
    assert admin is not None and admin.allows("admin") and admin.reaches("vs_anything")


def test_a_revocation_anywhere_reaches_the_cache_within_the_poll() -> None:
    """Every gateway polls the store's key state: once a key is revoked (on any gateway) the
    next request after STATE_SECONDS looks it up again instead of trusting the cache."""
    now = [0.0]
    revoked = [0]
    lookups = [0]

    async def state() -> store_pb2.KeyState:
        return store_pb2.KeyState(keys=1, revoked=revoked[0])

    async def lookup(secret: str) -> store_pb2.ApiKey:
        lookups[0] += 1
        if revoked[0]:
            raise NotFound("no live API key has this secret")
        return store_pb2.ApiKey(name="good", scope="write", project="proj_a")

    keys = Keys((), lookup, state, lambda: now[0])

    async def scenario() -> None:
        who = await keys.identify("rk-good")
        assert who is not None and who.project == "proj_a"
        now[0] += 0.1
        assert await keys.identify("rk-good") == who and lookups[0] == 1  # cached
        revoked[0] = 1
        now[0] += STATE_SECONDS
        assert await keys.identify("rk-good") is None
        assert lookups[0] == 2

    asyncio.run(scenario())
