"""Uploaded files: their bytes, kept until deleted, independent of any vector store."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from services.common.vocabulary import MAX_FILE_EXPIRES_SECONDS, MIN_FILE_EXPIRES_SECONDS
from services.store import access, vector_store_files
from services.store.db import atomic
from services.store.errors import FileNotFound, InvalidArgument
from services.store.paging import fetch_page, unknown_cursor
from services.store.records import EVERYTHING, Access, File, Page
from services.store.sql import Connection

ID_PREFIX = "file-"

_COLUMNS = "id, filename, bytes, created_at, purpose, sha256, expires_at"


def _to_file(row: tuple[Any, ...]) -> File:
    file_id, filename, size, created_at, purpose, sha256, expires_at = row
    return File(
        id=file_id,
        filename=filename,
        bytes=size,
        created_at=created_at,
        purpose=purpose,
        sha256=sha256,
        expires_at=expires_at,
    )


def lookup(conn: Connection, file_id: str) -> File:
    row = conn.execute(f"SELECT {_COLUMNS} FROM files WHERE id = ?", (file_id,)).fetchone()
    if row is None:
        raise FileNotFound(file_id)
    return _to_file(row)


def new_record(
    *, filename: str, purpose: str, content: bytes, now: int, expires_after_seconds: int = 0
) -> File:
    """A file not yet written, with a fresh id, expiring `expires_after_seconds` after `now`
    (0: never); raises InvalidArgument for missing or out-of-range fields."""
    if not filename:
        raise InvalidArgument("filename is required")
    if not purpose:
        raise InvalidArgument("purpose is required, e.g. 'assistants'")
    if expires_after_seconds and not (
        MIN_FILE_EXPIRES_SECONDS <= expires_after_seconds <= MAX_FILE_EXPIRES_SECONDS
    ):
        raise InvalidArgument(
            f"expires_after.seconds must be {MIN_FILE_EXPIRES_SECONDS}.."
            f"{MAX_FILE_EXPIRES_SECONDS}, "
            f"got {expires_after_seconds}"
        )
    return File(
        id=ID_PREFIX + secrets.token_hex(12),
        filename=filename,
        bytes=len(content),
        created_at=now,
        purpose=purpose,
        sha256=hashlib.sha256(content).hexdigest(),
        expires_at=now + expires_after_seconds if expires_after_seconds else 0,
    )


def insert(conn: Connection, file: File, content: bytes, *, project: int, created_by: str) -> None:
    """Writes the file and its bytes (inside a transaction), owned by `project` and the key
    `created_by`."""
    conn.execute(
        "INSERT INTO files (id, filename, bytes, created_at, purpose, sha256, project_id,"
        " created_by, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (file.id, file.filename, file.bytes, file.created_at, file.purpose, file.sha256,
         project, created_by, file.expires_at),
    )  # fmt: skip
    conn.execute("INSERT INTO file_contents (file_id, content) VALUES (?, ?)", (file.id, content))


def create(
    conn: Connection,
    *,
    filename: str,
    purpose: str,
    content: bytes,
    now: int,
    caller: Access = EVERYTHING,
    expires_after_seconds: int = 0,
) -> File:
    file = new_record(
        filename=filename,
        purpose=purpose,
        content=content,
        now=now,
        expires_after_seconds=expires_after_seconds,
    )
    with atomic(conn):
        project, created_by = access.owner(conn, caller)
        insert(conn, file, content, project=project, created_by=created_by)
    return file


def get(conn: Connection, file_id: str) -> File:
    with atomic(conn, write=False):
        return lookup(conn, file_id)


def content(conn: Connection, file_id: str) -> tuple[File, bytes]:
    """The file and its bytes (empty for files written by AddChunks, which keep none)."""
    with atomic(conn, write=False):
        file = lookup(conn, file_id)
        row = conn.execute(
            "SELECT content FROM file_contents WHERE file_id = ?", (file_id,)
        ).fetchone()
    return file, bytes(row[0]) if row is not None else b""


def list_page(
    conn: Connection,
    *,
    limit: int,
    order: str,
    after: str | None,
    purpose: str | None,
    caller: Access = EVERYTHING,
) -> Page[File]:
    with atomic(conn, write=False):
        conditions, params = access.files_visible(conn, caller, "files")
        cursor = None
        if after:
            where = "".join(f" AND {condition}" for condition in conditions)
            row = conn.execute(
                f"SELECT created_at, rowid FROM files WHERE id = ?{where}", (after, *params)
            ).fetchone()
            if row is None:
                raise unknown_cursor("after", after, "file id")
            cursor = tuple(row)
        if purpose:
            conditions.append("purpose = ?")
            params.append(purpose)
        rows, has_more = fetch_page(
            conn,
            select=f"SELECT {_COLUMNS} FROM files",
            conditions=conditions,
            params=params,
            sort_columns=("created_at", "rowid"),
            limit=limit,
            order=order,
            after=cursor,
            before=None,
        )
    return Page(items=[_to_file(row) for row in rows], has_more=has_more)


def delete(conn: Connection, file_id: str, now: int) -> None:
    """Removes the file from every vector store (chunks, vectors, jobs), then the file itself."""
    with atomic(conn):
        lookup(conn, file_id)
        remove(conn, file_id, now)


def remove(conn: Connection, file_id: str, now: int) -> None:
    """delete() inside the caller's transaction (the retention sweep's too)."""
    vector_store_files.remove_everywhere(conn, file_id, now)
    conn.execute("DELETE FROM file_contents WHERE file_id = ?", (file_id,))
    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
