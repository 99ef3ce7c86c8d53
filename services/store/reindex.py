"""Re-indexing a vector store online: a new model, or new chunking, without a moment of mixed or
missing vectors.

The new index is built in a hidden vector store, the shadow (`vector_stores.shadow_of` names the
vector store it will replace), by the ordinary durable ingest jobs: each of the vector_store's
files is attached to the shadow with the new chunking, so workers re-chunk it from its
retained bytes and embed it with the shadow's model (chunk sizes count the new model's tokens,
so chunks are always cut anew). Searches keep using the vector store meanwhile. Files attached,
detached, re-labelled or cancelled in the vector store meanwhile are attached, detached,
re-labelled or cancelled in the shadow in the same transaction (vector_store_files.py).

The transaction that finishes the shadow's last file also ends the re-index (shadow.settle),
switching the vector store over to its new index or keeping the old one. This module starts,
cancels and reports re-indexes.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from services.common.vocabulary import CANCELLED, IN_PROGRESS
from services.store import shadow, vector_store_files, vector_stores
from services.store.db import atomic
from services.store.errors import InvalidArgument, NoReindex, ReindexRunning
from services.store.records import Chunking, FileCounts, Reindex, VectorStore
from services.store.sql import Connection


def start(
    conn: Connection,
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
        if shadow.active(conn, key) is not None:
            raise ReindexRunning(
                f"vector store {vector_store_id!r} is being re-indexed already; wait for it to "
                "finish or cancel it first"
            )
        new_index = vector_stores.insert(
            conn,
            public_id=shadow.PREFIX + secrets.token_hex(12),
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
                new_index,
                vector_store.model,
                vector_store.dimensions,
                model,
                dimensions,
                vector_store_files.encode_chunking(chunking),
                max_chunk_tokens,
                now,
            ),
        )
        active = shadow.active(conn, key)
        assert active is not None
        rows: list[Any] = conn.execute(
            "SELECT file_id, attributes, chunking_json, batch_id FROM vector_store_files"
            " WHERE vector_store_id = ? AND status IN ('in_progress', 'completed') ORDER BY rowid",
            (key,),
        ).fetchall()
        for file_id, attributes_json, chunking_json, batch_id in rows:
            vector_store_files.add(
                conn,
                new_index,
                "",
                file_id,
                attributes_json=attributes_json,
                chunking_json=vector_store_files.shadow_chunking(active, chunking_json),
                batch_id=batch_id,
                now=now,
                mirror=False,
            )
        shadow.settle(conn, new_index, now)
        return lookup(conn, vector_store_id)


def cancel(conn: Connection, *, vector_store_id: str, now: int) -> VectorStore:
    """Stops the re-index in progress: its shadow is dropped, the vector store is unchanged."""
    with atomic(conn):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        active = shadow.active(conn, key)
        if active is None:
            raise NoReindex(f"vector store {vector_store_id!r} has no re-index in progress")
        shadow.finish(conn, active, CANCELLED, now, "")
        return lookup(conn, vector_store_id)


def lookup(conn: Connection, vector_store_id: str) -> VectorStore:
    key, vector_store = vector_stores.lookup(conn, vector_store_id)
    return with_reindex(conn, key, vector_store)


def with_reindex(conn: Connection, key: int, vector_store: VectorStore) -> VectorStore:
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
     total, completed, failed, error, new_index) = row  # fmt: skip
    if status == IN_PROGRESS:
        counts = shadow.counts(conn, new_index)
    else:
        counts = FileCounts(
            completed=completed,
            failed=failed,
            cancelled=total - completed - failed,
        )
    reindex = Reindex(status, from_model, from_dims, model, dims, created, finished, counts, error)
    return dataclasses.replace(vector_store, reindex=reindex)
