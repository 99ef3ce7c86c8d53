"""A store that stops answering (SIGSTOP) costs a search its own short deadline, not the
store's: a quick 503 with Retry-After, and searches work again once the store does."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from services.launcher import Stack
from tests.harness import started_stack

DEADLINE = 1.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("stall"), RAGD_SEARCH_STORE_TIMEOUT=str(DEADLINE)
    )


def test_a_stalled_store_is_a_quick_503_for_searches(stack: Stack) -> None:
    with httpx.Client(base_url=stack.gateway_url, timeout=60) as api:
        store_id = api.post("/v1/vector_stores", json={"name": "stall"}).json()["id"]
        for mode in ("vector", "lexical"):
            ok = api.post(f"/v1/vector_stores/{store_id}/search", json={"query": "q", "mode": mode})
            assert ok.status_code == 200, ok.text
        store = stack.children["store"]
        os.kill(store.pid, signal.SIGSTOP)
        try:
            for mode in ("vector", "lexical"):
                started = time.monotonic()
                reply = api.post(
                    f"/v1/vector_stores/{store_id}/search", json={"query": "q", "mode": mode}
                )
                waited = time.monotonic() - started
                assert reply.status_code == 503, reply.text
                assert reply.json()["error"]["code"] == "service_unavailable"
                assert reply.headers["Retry-After"] == "1"
                assert waited < DEADLINE + 2.0, waited
        finally:
            os.kill(store.pid, signal.SIGCONT)
        again = api.post(f"/v1/vector_stores/{store_id}/search", json={"query": "q"})
        assert again.status_code == 200, again.text
