"""Numbered, forward-only schema migrations keyed by PRAGMA user_version.

Migration N (1-based) is MIGRATIONS[N - 1]; a database at user_version V has had the first V
applied. Each migration runs in its own transaction together with the user_version bump, so a
crash leaves the database at the last completed version. Never edit or reorder a released
migration: append a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import apsw

from services.store.db import atomic
from services.store.errors import DatabaseTooNew

log = logging.getLogger(__name__)

Migration = Callable[[apsw.Connection], None]


def _script(sql: str) -> Migration:
    def run(conn: apsw.Connection) -> None:
        conn.execute(sql)

    return run


# Vectors live in one vec0 table per collection, named vec_<collections.id> and created with
# the collection; its rowids are chunks.id. Attributes belong to a file's membership in a
# collection (OpenAI updates them per vector-store file), so filters select collection_files
# rows, then their chunks, then an exact KNN restricted to those chunk ids.
_V1_INITIAL = """
CREATE TABLE collections (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    public_id      TEXT    NOT NULL UNIQUE,
    name           TEXT    NOT NULL,
    metadata       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    model          TEXT    NOT NULL,
    dimensions     INTEGER NOT NULL CHECK (dimensions BETWEEN 1 AND 8192),
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    chunk_count    INTEGER NOT NULL DEFAULT 0,
    file_count     INTEGER NOT NULL DEFAULT 0,
    usage_bytes    INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE files (
    id         TEXT    PRIMARY KEY,
    filename   TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE collection_files (
    collection_id INTEGER NOT NULL REFERENCES collections (id),
    file_id       TEXT    NOT NULL REFERENCES files (id),
    status        TEXT    NOT NULL
                  CHECK (status IN ('in_progress', 'completed', 'failed', 'cancelled')),
    attributes    TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(attributes)),
    chunk_count   INTEGER NOT NULL DEFAULT 0,
    usage_bytes   INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (collection_id, file_id)
) STRICT;
CREATE INDEX collection_files_file ON collection_files (file_id);

CREATE TABLE chunks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    collection_id INTEGER NOT NULL,
    file_id       TEXT    NOT NULL,
    chunk_index   INTEGER NOT NULL,
    text          TEXT    NOT NULL,
    token_count   INTEGER NOT NULL,
    UNIQUE (collection_id, file_id, chunk_index),
    FOREIGN KEY (collection_id, file_id) REFERENCES collection_files (collection_id, file_id)
) STRICT;
"""

MIGRATIONS: list[Migration] = [
    _script(_V1_INITIAL),
]


def schema_version(conn: apsw.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row is not None else 0


def migrate(conn: apsw.Connection, migrations: list[Migration] | None = None) -> int:
    """Applies pending migrations, each in its own transaction; returns the schema version."""
    steps = MIGRATIONS if migrations is None else migrations
    latest = len(steps)
    while True:
        with atomic(conn):
            # Read inside the write transaction: another process cannot migrate meanwhile.
            version = schema_version(conn)
            if version > latest:
                raise DatabaseTooNew(
                    f"the database is at schema version {version} but this build knows only "
                    f"up to {latest}; run a newer ragd or restore a backup made by this version"
                )
            if version == latest:
                return version
            steps[version](conn)
            conn.execute(f"PRAGMA user_version = {version + 1:d}")
        log.info("migrated the database to schema version %d", version + 1)
