"""Projects: what every vector store, file, conversation, response and API key belongs to
(OpenAI's projects). The default project (id 1, `proj_default`) always exists: objects made
with an open API or a bootstrap key, and everything made before projects, are its."""

from __future__ import annotations

import re
import secrets
from typing import Any

from services.store.db import atomic
from services.store.errors import InvalidArgument, ProjectExists, ProjectNotFound
from services.store.records import DEFAULT_PROJECT, Project
from services.store.sql import Connection

ID_PREFIX = "proj_"
DEFAULT_KEY = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_COLUMNS = "public_id, name, created_at"


def _project(row: Any) -> Project:
    return Project(id=str(row[0]), name=str(row[1]), created_at=int(row[2]))


def create(conn: Connection, name: str, now: int) -> Project:
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"a project's name is 1-64 letters, digits, '.', '_' and '-', got {name[:80]!r}"
        )
    public_id = ID_PREFIX + secrets.token_hex(12)
    with atomic(conn):
        if conn.execute("SELECT 1 FROM projects WHERE name = ?", (name,)).get is not None:
            raise ProjectExists(f"a project named {name!r} exists; pick another name")
        conn.execute(
            "INSERT INTO projects (public_id, name, created_at) VALUES (?, ?, ?)",
            (public_id, name, now),
        )
    return Project(public_id, name, now)


def list_all(conn: Connection) -> list[Project]:
    with atomic(conn, write=False):
        rows = conn.execute(f"SELECT {_COLUMNS} FROM projects ORDER BY id").fetchall()
    return [_project(row) for row in rows]


def key_of(conn: Connection, ref: str) -> int:
    """The integer key of the project with this id or name (inside a transaction); raises
    ProjectNotFound."""
    if ref == DEFAULT_PROJECT:
        return DEFAULT_KEY
    row = conn.execute(
        "SELECT id FROM projects WHERE public_id = ? OR name = ?", (ref, ref)
    ).fetchone()
    if row is None:
        raise ProjectNotFound(ref)
    return int(row[0])


def public_id(conn: Connection, key: int) -> str:
    row = conn.execute("SELECT public_id FROM projects WHERE id = ?", (key,)).fetchone()
    return str(row[0]) if row is not None else DEFAULT_PROJECT
