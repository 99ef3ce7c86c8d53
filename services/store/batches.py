"""File batches: many files attached to a vector store at once, cancellable as a whole."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import cast

from services.common.vocabulary import FILE_STATUSES, MAX_BATCH_FILES
from services.store import ingest, shadow, vector_store_files, vector_stores
from services.store.compat import check_indexing
from services.store.db import atomic
from services.store.errors import BatchNotFound, FileNotFound, InvalidArgument
from services.store.records import BatchFileInput, EmbeddingModel, FileBatch, FileCounts
from services.store.sql import Connection

ID_PREFIX = "vsfb_"


def _load(conn: Connection, key: int, vector_store_id: str, batch_id: str) -> FileBatch:
    row = conn.execute(
        "SELECT created_at, cancelled_at FROM file_batches WHERE id = ? AND vector_store_id = ?",
        (batch_id, key),
    ).fetchone()
    if row is None:
        raise BatchNotFound(vector_store_id, batch_id)
    created_at, cancelled_at = row
    by_status = {
        cast(str, status): cast(int, count)
        for status, count in conn.execute(
            "SELECT status, count(*) FROM vector_store_files WHERE batch_id = ? GROUP BY status",
            (batch_id,),
        )
    }
    counts = FileCounts(**{status: by_status.get(status, 0) for status in FILE_STATUSES})
    if cancelled_at is not None:
        status = "cancelled"
    elif counts.in_progress:
        status = "in_progress"
    else:
        status = "completed"
    return FileBatch(
        id=batch_id,
        vector_store_id=vector_store_id,
        created_at=created_at,
        status=status,
        file_counts=counts,
    )


def create(
    conn: Connection,
    *,
    vector_store_id: str,
    files: Sequence[BatchFileInput],
    now: int,
    model: EmbeddingModel | None = None,
    key_name: str = "",
) -> FileBatch:
    """Attaches every file (as a single attach: a file already in the vector store is left as
    it is) in one transaction.

    Newly attached and re-attached files record the batch; deduplicated ones keep their row.
    A `model` must be the vector_store's (check_indexing).
    """
    if not 1 <= len(files) <= MAX_BATCH_FILES:
        raise InvalidArgument(f"a file batch holds 1..{MAX_BATCH_FILES} files, got {len(files)}")
    prepared = []
    for item in files:
        if not item.file_id:
            raise InvalidArgument("every file in a batch needs a file_id")
        prepared.append(
            (
                item,
                ingest.attributes_json(item.attributes),
                vector_store_files.encode_chunking(item.chunking),
            )
        )
    batch_id = ID_PREFIX + secrets.token_hex(12)
    with atomic(conn):
        key, vector_store = vector_stores.lookup(conn, vector_store_id)
        if model is not None:
            check_indexing(vector_store, model.name, model.dimensions)
        for item in files:
            found = conn.execute("SELECT 1 FROM files WHERE id = ?", (item.file_id,)).fetchone()
            if found is None:
                raise FileNotFound(item.file_id)
        conn.execute(
            "INSERT INTO file_batches (id, vector_store_id, created_at) VALUES (?, ?, ?)",
            (batch_id, key, now),
        )
        for item, attributes_json, chunking_json in prepared:
            vector_store_files.add(
                conn,
                key,
                vector_store_id,
                item.file_id,
                attributes_json=attributes_json,
                chunking_json=chunking_json,
                batch_id=batch_id,
                now=now,
                key_name=key_name,
            )
        return _load(conn, key, vector_store_id, batch_id)


def get(conn: Connection, *, vector_store_id: str, batch_id: str) -> FileBatch:
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        return _load(conn, key, vector_store_id, batch_id)


def cancel(conn: Connection, *, vector_store_id: str, batch_id: str, now: int) -> FileBatch:
    """Cancels the batch's files still in progress and drops their jobs.

    A worker holding one of those jobs finds it gone when it renews, completes or fails it, so
    nothing of a cancelled file is ever written. A batch with nothing left in progress is
    returned unchanged: there is nothing to cancel.
    """
    with atomic(conn):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        batch = _load(conn, key, vector_store_id, batch_id)
        if batch.status != "in_progress":
            return batch
        # The batch's files in progress, here and in the new index of a re-index under way.
        active = shadow.active(conn, key)
        keys = (key, active.shadow if active else key)
        cancelled = (
            "SELECT file_id FROM vector_store_files WHERE vector_store_id = ? AND batch_id = ?"
            " AND status = 'in_progress'"
        )
        conn.execute(
            f"DELETE FROM jobs WHERE vector_store_id IN (?, ?) AND file_id IN ({cancelled})",
            (*keys, key, batch_id),
        )
        conn.execute(
            "UPDATE vector_store_files SET status = 'cancelled' WHERE vector_store_id IN (?, ?)"
            f" AND status = 'in_progress' AND file_id IN ({cancelled})",
            (*keys, key, batch_id),
        )
        conn.execute("UPDATE file_batches SET cancelled_at = ? WHERE id = ?", (now, batch_id))
        if active is not None:
            shadow.settle(conn, active.shadow, now)
        return _load(conn, key, vector_store_id, batch_id)
