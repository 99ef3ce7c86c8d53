"""The tests' PostgreSQL (tests/postgres_server.py) and the engine parametrization
(tests/engines.py): the ground issue 31's engine port stands on."""

from __future__ import annotations

import pytest

from services.store.config import SUPPORTED_ENGINES
from tests import engines
from tests.engines import Database
from tests.postgres_server import TEMPLATE, PostgresServer, available

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


def test_a_fresh_database_has_pgvector(postgres: PostgresServer) -> None:
    name = postgres.create_database()
    try:
        rows = postgres.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'", database=name
        )
        assert rows and rows[0][0].startswith("0.8")
        distance = postgres.execute("SELECT '[1,0]'::vector <=> '[0,1]'::vector", database=name)
        assert distance == [(1.0,)]
    finally:
        postgres.drop_database(name)


def test_databases_are_apart_and_dropped(postgres: PostgresServer) -> None:
    first, second = postgres.create_database(), postgres.create_database()
    try:
        postgres.execute("CREATE TABLE t (x int)", database=first)
        postgres.execute("INSERT INTO t VALUES (1)", database=first)
        assert postgres.execute("SELECT to_regclass('t')", database=second) == [(None,)]
        # The template stays empty, so the next test's database does too.
        assert postgres.execute("SELECT to_regclass('t')", database=TEMPLATE) == [(None,)]
    finally:
        postgres.drop_database(first)
        postgres.drop_database(second)
    names = {row[0] for row in postgres.execute("SELECT datname FROM pg_database")}
    assert not {first, second} & names


def test_a_session_left_open_does_not_keep_its_database(postgres: PostgresServer) -> None:
    import psycopg

    name = postgres.create_database()
    connection = psycopg.connect(postgres.url(name))
    try:
        postgres.drop_database(name)
    finally:
        connection.close()
    assert postgres.execute(f"SELECT 1 FROM pg_database WHERE datname = '{name}'") == []


def test_the_database_fixture_names_the_engine(database: Database, engine: str) -> None:
    # Runs on SQLite; on PostgreSQL it skips until the store has the engine.
    assert database.engine == engine
    env = database.env()
    assert env["RAGD_DB_PATH"] == str(database.path)
    assert ("RAGD_DATABASE_URL" in env) == (engine == "postgres")


@pytest.mark.engines("sqlite")
def test_an_engines_marker_keeps_a_test_to_its_engine(engine: str) -> None:
    assert engine == "sqlite"


def test_the_engine_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGD_TEST_ENGINE", raising=False)
    assert engines.parameters(None) == ["sqlite", "postgres"]
    assert engines.stack_engine() == "sqlite"
    monkeypatch.setenv("RAGD_TEST_ENGINE", "postgres")
    assert engines.parameters(None) == ["postgres"]
    assert engines.stack_engine() == "postgres"
    [skipped] = engines.parameters(pytest.mark.engines("sqlite").mark)
    assert isinstance(skipped, type(pytest.param("x")))
    monkeypatch.setenv("RAGD_TEST_ENGINE", "mysql")
    with pytest.raises(pytest.UsageError):
        engines.chosen()


def test_postgres_skips_until_the_store_has_the_engine() -> None:
    reason = engines.unavailable("postgres")
    if "postgres" in SUPPORTED_ENGINES:
        assert reason is None
    else:
        assert reason is not None and "issue 31" in reason
