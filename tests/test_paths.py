"""Where ragd keeps files when not told: XDG's data directory for the database (RAGD_DB_PATH
wins), XDG's state directory for the CLI; `make run` keeps using an earlier data/ragd.db."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services import run
from services.common.config import Env
from services.common.paths import data_dir, default_db_path, state_dir
from services.launcher import Stack
from services.store.config import StoreConfig


def test_xdg_directories_and_their_defaults() -> None:
    home = Path.home()
    assert data_dir({}) == home / ".local/share/ragd"
    assert state_dir({}) == home / ".local/state/ragd"
    env = {"XDG_DATA_HOME": "/srv/data", "XDG_STATE_HOME": "/srv/state"}
    assert default_db_path(env) == Path("/srv/data/ragd/ragd.db")
    assert state_dir(env) == Path("/srv/state/ragd")
    # The specification: a relative path is invalid and ignored.
    assert data_dir({"XDG_DATA_HOME": "relative/data"}) == home / ".local/share/ragd"


def test_the_store_defaults_to_the_data_directory_and_ragd_db_path_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert StoreConfig.from_env(Env({})).db_path == tmp_path / "ragd" / "ragd.db"
    assert StoreConfig().db_path == tmp_path / "ragd" / "ragd.db"
    chosen = StoreConfig.from_env(Env({"RAGD_DB_PATH": "/srv/ragd.db"}))
    assert chosen.db_path == Path("/srv/ragd.db")


def test_make_run_keeps_an_earlier_data_ragd_db(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RAGD_DB_PATH", raising=False)
    assert run.default_env()["RAGD_DB_PATH"] == str(tmp_path / "xdg" / "ragd" / "ragd.db")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ragd.db").write_bytes(b"")
    assert run.default_env()["RAGD_DB_PATH"] == "data/ragd.db"
    monkeypatch.setenv("RAGD_DB_PATH", "/srv/ragd.db")
    assert run.default_env()["RAGD_DB_PATH"] == "/srv/ragd.db"


def test_a_store_started_without_ragd_db_path_writes_under_xdg_data_home(tmp_path: Path) -> None:
    env = {"RAGD_STORE_LISTEN": "127.0.0.1:0", "XDG_DATA_HOME": str(tmp_path / "xdg")}
    saved = os.environ.pop("RAGD_DB_PATH", None)
    stack = Stack(env, log_dir=tmp_path / "logs")
    try:
        stack.start_service("store")
        database = tmp_path / "xdg" / "ragd" / "ragd.db"
        assert database.exists()
        # Owner only, as the store makes its files: chat history and documents in clear.
        assert database.stat().st_mode & 0o777 == 0o600
        assert database.parent.stat().st_mode & 0o777 == 0o700
    finally:
        stack.stop()
        if saved is not None:
            os.environ["RAGD_DB_PATH"] = saved
