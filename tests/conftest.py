"""Session fixtures: the real three-service stack on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from services.launcher import Stack
from tests.harness import started_stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="session")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.gateway_url, timeout=60.0) as http:
        yield http
