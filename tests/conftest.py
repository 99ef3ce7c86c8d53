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
from tests import engines
from tests.embedder_fixtures import load_model, load_reference
from tests.engines import Database
from tests.harness import started_stack
from tests.postgres_server import PostgresServer, start_server
from tests.store_fixtures import DIMS, MODEL, FakeClock, open_repository


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "repo(checks): functions of the database path the repo fixture calls after each test",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Engine-aware tests run once per engine (tests/engines.py); session scope, so that one
    # stack per engine serves every test that asks for it.
    if "engine" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("engines")
        metafunc.parametrize("engine", engines.parameters(marker), indirect=True, scope="session")


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A test that is not engine-aware runs on the session stack's engine: its `engines`
    # marker, if any, says whether it can.
    marker = item.get_closest_marker("engines")
    if marker is None or "engine" in getattr(item, "fixturenames", ()):
        return
    if engines.stack_engine() not in marker.args:
        allowed = " and ".join(marker.args)
        pytest.skip(f"runs on {allowed} only; the stack runs {engines.stack_engine()}")


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> str:
    """The store engine of this run of the test: "sqlite" or "postgres"."""
    name: str = request.param
    reason = engines.unavailable(name)
    if reason is not None:
        pytest.skip(reason)
    return name


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (started only if a test needs it)."""
    server = start_server(tmp_path_factory.mktemp("postgres") / "data")
    try:
        yield server
    finally:
        server.close()


def _database(request: pytest.FixtureRequest, engine: str, folder: Path) -> Iterator[Database]:
    if engine != "postgres":
        yield Database(engine, folder / "ragd.db")
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    name = server.create_database()
    try:
        yield Database(engine, folder / "ragd.db", server.url(name))
    finally:
        server.drop_database(name)


@pytest.fixture
def database(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[Database]:
    """An empty database of this run's engine: a file in tmp_path, or a fresh PostgreSQL
    database copied from the template (dropped after the test)."""
    yield from _database(request, engine, tmp_path)


def _stack(request: pytest.FixtureRequest, engine: str, folder: Path) -> Iterator[Stack]:
    for database in _database(request, engine, folder):
        yield from started_stack(folder, 1, **database.env())


@pytest.fixture(scope="session")
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The session's stack, on RAGD_TEST_ENGINE's engine (SQLite unless it says postgres)."""
    engine = engines.stack_engine()
    reason = engines.unavailable(engine)
    if reason is not None:
        pytest.skip(reason)
    yield from _stack(request, engine, tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="session")
def engine_stack(
    request: pytest.FixtureRequest, engine: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A stack per engine, for the flows that run on both (the session's `stack` when it is
    of this engine)."""
    if engine == engines.stack_engine():
        yield request.getfixturevalue("stack")
        return
    yield from _stack(request, engine, tmp_path_factory.mktemp(f"stack-{engine}"))


@pytest.fixture(scope="session")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.gateway_url, timeout=60.0) as http:
        yield http


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def repo(
    request: pytest.FixtureRequest, database: Database, clock: FakeClock
) -> Iterator[Repository]:
    """A migrated store of this run's engine on the fake clock.

    A module's `pytestmark = pytest.mark.repo(checks=[...])` names checks of its database
    (such as check_invariants) run after each test.
    """
    marker = request.node.get_closest_marker("repo")
    checks = marker.kwargs.get("checks", ()) if marker is not None else ()
    if database.url is not None:
        checks = ()  # they read SQLite's file (vec_N tables, PRAGMA foreign_key_check)
    repository = open_repository(database.path, clock=clock, url=database.url)
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
