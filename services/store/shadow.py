"""A re-index's new index, its shadow (reindex.py), as the vector store's own write
transactions see it: the re-index in progress, and its end once the shadow's last file is
finished (`settle`). Plain functions inside the caller's transaction.

If every file the vector store had indexed is indexed anew, the shadow takes the vector
store's public identity and the old index is dropped (one transaction: a search sees either
index, never both); if some failed, the shadow is dropped and the vector store keeps its old
index, with the first failure on the re-index record. A kill at any point leaves either state.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, cast

from services.common.vocabulary import CANCELLED, COMPLETED, FAILED, IN_PROGRESS
from services.store import vector_stores
from services.store.records import FileCounts
from services.store.sql import Connection

# The public id of a shadow, and of an old index in the moment before it is dropped.
PREFIX = "vsx_"


@dataclass(frozen=True)
class Active:
    """A re-index in progress."""

    id: int
    shadow: int
    # The re-index's chunking ("": each file's own), and the new model's context.
    chunking_json: str
    max_chunk_tokens: int


_ACTIVE = "SELECT id, shadow_id, chunking_json, max_chunk_tokens FROM reindexes"


def active(conn: Connection, key: int) -> Active | None:
    """The re-index in progress of the vector store with this key, if any."""
    row = conn.execute(
        f"{_ACTIVE} WHERE vector_store_id = ? AND status = 'in_progress'", (key,)
    ).fetchone()
    return None if row is None else Active(*row)


def counts(conn: Connection, key: int) -> FileCounts:
    rows = conn.execute(
        "SELECT status, count(*) FROM vector_store_files WHERE vector_store_id = ? GROUP BY status",
        (key,),
    )
    found = {str(status): int(count) for status, count in rows}
    return FileCounts(
        found.get(IN_PROGRESS, 0),
        found.get(COMPLETED, 0),
        found.get(FAILED, 0),
        found.get(CANCELLED, 0),
    )


def settle(conn: Connection, key: int, now: int) -> None:
    """After a file of the vector store `key` was finished: if it is a shadow with no file in
    progress, the re-index ends, switching the vector store over or keeping it."""
    row = conn.execute(
        f"{_ACTIVE} WHERE shadow_id = ? AND status = 'in_progress'", (key,)
    ).fetchone()
    if row is None:
        return
    found = Active(*row)
    if conn.execute(
        "SELECT 1 FROM vector_store_files"
        " WHERE vector_store_id = ? AND status = 'in_progress' LIMIT 1",
        (key,),
    ).fetchone():
        return
    # (A cursor left open would keep the old index's tables from being dropped.)
    target = conn.execute("SELECT vector_store_id FROM reindexes WHERE id = ?", (found.id,))
    original = int(cast(list[tuple[int]], target.fetchall())[0][0])
    lost = conn.execute(
        "SELECT n.file_id, n.last_error_message FROM vector_store_files AS n"
        " JOIN vector_store_files AS o ON o.file_id = n.file_id AND o.vector_store_id = ?"
        " WHERE n.vector_store_id = ? AND n.status <> 'completed' AND o.status = 'completed'"
        " ORDER BY n.rowid",
        (original, key),
    ).fetchall()
    if lost:
        file_id, message = lost[0]
        error = (
            f"{len(lost)} file(s) indexed with the old model could not be indexed anew, so the "
            f"vector store kept its old index; first: {file_id}: {message or 'cancelled'}"
        )
        finish(conn, found, FAILED, now, error)
        return
    _switch(conn, found, original, now)


def finish(conn: Connection, found: Active, status: str, now: int, error: str) -> None:
    """Ends the re-index without a switch (failed or cancelled): its shadow is dropped."""
    final = counts(conn, found.shadow)
    conn.execute(
        "UPDATE reindexes SET status = ?, finished_at = ?, files_total = ?,"
        " files_completed = ?, files_failed = ?, last_error = ?, shadow_id = NULL WHERE id = ?",
        (status, now, final.total, final.completed, final.failed, error, found.id),
    )
    vector_stores.drop(conn, found.shadow)


_IDENTITY = (
    "public_id, name, metadata, created_at, last_active_at, expires_anchor, expires_days,"
    " description"
)


def _switch(conn: Connection, found: Active, original: int, now: int) -> None:
    """The shadow becomes the vector store: identity, failed and cancelled files (they hold no
    chunks), batches and re-index history move to it; the old index is dropped."""
    shadow = found.shadow
    conn.execute(
        "INSERT INTO vector_store_files (vector_store_id, file_id, status, attributes, created_at,"
        " chunking_json, batch_id, sha256, last_error_code, last_error_message)"
        " SELECT ?, file_id, status, attributes, created_at, chunking_json, batch_id, sha256,"
        " last_error_code, last_error_message FROM vector_store_files AS o"
        " WHERE o.vector_store_id = ? AND o.status IN ('failed', 'cancelled')"
        " AND NOT EXISTS (SELECT 1 FROM vector_store_files AS n"
        "   WHERE n.vector_store_id = ? AND n.file_id = o.file_id)",
        (shadow, original, shadow),
    )
    final = counts(conn, shadow)
    identity = cast(
        tuple[Any, ...],
        conn.execute(f"SELECT {_IDENTITY} FROM vector_stores WHERE id = ?", (original,)).fetchone(),
    )
    conn.execute(
        "UPDATE vector_stores SET public_id = ? WHERE id = ?",
        (PREFIX + secrets.token_hex(12), original),
    )
    conn.execute(
        "UPDATE vector_stores SET public_id = ?, name = ?, metadata = ?, created_at = ?,"
        " last_active_at = ?, expires_anchor = ?, expires_days = ?, description = ?,"
        " shadow_of = NULL, file_count = ? WHERE id = ?",
        (*identity, final.total, shadow),
    )
    conn.execute(
        "UPDATE file_batches SET vector_store_id = ? WHERE vector_store_id = ?", (shadow, original)
    )
    conn.execute(
        "UPDATE reindexes SET vector_store_id = ? WHERE vector_store_id = ?", (shadow, original)
    )
    conn.execute(
        "UPDATE reindexes SET status = 'completed', finished_at = ?, files_total = ?,"
        " files_completed = ?, files_failed = ?, shadow_id = NULL WHERE id = ?",
        (now, final.total, final.completed, final.failed, found.id),
    )
    vector_stores.drop(conn, original)
