"""The gateway's key logic without a server (services/gateway/keys.py): which scope a request
needs, the per-minute window, and when keys are required."""

from __future__ import annotations

import asyncio

import pytest

from services.gateway.errors import NotFound, Unavailable
from services.gateway.keys import Keys, Principal, RateLimits, required_scope, store_in_path
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
    assert store_in_path("/v1/vector_stores/vs_1/files/f") == "vs_1"
    assert store_in_path("/v1/vector_stores") is None
    assert store_in_path("/v1/files/vs_1") is None


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

    async def count() -> int:
        if down[0]:
            raise Unavailable("the store service is unavailable; retry shortly")
        return held[0]

    async def lookup(secret: str) -> store_pb2.ApiKey:
        if secret != "rk-good":
            raise NotFound("no live API key has this secret")
        return store_pb2.ApiKey(name="good", scope="write", vector_stores=["vs_1"])

    keys = Keys((), lookup, count, lambda: now[0])

    async def scenario() -> None:
        with pytest.raises(Unavailable):
            await keys.required()  # never heard from the store
        down[0] = False
        assert await keys.required() is False
        held[0] = 1
        assert await keys.required() is False  # cached for a few seconds
        now[0] = 6.0
        assert await keys.required() is True
        down[0] = True
        now[0] = 12.0
        assert await keys.required() is True  # the last answer, while the store is away
        who = await keys.identify("rk-good")
        assert who is not None and who.allows("read") and not who.allows("admin")
        assert who.reaches("vs_1") and not who.reaches("vs_2")
        assert await keys.identify("rk-bad") is None

    asyncio.run(scenario())
    boot = Keys(("boot",), lookup, count, lambda: now[0])
    assert asyncio.run(boot.required()) is True
    admin = asyncio.run(boot.identify("boot"))
    assert admin is not None and admin.allows("admin") and admin.reaches("vs_anything")
