"""A file's row in a vector store (vector_store_files), inside the caller's transaction: read
it, add it with its ingest job, re-label it, remove it with its chunks, vectors and job.

While the vector store is re-indexed, every change is made to its new index too (the shadow,
shadow.py) in the same transaction, and a removal that finishes the shadow's last file ends
the re-index (shadow.settle). attachments.py, batches.py, jobs.py, files.py and reindex.py
build their transactions from these steps.
"""

from __future__ import annotations

import json
from typing import Any, cast

from services.common.vocabulary import (
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    MAX_CHUNK_TOKENS,
    MIN_CHUNK_TOKENS,
)
from services.store import ingest, shadow
from services.store.errors import FileNotFound, InvalidArgument, VectorStoreFileNotFound
from services.store.records import Chunking, LastError, VectorStoreFile
from services.store.sql import Connection, dialect

# Statuses in which a file's content is (or is being) indexed: attaching it again is a no-op.
LIVE_STATUSES = (IN_PROGRESS, COMPLETED)

SELECT = """
SELECT cf.file_id, cf.status, cf.created_at, f.filename, cf.attributes, cf.chunking_json,
       cf.chunk_count, cf.usage_bytes, cf.last_error_code, cf.last_error_message,
       coalesce(cf.batch_id, ''), cf.vectors_pending
FROM vector_store_files AS cf JOIN files AS f ON f.id = cf.file_id
"""


def to_record(
    row: tuple[Any, ...], vector_store_id: str, *, deduplicated: bool = False
) -> VectorStoreFile:
    """The record of a row selected with SELECT."""
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
        last_error=LastError(error_code, error_message) if status == FAILED else None,
        batch_id=batch_id,
        deduplicated=deduplicated,
        vectors_pending=bool(pending),
    )


def fetch(
    conn: Connection,
    key: int,
    vector_store_id: str,
    file_id: str,
    *,
    deduplicated: bool = False,
) -> VectorStoreFile:
    """The file's row in the vector store; raises VectorStoreFileNotFound."""
    row = conn.execute(
        f"{SELECT} WHERE cf.vector_store_id = ? AND cf.file_id = ?", (key, file_id)
    ).fetchone()
    if row is None:
        raise VectorStoreFileNotFound(vector_store_id, file_id)
    return to_record(row, vector_store_id, deduplicated=deduplicated)


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


def shadow_chunking(found: shadow.Active, file_chunking_json: str) -> str:
    """The chunking of a file in the shadow: the re-index's, else the file's own, shortened to
    the new model's context."""
    if found.chunking_json:
        return found.chunking_json
    chunking = decode_chunking(file_chunking_json)
    limit = found.max_chunk_tokens
    if chunking is None or not limit or chunking.max_tokens <= limit:
        return file_chunking_json
    overlap = min(chunking.overlap_tokens, limit // 2)
    return encode_chunking(Chunking(limit, overlap))


def add(
    conn: Connection,
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

    The same file already indexed or being indexed in the vector store is returned as it is,
    marked deduplicated, with nothing written. Another file with identical content does not
    stand in for it: the file the client named is attached, with its own attributes, counted
    (OpenAI's contract, which its SDKs poll by that file's id); its job finds the content's
    vectors in the embedding cache rather than embedding them again. A failed or cancelled
    file is attached again (new settings, new job). A vector store being re-indexed gets the
    file attached to its new index too (unless `mirror` is off: that attach).
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
        f" last_active_at = {dialect(conn).greatest}(last_active_at, ?) WHERE id = ?",
        (file_delta, now, key),
    )
    found = shadow.active(conn, key) if mirror else None
    if found is not None:
        add(
            conn,
            found.shadow,
            "",
            file_id,
            attributes_json=attributes_json,
            chunking_json=shadow_chunking(found, chunking_json),
            batch_id=batch_id,
            now=now,
            mirror=False,
            key_name=key_name,
        )
    return fetch(conn, key, vector_store_id, file_id), True


def set_attributes(conn: Connection, key: int, file_id: str, attributes_json: str) -> None:
    """Replaces the file's attributes, in the vector store and in its new index."""
    found = shadow.active(conn, key)
    for target in (key,) if found is None else (key, found.shadow):
        conn.execute(
            "UPDATE vector_store_files SET attributes = ?"
            " WHERE vector_store_id = ? AND file_id = ?",
            (attributes_json, target, file_id),
        )


def remove(conn: Connection, key: int, file_id: str, now: int) -> None:
    """Removes a file's row, chunks, vectors and job from a vector store and from its new
    index; a removal that finishes a shadow's last file ends its re-index (shadow.settle)."""
    found = shadow.active(conn, key)
    # The new index first: settling it may switch the vector store over, dropping the old
    # index and this file's row with it.
    for target in (key,) if found is None else (found.shadow, key):
        if _remove_row(conn, target, file_id):
            shadow.settle(conn, target, now)


def remove_everywhere(conn: Connection, file_id: str, now: int) -> None:
    """Removes a file from every vector store that has it (a file being deleted)."""
    keys = cast(
        list[tuple[int]],
        conn.execute(
            "SELECT vector_store_id FROM vector_store_files WHERE file_id = ?", (file_id,)
        ).fetchall(),
    )
    for (key,) in keys:
        # A shadow's row may already be gone with its vector store's (shadow.settle).
        remove(conn, key, file_id, now)


def _remove_row(conn: Connection, key: int, file_id: str) -> bool:
    row = conn.execute(
        "SELECT chunk_count, usage_bytes FROM vector_store_files"
        " WHERE vector_store_id = ? AND file_id = ?",
        (key, file_id),
    ).fetchone()
    if row is None:
        return False
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
    return True
