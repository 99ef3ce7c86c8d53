"""RAGD_DATABASE_URL: the store's PostgreSQL settings (services/store/config.py), and its
refusal to start on them while the store has no PostgreSQL engine (issue 31)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.config import ConfigError, Env
from services.store.config import StoreConfig, postgres_settings
from tests.harness import free_port

ROOT = Path(__file__).resolve().parent.parent
URL = "postgresql://ragd@db.internal:5432/ragd?sslmode=verify-full"


def _settings(**variables: str) -> object:
    return postgres_settings(Env({f"RAGD_{name}": value for name, value in variables.items()}))


def test_no_url_is_sqlite() -> None:
    assert postgres_settings(Env({})) is None
    assert StoreConfig(db_path=Path("x.db")).engine == "sqlite"


def test_the_url_and_the_pool_settings() -> None:
    settings = postgres_settings(
        Env(
            {
                "RAGD_DATABASE_URL": URL,
                "RAGD_DATABASE_POOL_MIN": "2",
                "RAGD_DATABASE_POOL_MAX": "8",
                "RAGD_DATABASE_POOL_TIMEOUT": "2.5",
            }
        )
    )
    assert settings is not None
    assert (settings.url, settings.pool_min, settings.pool_max, settings.pool_timeout) == (
        URL,
        2,
        8,
        2.5,
    )


def test_the_pool_holds_a_connection_per_store_thread_by_default() -> None:
    settings = postgres_settings(Env({"RAGD_DATABASE_URL": URL}), threads=6)
    assert settings is not None and settings.pool_max == 6


def test_the_password_from_a_file_is_put_into_the_url(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("p@ss/w:rd\n", encoding="utf-8")
    settings = postgres_settings(
        Env({"RAGD_DATABASE_URL": URL, "RAGD_DATABASE_PASSWORD_FILE": str(secret)})
    )
    assert settings is not None
    assert settings.url.startswith("postgresql://ragd:p%40ss%2Fw%3Ard@db.internal:5432/ragd?")
    # Never shown: not in the repr, not in the URL for logs.
    assert "p%40ss" not in repr(settings)
    assert settings.display == "postgresql://ragd:***@db.internal:5432/ragd?sslmode=verify-full"


def test_the_whole_url_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("postgres://ragd:secret@db/ragd\n", encoding="utf-8")
    settings = postgres_settings(Env({"RAGD_DATABASE_URL_FILE": str(secret)}))
    assert settings is not None and settings.url == "postgres://ragd:secret@db/ragd"
    assert "secret" not in settings.display


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"DATABASE_URL": "mysql://ragd:secret@db/ragd"}, "must be a PostgreSQL URL"),
        ({"DATABASE_URL": "postgresql://ragd@db:port/ragd"}, "port that is not a number"),
        ({"DATABASE_URL": "postgresql://ragd@db:5432"}, "names no database"),
        ({"DATABASE_PASSWORD": "secret"}, "RAGD_DATABASE_URL is not"),
        (
            {"DATABASE_URL": "postgresql://ragd:a@db/ragd", "DATABASE_PASSWORD": "b"},
            "given twice",
        ),
        ({"DATABASE_URL": "postgresql://db/ragd", "DATABASE_PASSWORD": "b"}, "needs a user"),
        ({"DATABASE_URL": URL, "DATABASE_URL_FILE": "/x"}, "not both"),
        ({"DATABASE_URL": URL, "DATABASE_POOL_MIN": "5", "DATABASE_POOL_MAX": "2"}, "at least"),
        ({"DATABASE_URL": URL, "DATABASE_POOL_TIMEOUT": "0"}, "above 0"),
    ],
)
def test_bad_settings_are_refused_clearly(variables: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _settings(**variables)
    assert "secret" not in str(caught.value)


def test_a_url_chooses_the_postgres_engine() -> None:
    env = Env({"RAGD_DATABASE_URL": "postgresql://ragd:secret@db/ragd"})
    assert StoreConfig.from_env(env).engine == "postgres"


def test_a_store_whose_database_is_unreachable_says_so_in_one_line(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RAGD_STORE_LISTEN": "127.0.0.1:0",
        "RAGD_DB_PATH": str(tmp_path / "ragd.db"),
        # Nothing listens there.
        "RAGD_DATABASE_URL": f"postgresql://ragd:secret@127.0.0.1:{free_port()}/ragd",
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.store"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "cannot open the database: PostgreSQL is unavailable" in done.stderr
    assert "secret" not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert not (tmp_path / "ragd.db").exists()
