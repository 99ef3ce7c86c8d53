"""Fixtures shared by the test modules: the real three-service stack, a store repository on a
fake clock, and the real embedding model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.embedder.model import EmbeddingModel
from services.launcher import Stack
from services.store.repository import Repository
from tests.embedder_fixtures import load_model, load_reference
from tests.harness import started_stack
from tests.store_fixtures import DIMS, MODEL, FakeClock, open_repository


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "repo(checks): functions of the database path the repo fixture calls after each test",
    )


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="session")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.gateway_url, timeout=60.0) as http:
        yield http


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def repo(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Repository]:
    """A migrated store in tmp_path on the fake clock.

    A module's `pytestmark = pytest.mark.repo(checks=[...])` names checks of its database
    (such as check_invariants) run after each test.
    """
    marker = request.node.get_closest_marker("repo")
    checks = marker.kwargs.get("checks", ()) if marker is not None else ()
    repository = open_repository(tmp_path / "ragd.db", clock=clock)
    try:
        yield repository
        for check in checks:
            check(repository.path)
    finally:
        repository.close()


@pytest.fixture
def vs_id(repo: Repository) -> str:
    return repo.create_vector_store("notes", MODEL, DIMS).id


@pytest.fixture(scope="session")
def embedding_model() -> EmbeddingModel:
    """The real model, loaded once for the whole run."""
    return load_model()


@pytest.fixture(scope="session")
def reference() -> list[dict[str, Any]]:
    return load_reference()
