"""Where ragd keeps its files when not told: the XDG base directories, each under ragd/.

The database (RAGD_DB_PATH wins) goes to $XDG_DATA_HOME/ragd/ (~/.local/share/ragd), what the
CLI remembers between runs (the chat line history) to $XDG_STATE_HOME/ragd
(~/.local/state/ragd). The specification ignores a relative path in either variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

APP = "ragd"


def _base(variable: str, fallback: str, environ: Mapping[str, str] | None) -> Path:
    value = (os.environ if environ is None else environ).get(variable, "")
    if value and Path(value).is_absolute():
        return Path(value)
    return Path.home() / fallback


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    return _base("XDG_DATA_HOME", ".local/share", environ) / APP


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    return _base("XDG_STATE_HOME", ".local/state", environ) / APP


def default_db_path(environ: Mapping[str, str] | None = None) -> Path:
    return data_dir(environ) / "ragd.db"
