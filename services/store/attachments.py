"""Files in vector stores: attach (with its ingest job), look up, list, update, detach."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import apsw

from services.common.vocabulary import (
    COMPLETED,
    FILE_STATUSES,
    IN_PROGRESS,
    MAX_CHUNK_TOKENS,
    MIN_CHUNK_TOKENS,
)
from services.store import files, ingest, vector_stores
from services.store.compat import check_indexing
from services.store.db import atomic
from services.store.errors import (
    BatchNotFound,
    FileNotFound,
    InvalidArgument,
    VectorStoreFileNotFound,
)
from services.store.paging import fetch_page, unknown_cursor
from services.store.records import (
    AttributeValue,
    Chunking,
    EmbeddingModel,
    File,
    LastError,
    NewFile,
    Page,
    StoredChunk,
    VectorStoreFile,
    chunk_public_id,
)

STATUSES = FILE_STATUSES
# Statuses in which a file's content is (or is being) indexed: attaching it again is a no-op.
LIVE_STATUSES = (IN_PROGRESS, COMPLETED)

_SELECT = """
SELECT cf.file_id, cf.status, cf.created_at, f.filename, cf.attributes, cf.chunking_json,
       cf.chunk_count, cf.usage_bytes, cf.last_error_code, cf.last_error_message,
       coalesce(cf.batch_id, ''), cf.vectors_pending
FROM vector_store_files AS cf JOIN files AS f ON f.id = cf.file_id
"""


def _to_record(
    row: tuple[Any, ...], vector_store_id: str, *, deduplicated: bool = False
) -> VectorStoreFile:
    (file_id, status, created_at, filename, attributes, chunking, chunk_count, usage,
     error_code, error_message, batch_id, pending) = row  # fmt: skip
    return VectorStoreFile(
        file_id=file_id,
        vector_store_id=vector_store_id,
        status=status,
        created_at=created_at,
        filename=filename,
        attributes=json.loads(attributes),
        chunking=decode_chunking(chunking),
        chunk_count=chunk_count,
        usage_bytes=usage,
        last_error=LastError(error_code, error_message) if status == "failed" else None,
        batch_id=batch_id,
        deduplicated=deduplicated,
        vectors_pending=bool(pending),
    )


def fetch(
    conn: apsw.Connection,
    key: int,
    vector_store_id: str,
    file_id: str,
    *,
    deduplicated: bool = False,
) -> VectorStoreFile:
    """The file's row in the vector store (inside a transaction); raises VectorStoreFileNotFound."""
    row = conn.execute(
        f"{_SELECT} WHERE cf.vector_store_id = ? AND cf.file_id = ?", (key, file_id)
    ).fetchone()
    if row is None:
        raise VectorStoreFileNotFound(vector_store_id, file_id)
    return _to_record(row, vector_store_id, deduplicated=deduplicated)


def encode_chunking(chunking: Chunking | None) -> str:
    """The strategy as OpenAI reports it (a resolved "static" one), for the chunking column;
    raises InvalidArgument for sizes OpenAI does not allow."""
    if chunking is None:
        return ""
    size, overlap = chunking.max_tokens, chunking.overlap_tokens
    if not MIN_CHUNK_TOKENS <= size <= MAX_CHUNK_TOKENS:
        raise InvalidArgument(
            f"max_chunk_size_tokens must be {MIN_CHUNK_TOKENS}..{MAX_CHUNK_TOKENS}, got {size}"
        )
    if not 0 <= overlap <= size // 2:
        raise InvalidArgument(
            f"chunk_overlap_tokens must be 0..{size // 2} (half of max_chunk_size_tokens), "
            f"got {overlap}"
        )
    static = {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap}
    return json.dumps({"type": "static", "static": static})


def decode_chunking(raw: str) -> Chunking | None:
    if not raw:
        return None
    static = json.loads(raw)["static"]
    return Chunking(static["max_chunk_size_tokens"], static["chunk_overlap_tokens"])


def attach_in_transaction(
    conn: apsw.Connection,
    key: int,
    vector_store_id: str,
    file_id: str,
    *,
    attributes_json: str,
    chunking_json: str,
    batch_id: str | None,
    now: int,
    mirror: bool = True,
    key_name: str = "",
) -> tuple[VectorStoreFile, bool]:
    """Attaches a file with a pending job; returns the row and whether it was (re)attached.

    The same file, or another with identical content, already indexed or being indexed in the
    vector store is returned as it is, marked deduplicated, with nothing written. A failed or
    cancelled file is attached again (new settings, new job). A vector store being re-indexed
    gets the file attached to its new index too (unless `mirror` is off: that attach).
    `key_name`: the API key the job is queued for (its tokens count as that key's).
    """
    file_row = conn.execute("SELECT sha256 FROM files WHERE id = ?", (file_id,)).fetchone()
    if file_row is None:
        raise FileNotFound(file_id)
    sha256: str = file_row[0]
    existing = conn.execute(
        "SELECT status FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?",
        (key, file_id),
    ).fetchone()
    if existing is not None and existing[0] in LIVE_STATUSES:
        return fetch(conn, key, vector_store_id, file_id, deduplicated=True), False
    if sha256:
        twin = conn.execute(
            "SELECT file_id FROM vector_store_files WHERE vector_store_id = ? AND sha256 = ?"
            " AND file_id <> ? AND status IN ('in_progress', 'completed')"
            " ORDER BY created_at, rowid LIMIT 1",
            (key, sha256, file_id),
        ).fetchone()
        if twin is not None:
            return fetch(conn, key, vector_store_id, twin[0], deduplicated=True), False
    if existing is None:
        conn.execute(
            "INSERT INTO vector_store_files (vector_store_id, file_id, status, attributes,"
            " created_at, chunking_json, batch_id, sha256)"
            " VALUES (?, ?, 'in_progress', ?, ?, ?, ?, ?)",
            (key, file_id, attributes_json, now, chunking_json, batch_id, sha256),
        )
        file_delta = 1
    else:
        # Failed and cancelled files hold no chunks, so the vector_store's totals are unchanged.
        conn.execute(
            "UPDATE vector_store_files SET status = 'in_progress', attributes = ?, created_at = ?,"
            " chunking_json = ?, batch_id = ?, last_error_code = '', last_error_message = '',"
            " chunk_count = 0, usage_bytes = 0 WHERE vector_store_id = ? AND file_id = ?",
            (attributes_json, now, chunking_json, batch_id, key, file_id),
        )
        conn.execute("DELETE FROM jobs WHERE vector_store_id = ? AND file_id = ?", (key, file_id))
        file_delta = 0
    conn.execute(
        "INSERT INTO jobs (vector_store_id, file_id, state, next_attempt_at, created_at, key_name)"
        " VALUES (?, ?, 'pending', ?, ?, ?)",
        (key, file_id, now, now, key_name),
    )
    conn.execute(
        "UPDATE vector_stores SET file_count = file_count + ?,"
        " last_active_at = max(last_active_at, ?) WHERE id = ?",
        (file_delta, now, key),
    )
    if mirror:
        _mirror_attach(conn, key, file_id, attributes_json, chunking_json, batch_id, now, key_name)
    return fetch(conn, key, vector_store_id, file_id), True


def _mirror_attach(
    conn: apsw.Connection,
    key: int,
    file_id: str,
    attributes_json: str,
    chunking_json: str,
    batch_id: str | None,
    now: int,
    key_name: str,
) -> None:
    # Imported here: re-indexing is built on this module's attach and remove.
    from services.store import reindex

    active = reindex.shadow_of_vector_store(conn, key)
    if active is not None:
        attach_in_transaction(
            conn,
            active.shadow,
            "",
            file_id,
            attributes_json=attributes_json,
            chunking_json=reindex.shadow_chunking(active, chunking_json),
            batch_id=batch_id,
            now=now,
            mirror=False,
            key_name=key_name,
        )


def attach(
    conn: apsw.Connection,
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
    chunking_json = encode_chunking(chunking)
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
        record, _ = attach_in_transaction(
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


def _by_content(conn: apsw.Connection, key: int, sha256: str) -> tuple[str, str] | None:
    """(file id, status) of the vector_store's file with this content: one in progress or
    completed if any, else a failed or cancelled one."""
    row = conn.execute(
        "SELECT file_id, status FROM vector_store_files WHERE vector_store_id = ? AND sha256 = ?"
        " ORDER BY status NOT IN ('in_progress', 'completed'), created_at, rowid LIMIT 1",
        (key, sha256),
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def get(conn: apsw.Connection, vector_store_id: str, file_id: str) -> VectorStoreFile:
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id)
        return fetch(conn, key, vector_store_id, file_id)


def list_page(
    conn: apsw.Connection,
    *,
    vector_store_id: str,
    limit: int,
    order: str,
    after: str | None,
    before: str | None,
    status: str | None,
    batch_id: str | None,
) -> Page[VectorStoreFile]:
    if status and status not in STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id)
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
            select=_SELECT,
            conditions=conditions,
            params=params,
            sort_columns=("cf.created_at", "cf.rowid"),
            limit=limit,
            order=order,
            after=_cursor(conn, key, after, "after"),
            before=_cursor(conn, key, before, "before"),
        )
    return Page(items=[_to_record(row, vector_store_id) for row in rows], has_more=has_more)


def _cursor(
    conn: apsw.Connection, key: int, file_id: str | None, name: str
) -> tuple[Any, ...] | None:
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
    conn: apsw.Connection,
    *,
    vector_store_id: str,
    file_id: str,
    attributes: Mapping[str, AttributeValue],
) -> VectorStoreFile:
    """Replaces the attributes; the chunks stay, since filters read attributes at search time."""
    attributes_json = ingest.attributes_json(attributes)
    with atomic(conn):
        key, _ = vector_stores.lookup(conn, vector_store_id)
        fetch(conn, key, vector_store_id, file_id)
        conn.execute(
            "UPDATE vector_store_files SET attributes = ?"
            " WHERE vector_store_id = ? AND file_id = ?",
            (attributes_json, key, file_id),
        )
        from services.store import reindex  # see _mirror_attach

        reindex.mirror_attributes(conn, key, file_id, attributes_json)
        return fetch(conn, key, vector_store_id, file_id)


def remove(conn: apsw.Connection, key: int, file_id: str, now: int) -> None:
    """Removes a file's row, chunks, vectors and jobs from a vector store (inside a transaction),
    and from the vector_store's re-index in progress; may end that re-index (reindex.settle)."""
    from services.store import reindex  # see _mirror_attach

    reindex.mirror_remove(conn, key, file_id, now)
    row = conn.execute(
        "SELECT chunk_count, usage_bytes FROM vector_store_files"
        " WHERE vector_store_id = ? AND file_id = ?",
        (key, file_id),
    ).fetchone()
    if row is None:
        return
    chunk_count, usage = row
    ingest.delete_chunks(conn, key, file_id)
    conn.execute("DELETE FROM jobs WHERE vector_store_id = ? AND file_id = ?", (key, file_id))
    conn.execute(
        "DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?", (key, file_id)
    )
    conn.execute(
        "UPDATE vector_stores SET file_count = file_count - 1, chunk_count = chunk_count - ?,"
        " usage_bytes = usage_bytes - ? WHERE id = ?",
        (chunk_count, usage, key),
    )
    reindex.settle(conn, key, now)


def detach(conn: apsw.Connection, *, vector_store_id: str, file_id: str, now: int) -> None:
    with atomic(conn):
        key, _ = vector_stores.lookup(conn, vector_store_id)
        fetch(conn, key, vector_store_id, file_id)
        remove(conn, key, file_id, now)


def chunks(
    conn: apsw.Connection, *, vector_store_id: str, file_id: str
) -> tuple[VectorStoreFile, list[StoredChunk]]:
    """The file's row and its stored chunks in order (none until it is completed)."""
    with atomic(conn, write=False):
        key, _ = vector_stores.lookup(conn, vector_store_id)
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
