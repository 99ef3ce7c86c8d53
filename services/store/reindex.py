"""Re-indexing a vector store online: a new model, or new chunking, without a moment of mixed or
missing vectors.

The new index is built in a hidden vector store, the shadow (`vector_stores.shadow_of` names the
vector store it will replace), by the ordinary durable ingest jobs: each of the vector_store's
files is attached to the shadow with the new chunking, so workers re-chunk it from its
retained bytes and embed it with the shadow's model (chunk sizes count the new model's tokens,
so chunks are always cut anew). Searches keep using the vector store meanwhile. Files attached,
detached, re-labelled or cancelled in the vector store meanwhile are attached, detached,
re-labelled or cancelled in the shadow in the same transaction (`mirror_*`).

The transaction that finishes the shadow's last file also ends the re-index (`settle`): if
every file the vector store had indexed is indexed anew, the shadow takes the vector_store's
public identity and the old index is dropped (one transaction: a search sees either index,
never both); if some failed, the shadow is dropped and the vector store keeps its old index,
with the first failure on the re-index record. A kill at any point leaves either state.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Any, cast

import apsw

from services.store import attachments, vector_stores
from services.store.db import atomic
from services.store.errors import InvalidArgument, NoReindex, ReindexRunning
from services.store.records import Chunking, FileCounts, Reindex, VectorStore

SHADOW_PREFIX = "vsx_"
IN_PROGRESS, COMPLETED, FAILED, CANCELLED = "in_progress", "completed", "failed", "cancelled"


@dataclass(frozen=True)
class _Active:
    id: int
    shadow: int
    chunking_json: str
    max_chunk_tokens: int


def _active(conn: apsw.Connection, key: int) -> _Active | None:
    row = conn.execute(
        "SELECT id, shadow_id, chunking_json, max_chunk_tokens FROM reindexes"
        " WHERE vector_store_id = ? AND status = 'in_progress'",
        (key,),
    ).fetchone()
    return None if row is None else _Active(*row)


def shadow_chunking(active: _Active, file_chunking_json: str) -> str:
    """The chunking of a file in the shadow: the re-index's, else the file's own, shortened to
    the new model's context."""
    if active.chunking_json:
        return active.chunking_json
    chunking = attachments.decode_chunking(file_chunking_json)
    limit = active.max_chunk_tokens
    if chunking is None or not limit or chunking.max_tokens <= limit:
        return file_chunking_json
    overlap = min(chunking.overlap_tokens, limit // 2)
    return attachments.encode_chunking(Chunking(limit, overlap))


def start(
    conn: apsw.Connection,
    *,
    vector_store_id: str,
    model: str,
    dimensions: int,
    chunking: Chunking | None,
    max_chunk_tokens: int,
    now: int,
) -> VectorStore:
    """Starts re-indexing the vector store with `model` at `dimensions`: every file chunked with
    `chunking` (None: each file's own, shortened to `max_chunk_tokens`, the new model's
    context, when longer). Raises ReindexRunning while one is in progress."""
    if not model or not 1 <= dimensions <= vector_stores.MAX_DIMENSIONS:
        raise InvalidArgument("a re-index needs the new model's name and dimensions")
    with atomic(conn):
        key, vector_store = vector_stores.lookup(conn, vector_store_id)
        if _active(conn, key) is not None:
            raise ReindexRunning(
                f"vector store {vector_store_id!r} is being re-indexed already; wait for it to "
                "finish or cancel it first"
            )
        shadow = vector_stores.insert(
            conn,
            public_id=SHADOW_PREFIX + secrets.token_hex(12),
            name="",
            model=model,
            dimensions=dimensions,
            now=now,
            max_input_tokens=max_chunk_tokens,
            shadow_of=key,
            project=vector_stores.project_of(conn, key),
        )
        conn.execute(
            "INSERT INTO reindexes (vector_store_id, shadow_id, status, from_model,"
            " from_dimensions, model, dimensions, chunking_json, max_chunk_tokens, created_at)"
            " VALUES (?, ?, 'in_progress', ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                shadow,
                vector_store.model,
                vector_store.dimensions,
                model,
                dimensions,
                attachments.encode_chunking(chunking),
                max_chunk_tokens,
                now,
            ),
        )
        active = _active(conn, key)
        assert active is not None
        rows: list[Any] = conn.execute(
            "SELECT file_id, attributes, chunking_json, batch_id FROM vector_store_files"
            " WHERE vector_store_id = ? AND status IN ('in_progress', 'completed') ORDER BY rowid",
            (key,),
        ).fetchall()
        for file_id, attributes_json, chunking_json, batch_id in rows:
            attachments.attach_in_transaction(
                conn,
                shadow,
                "",
                file_id,
                attributes_json=attributes_json,
                chunking_json=shadow_chunking(active, chunking_json),
                batch_id=batch_id,
                now=now,
                mirror=False,
            )
        settle(conn, shadow, now)
        return lookup(conn, vector_store_id)


def cancel(conn: apsw.Connection, *, vector_store_id: str, now: int) -> VectorStore:
    """Stops the re-index in progress: its shadow is dropped, the vector store is unchanged."""
    with atomic(conn):
        key, _ = vector_stores.lookup(conn, vector_store_id)
        active = _active(conn, key)
        if active is None:
            raise NoReindex(f"vector store {vector_store_id!r} has no re-index in progress")
        _finish(conn, active, CANCELLED, now, "")
        return lookup(conn, vector_store_id)


def lookup(conn: apsw.Connection, vector_store_id: str) -> VectorStore:
    key, vector_store = vector_stores.lookup(conn, vector_store_id)
    return with_reindex(conn, key, vector_store)


def with_reindex(conn: apsw.Connection, key: int, vector_store: VectorStore) -> VectorStore:
    """The vector store with its latest re-index, live counts while it runs."""
    row = conn.execute(
        "SELECT status, from_model, from_dimensions, model, dimensions, created_at, finished_at,"
        " files_total, files_completed, files_failed, last_error, shadow_id FROM reindexes"
        " WHERE vector_store_id = ? ORDER BY id DESC LIMIT 1",
        (key,),
    ).fetchone()
    if row is None:
        return vector_store
    (status, from_model, from_dims, model, dims, created, finished,
     total, completed, failed, error, shadow) = row  # fmt: skip
    if status == IN_PROGRESS:
        counts = _counts(conn, shadow)
    else:
        counts = FileCounts(
            completed=completed,
            failed=failed,
            cancelled=total - completed - failed,
        )
    reindex = Reindex(status, from_model, from_dims, model, dims, created, finished, counts, error)
    return dataclasses.replace(vector_store, reindex=reindex)


def _counts(conn: apsw.Connection, key: int) -> FileCounts:
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


# Called inside the vector_store's own write transactions.


def shadow_of_vector_store(conn: apsw.Connection, key: int) -> _Active | None:
    """The re-index in progress of the vector store with this key, if any."""
    return _active(conn, key)


def mirror_remove(conn: apsw.Connection, key: int, file_id: str, now: int) -> None:
    """A file leaves the vector store: it leaves its new index too (which may end the re-index:
    attachments.remove settles it)."""
    active = _active(conn, key)
    if active is not None:
        attachments.remove(conn, active.shadow, file_id, now)


def mirror_attributes(conn: apsw.Connection, key: int, file_id: str, attributes: str) -> None:
    active = _active(conn, key)
    if active is not None:
        conn.execute(
            "UPDATE vector_store_files SET attributes = ?"
            " WHERE vector_store_id = ? AND file_id = ?",
            (attributes, active.shadow, file_id),
        )


def settle(conn: apsw.Connection, key: int, now: int) -> None:
    """After a file of the vector store `key` was finished: if it is a shadow with no file in
    progress, the re-index ends, switching the vector store over or keeping it."""
    row = conn.execute(
        "SELECT r.id, r.shadow_id, r.chunking_json, r.max_chunk_tokens FROM reindexes AS r"
        " WHERE r.shadow_id = ? AND r.status = 'in_progress'",
        (key,),
    ).fetchone()
    if row is None:
        return
    active = _Active(*row)
    if conn.execute(
        "SELECT 1 FROM vector_store_files"
        " WHERE vector_store_id = ? AND status = 'in_progress' LIMIT 1",
        (key,),
    ).fetchone():
        return
    # (A cursor left open would keep the old index's tables from being dropped.)
    target = conn.execute("SELECT vector_store_id FROM reindexes WHERE id = ?", (active.id,))
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
        _finish(conn, active, FAILED, now, error)
        return
    _switch(conn, active, original, now)


def _finish(conn: apsw.Connection, active: _Active, status: str, now: int, error: str) -> None:
    counts = _counts(conn, active.shadow)
    conn.execute(
        "UPDATE reindexes SET status = ?, finished_at = ?, files_total = ?,"
        " files_completed = ?, files_failed = ?, last_error = ?, shadow_id = NULL WHERE id = ?",
        (status, now, counts.total, counts.completed, counts.failed, error, active.id),
    )
    vector_stores.drop(conn, active.shadow)


_IDENTITY = "public_id, name, metadata, created_at, last_active_at, expires_anchor, expires_days"


def _switch(conn: apsw.Connection, active: _Active, original: int, now: int) -> None:
    """The shadow becomes the vector store: identity, failed and cancelled files (they hold no
    chunks), batches and re-index history move to it; the old index is dropped."""
    shadow = active.shadow
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
    counts = _counts(conn, shadow)
    identity = cast(
        tuple[Any, ...],
        conn.execute(f"SELECT {_IDENTITY} FROM vector_stores WHERE id = ?", (original,)).fetchone(),
    )
    conn.execute(
        "UPDATE vector_stores SET public_id = ? WHERE id = ?",
        (SHADOW_PREFIX + secrets.token_hex(12), original),
    )
    conn.execute(
        "UPDATE vector_stores SET public_id = ?, name = ?, metadata = ?, created_at = ?,"
        " last_active_at = ?, expires_anchor = ?, expires_days = ?, shadow_of = NULL,"
        " file_count = ? WHERE id = ?",
        (*identity, counts.total, shadow),
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
        (now, counts.total, counts.completed, counts.failed, active.id),
    )
    vector_stores.drop(conn, original)
