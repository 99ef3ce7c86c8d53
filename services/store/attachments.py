"""Files in vector stores: attach (with its ingest job), look up, list, update, detach; each
one transaction built from the steps in vector_store_files.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from services.common.vocabulary import FILE_STATUSES
from services.store import files, ingest, vector_store_files, vector_stores
from services.store.compat import check_indexing
from services.store.db import atomic
from services.store.errors import BatchNotFound, InvalidArgument
from services.store.paging import fetch_page, unknown_cursor
from services.store.records import (
    AttributeValue,
    Chunking,
    EmbeddingModel,
    File,
    NewFile,
    Page,
    StoredChunk,
    VectorStoreFile,
    chunk_public_id,
)
from services.store.sql import Connection
from services.store.vector_store_files import LIVE_STATUSES, fetch


def attach(
    conn: Connection,
    *,
    vector_store_id: str,
    file_id: str = "",
    upload: NewFile | None = None,
    attributes: Mapping[str, AttributeValue],
    chunking: Chunking | None,
    now: int,
    model: EmbeddingModel | None = None,
    key_name: str = "",
) -> VectorStoreFile:
    """Attaches a stored file (`file_id`), or stores and attaches an `upload`, with an ingest
    job, in one transaction. A `model` must be the vector_store's (check_indexing).

    An upload whose content the vector store already holds stores nothing: the file indexed or
    being indexed is returned, marked deduplicated; a failed or cancelled one with that
    content is attached again instead of storing a second copy.
    """
    attributes_json = ingest.attributes_json(attributes)
    chunking_json = vector_store_files.encode_chunking(chunking)
    new: File | None = None
    if upload is not None:
        new = files.new_record(
            filename=upload.filename, purpose=upload.purpose, content=upload.content, now=now
        )
    elif not file_id:
        raise InvalidArgument("file_id is required")
    with atomic(conn):
        key, vector_store = vector_stores.lookup(conn, vector_store_id)
        if model is not None:
            check_indexing(vector_store, model.name, model.dimensions)
        if new is not None:
            twin = _by_content(conn, key, new.sha256)
            if twin is not None and twin[1] in LIVE_STATUSES:
                return fetch(conn, key, vector_store_id, twin[0], deduplicated=True)
            if twin is not None:
                file_id = twin[0]
            else:
                # An upload belongs to the vector store's project and to the key that sent it.
                files.insert(
                    conn,
                    new,
                    upload.content if upload else b"",
                    project=vector_stores.project_of(conn, key),
                    created_by=key_name,
                )
                file_id = new.id
        record, _ = vector_store_files.add(
            conn,
            key,
            vector_store_id,
            file_id,
            attributes_json=attributes_json,
            chunking_json=chunking_json,
            batch_id=None,
            now=now,
            key_name=key_name,
        )
    return record


def _by_content(conn: Connection, key: int, sha256: str) -> tuple[str, str] | None:
    """(file id, status) of the vector_store's file with this content: one in progress or
    completed if any, else a failed or cancelled one."""
    row = conn.execute(
        "SELECT file_id, status FROM vector_store_files WHERE vector_store_id = ? AND sha256 = ?"
        " ORDER BY status NOT IN ('in_progress', 'completed'), created_at, rowid LIMIT 1",
        (key, sha256),
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def get(conn: Connection, vector_store_id: str, file_id: str) -> VectorStoreFile:
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        return fetch(conn, key, vector_store_id, file_id)


def list_page(
    conn: Connection,
    *,
    vector_store_id: str,
    limit: int,
    order: str,
    after: str | None,
    before: str | None,
    status: str | None,
    batch_id: str | None,
) -> Page[VectorStoreFile]:
    if status and status not in FILE_STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(FILE_STATUSES)}, got {status!r}")
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        conditions = ["cf.vector_store_id = ?"]
        params: list[Any] = [key]
        if status:
            conditions.append("cf.status = ?")
            params.append(status)
        if batch_id:
            found = conn.execute(
                "SELECT 1 FROM file_batches WHERE id = ? AND vector_store_id = ?", (batch_id, key)
            ).fetchone()
            if found is None:
                raise BatchNotFound(vector_store_id, batch_id)
            conditions.append("cf.batch_id = ?")
            params.append(batch_id)
        rows, has_more = fetch_page(
            conn,
            select=vector_store_files.SELECT,
            conditions=conditions,
            params=params,
            sort_columns=("cf.created_at", "cf.rowid"),
            limit=limit,
            order=order,
            after=_cursor(conn, key, after, "after"),
            before=_cursor(conn, key, before, "before"),
        )
    items = [vector_store_files.to_record(row, vector_store_id) for row in rows]
    return Page(items=items, has_more=has_more)


def _cursor(conn: Connection, key: int, file_id: str | None, name: str) -> tuple[Any, ...] | None:
    if not file_id:
        return None
    row = conn.execute(
        "SELECT created_at, rowid FROM vector_store_files"
        " WHERE vector_store_id = ? AND file_id = ?",
        (key, file_id),
    ).fetchone()
    if row is None:
        raise unknown_cursor(name, file_id, "file id in this vector store")
    return tuple(row)


def update_attributes(
    conn: Connection,
    *,
    vector_store_id: str,
    file_id: str,
    attributes: Mapping[str, AttributeValue],
) -> VectorStoreFile:
    """Replaces the attributes; the chunks stay, since filters read attributes at search time."""
    attributes_json = ingest.attributes_json(attributes)
    with atomic(conn):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        fetch(conn, key, vector_store_id, file_id)
        vector_store_files.set_attributes(conn, key, file_id, attributes_json)
        return fetch(conn, key, vector_store_id, file_id)


def detach(conn: Connection, *, vector_store_id: str, file_id: str, now: int) -> None:
    with atomic(conn):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        fetch(conn, key, vector_store_id, file_id)
        vector_store_files.remove(conn, key, file_id, now)


def chunks(
    conn: Connection, *, vector_store_id: str, file_id: str
) -> tuple[VectorStoreFile, list[StoredChunk]]:
    """The file's row and its stored chunks in order (none until it is completed)."""
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id, counted=False)
        record = fetch(conn, key, vector_store_id, file_id)
        rows = cast(
            list[tuple[int, int, str, int]],
            conn.execute(
                "SELECT id, chunk_index, text, token_count FROM chunks"
                " WHERE vector_store_id = ? AND file_id = ? ORDER BY chunk_index",
                (key, file_id),
            ).fetchall(),
        )
    return record, [
        StoredChunk(chunk_public_id(chunk), index, text, tokens)
        for chunk, index, text, tokens in rows
    ]
