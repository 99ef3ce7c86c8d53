"""Writing one file's chunks and their vectors into a vector store, in one transaction."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import cast

from services.common.vectors import FloatMatrix, to_bytes
from services.store import engine, vector_stores, windows
from services.store.compat import check_indexing, check_vectors
from services.store.db import atomic
from services.store.errors import InvalidArgument
from services.store.records import AddChunksResult, AttributeValue, ChunkInput
from services.store.sql import Connection, dialect
from services.store.vector_stores import lookup

# Bytes a float32 vector component occupies, counted into usage_bytes.
_FLOAT_BYTES = 4


def usage_bytes(texts: Sequence[str], dimensions: int, vectors: int | None = None) -> int:
    """What a file costs a vector store: UTF-8 text bytes plus 4 bytes per vector component
    (`vectors`: how many, one per text unless a long chunk has several windows)."""
    count = len(texts) if vectors is None else vectors
    return sum(len(text.encode()) for text in texts) + _FLOAT_BYTES * dimensions * count


def attributes_json(attributes: Mapping[str, AttributeValue]) -> str:
    for key, value in attributes.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"attribute names must be non-empty strings, got {key!r}")
        if isinstance(value, bool | str):
            continue
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidArgument(
                f"attribute {key!r} must be a string, a finite number or a boolean, got {value!r}"
            )
    return json.dumps(dict(attributes), sort_keys=True)


def check_chunks(
    chunks: Sequence[ChunkInput], vectors: FloatMatrix, window_counts: Sequence[int] = ()
) -> None:
    """Raises InvalidArgument unless there is one usable vector per chunk's window (one
    window each when `window_counts` is empty)."""
    if vectors.ndim != 2:
        raise InvalidArgument(
            f"expected one vector per chunk ({len(chunks)}), got an array of shape {vectors.shape}"
        )
    windows.starts(len(chunks), window_counts, vectors.shape[0])
    check_token_counts(chunks)
    check_vectors(vectors, "vector")


def check_token_counts(chunks: Sequence[ChunkInput]) -> None:
    for index, chunk in enumerate(chunks):
        if chunk.token_count < 0:
            raise InvalidArgument(f"chunk {index} has a negative token_count")


def delete_chunks(conn: Connection, key: int, file_id: str) -> None:
    """Deletes a file's chunks, their full-text rows and their vectors from a vector store
    (inside a transaction)."""
    rows = conn.execute(
        "SELECT c.id, cf.vectors_pending FROM chunks AS c JOIN vector_store_files AS cf"
        " ON cf.vector_store_id = c.vector_store_id AND cf.file_id = c.file_id"
        " WHERE c.vector_store_id = ? AND c.file_id = ?",
        (key, file_id),
    ).fetchall()
    ids = [cast(int, row[0]) for row in rows]
    indexes = engine.of(conn)
    indexes.vectors.delete(conn, key, [cast(int, row[0]) for row in rows if not row[1]])
    indexes.fulltext.remove(conn, key, ids)
    conn.execute("DELETE FROM chunks WHERE vector_store_id = ? AND file_id = ?", (key, file_id))


def insert_chunks(
    conn: Connection,
    key: int,
    file_id: str,
    chunks: Sequence[ChunkInput],
    vectors: FloatMatrix | None,
    window_counts: Sequence[int] = (),
) -> None:
    """Writes chunk i with vector i (inside a transaction; the file has no chunks yet),
    and its full-text row; without vectors, the chunks and their full-text rows only. With
    `window_counts`, `vectors` holds each chunk's windows in turn (windows.py): the first is
    the chunk's vector, the others go to chunk_windows."""
    conn.executemany(
        "INSERT INTO chunks (vector_store_id, file_id, chunk_index, text, token_count)"
        " VALUES (?, ?, ?, ?, ?)",
        [(key, file_id, i, chunk.text, chunk.token_count) for i, chunk in enumerate(chunks)],
    )
    ids = conn.execute(
        "SELECT id FROM chunks WHERE vector_store_id = ? AND file_id = ? ORDER BY chunk_index",
        (key, file_id),
    ).fetchall()
    indexes = engine.of(conn)
    indexes.fulltext.add(conn, key, [cast(int, row[0]) for row in ids])
    if vectors is None:
        return
    chunk_ids = [cast(int, row[0]) for row in ids]
    first = vectors[windows.starts(len(chunks), window_counts, vectors.shape[0])]
    indexes.vectors.insert(
        conn,
        key,
        [(chunk, to_bytes(vector)) for chunk, vector in zip(chunk_ids, first, strict=True)],
    )
    extra = windows.extra_rows(chunk_ids, window_counts, vectors)
    if extra:
        indexes.vectors.insert_windows(
            conn, key, [(chunk, window, to_bytes(vector)) for chunk, window, vector in extra]
        )


def add_chunks(
    conn: Connection,
    *,
    vector_store_id: str,
    file_id: str,
    filename: str,
    attributes: Mapping[str, AttributeValue],
    chunks: Sequence[ChunkInput],
    vectors: FloatMatrix,
    model: str,
    now: int,
) -> AddChunksResult:
    """Stores a file's chunks (vector i belongs to chunk i) and returns what was written.

    Adding a file the vector store already holds replaces its chunks, so a retried ingest is
    harmless. Either everything is written or, on any error, nothing.
    """
    if not file_id:
        raise InvalidArgument("file_id is required")
    if not model:
        raise InvalidArgument("model is required: name the model that produced the vectors")
    check_chunks(chunks, vectors)
    attrs = attributes_json(attributes)
    texts = [chunk.text for chunk in chunks]
    dimensions = int(vectors.shape[1])
    usage = usage_bytes(texts, dimensions)

    with atomic(conn):
        key, vector_store = lookup(conn, vector_store_id, counted=False)
        check_indexing(vector_store, model, dimensions)
        previous = conn.execute(
            "SELECT chunk_count, usage_bytes FROM vector_store_files"
            " WHERE vector_store_id = ? AND file_id = ?",
            (key, file_id),
        ).fetchone()
        old_chunks, old_usage = previous if previous is not None else (0, 0)
        if previous is not None:
            delete_chunks(conn, key, file_id)
            # A file written directly is complete: any ingest job for it is moot.
            conn.execute(
                "DELETE FROM jobs WHERE vector_store_id = ? AND file_id = ?", (key, file_id)
            )
        # The file belongs to the vector store's project; an id of another project's file is
        # not this caller's to write to.
        project = vector_stores.project_of(conn, key)
        taken = conn.execute("SELECT project_id FROM files WHERE id = ?", (file_id,)).get
        if taken is not None and taken != project:
            raise InvalidArgument(f"file id {file_id!r} is taken; write the chunks under another")
        conn.execute(
            "INSERT INTO files (id, filename, created_at, project_id) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET filename = excluded.filename",
            (file_id, filename, now, project),
        )
        conn.execute(
            "INSERT INTO vector_store_files (vector_store_id, file_id, status, attributes,"
            " chunk_count, usage_bytes, created_at) VALUES (?, ?, 'completed', ?, ?, ?, ?)"
            " ON CONFLICT (vector_store_id, file_id) DO UPDATE SET status = excluded.status,"
            " attributes = excluded.attributes, chunk_count = excluded.chunk_count,"
            " usage_bytes = excluded.usage_bytes, last_error_code = '', last_error_message = ''",
            (key, file_id, attrs, len(chunks), usage, now),
        )
        insert_chunks(conn, key, file_id, chunks, vectors)
        conn.execute(
            "UPDATE vector_stores SET chunk_count = chunk_count + ?, file_count = file_count + ?,"
            " usage_bytes = usage_bytes + ?,"
            f" last_active_at = {dialect(conn).greatest}(last_active_at, ?) WHERE id = ?",
            (len(chunks) - old_chunks, 0 if previous else 1, usage - old_usage, now, key),
        )
    return AddChunksResult(file_id=file_id, chunk_count=len(chunks), usage_bytes=usage)
