"""VectorStores: create, look up, list with cursors, delete. Plain functions over a connection."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.vocabulary import FILE_STATUSES
from services.store import access, compat, engine
from services.store.db import atomic, try_write
from services.store.errors import InvalidArgument, VectorStoreNotFound
from services.store.records import (
    EVERYTHING,
    Access,
    EmbeddingModel,
    FileCounts,
    ModelUse,
    Page,
    VectorStore,
)
from services.store.sql import Connection

# sqlite-vec's limit on a vector column.
MAX_DIMENSIONS = 8192
MAX_LIST_LIMIT = 100
ID_PREFIX = "vs_"

EXPIRES_ANCHOR = "last_active_at"
MAX_EXPIRES_DAYS = 365
_DAY_SECONDS = 86400

_FILE_COUNTS = [
    *(
        "(SELECT count(*) FROM vector_store_files AS cf"
        f" WHERE cf.vector_store_id = vector_stores.id AND cf.status = '{status}')"
        for status in FILE_STATUSES
    ),
    # Counted off a partial index: free when nothing is pending.
    "(SELECT count(*) FROM vector_store_files AS cf"
    " WHERE cf.vector_store_id = vector_stores.id AND cf.vectors_pending = 1)",
]


def _columns(counts: list[str]) -> str:
    return (
        "id, public_id, name, created_at, last_active_at, metadata, model, dimensions, "
        "chunk_count, file_count, usage_bytes, expires_anchor, expires_days, vector_index, "
        f"max_input_tokens, {', '.join(counts)}, description"
    )


_COLUMNS = _columns(_FILE_COUNTS)
# The file counts read every file's row of the vector store: ~1.7 ms of a search at 1M chunks
# in 100k files, which needs none of them.
_UNCOUNTED = _columns(["0"] * len(_FILE_COUNTS))


def expires_at(last_active_at: int, anchor: str, days: int) -> int:
    """When an idle vector store expires (unix seconds), or 0 if it never does."""
    if anchor == EXPIRES_ANCHOR and days > 0:
        return last_active_at + days * _DAY_SECONDS
    return 0


def check_expiry(anchor: str, days: int) -> None:
    if anchor not in ("", EXPIRES_ANCHOR):
        raise InvalidArgument(f"expires_after.anchor must be {EXPIRES_ANCHOR!r}, got {anchor!r}")
    if not 0 <= days <= MAX_EXPIRES_DAYS:
        raise InvalidArgument(f"expires_after.days must be 1..{MAX_EXPIRES_DAYS}, got {days}")
    if days and not anchor:
        raise InvalidArgument(f"expires_after.days needs the anchor {EXPIRES_ANCHOR!r}")


def _to_vector_store(row: tuple[Any, ...]) -> tuple[int, VectorStore]:
    (key, public_id, name, created, active, metadata, model, dims, chunks, files, usage,
     anchor, days, index, context, in_progress, completed, failed, cancelled,
     pending, description) = row  # fmt: skip
    vector_store = VectorStore(
        id=public_id,
        name=name,
        created_at=created,
        last_active_at=active,
        metadata=json.loads(metadata),
        model=model,
        dimensions=dims,
        chunk_count=chunks,
        file_count=files,
        usage_bytes=usage,
        file_counts=FileCounts(in_progress, completed, failed, cancelled, pending),
        expires_anchor=anchor,
        expires_days=days,
        expires_at=expires_at(active, anchor, days),
        vector_index=index,
        max_input_tokens=context,
        description=description,
    )
    return key, vector_store


def lookup(conn: Connection, vector_store_id: str, counted: bool = True) -> tuple[int, VectorStore]:
    """Returns the vector_store's integer key and record (its file_counts all 0 unless
    `counted`); raises VectorStoreNotFound."""
    columns = _COLUMNS if counted else _UNCOUNTED
    row = conn.execute(
        f"SELECT {columns} FROM vector_stores WHERE public_id = ? AND shadow_of IS NULL",
        (vector_store_id,),
    ).fetchone()
    if row is None:
        raise VectorStoreNotFound(vector_store_id)
    return _to_vector_store(row)


def touch(conn: Connection, key: int, vector_store: VectorStore, now: int) -> None:
    """Records a search's use of the vector store (for expiry by last_active_at).

    At most one write per vector store per second, however many searches arrive, and only when
    the write lock is free: a search never waits behind an ingest's commit (a skipped touch
    is retried by the next search; expiry counts in days).
    """
    if vector_store.last_active_at < now:
        try_write(
            conn,
            lambda c: c.execute(
                "UPDATE vector_stores SET last_active_at = ? WHERE id = ? AND last_active_at < ?",
                (now, key, now),
            ),
        )


def project_of(conn: Connection, key: int) -> int:
    """The project of the vector store with this integer key (inside a transaction)."""
    return int(conn.execute("SELECT project_id FROM vector_stores WHERE id = ?", (key,)).get or 1)


def lookup_key(conn: Connection, key: int) -> VectorStore:
    """The vector store with this integer key, which the caller knows exists."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM vector_stores WHERE id = ?", (key,)).fetchone()
    if row is None:
        raise RuntimeError(f"vector_store key {key} vanished inside a transaction")
    return _to_vector_store(row)[1]


def insert(
    conn: Connection,
    *,
    public_id: str,
    name: str,
    model: str,
    dimensions: int,
    now: int,
    metadata: Mapping[str, str] | None = None,
    expires: tuple[str, int] = ("", 0),
    max_input_tokens: int = 0,
    shadow_of: int | None = None,
    project: int = 1,
    description: str = "",
) -> int:
    """The vector_store's row and its vector tables, inside the caller's transaction; returns
    its key. A re-index's hidden vector store names the one it will replace in `shadow_of`."""
    key: int = conn.execute(
        "INSERT INTO vector_stores (public_id, name, metadata, model, dimensions, created_at,"
        " last_active_at, expires_anchor, expires_days, max_input_tokens, shadow_of, project_id,"
        " description) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            public_id,
            name,
            json.dumps(dict(metadata or {})),
            model,
            dimensions,
            now,
            now,
            *expires,
            max(0, max_input_tokens),
            shadow_of,
            project,
            description,
        ),
    ).get
    indexes = engine.of(conn)
    indexes.fulltext.create(conn, key)
    indexes.vectors.create_tables(conn, key, dimensions)
    return key


def create(
    conn: Connection,
    *,
    name: str,
    model: str,
    dimensions: int,
    metadata: Mapping[str, str],
    now: int,
    expires_anchor: str = "",
    expires_days: int = 0,
    max_input_tokens: int = 0,
    caller: Access = EVERYTHING,
    description: str = "",
) -> VectorStore:
    check_expiry(expires_anchor, expires_days)
    if not model:
        raise InvalidArgument("model is required: name the embedding model the store will use")
    if not 1 <= dimensions <= MAX_DIMENSIONS:
        raise InvalidArgument(f"dimensions must be 1..{MAX_DIMENSIONS}, got {dimensions}")
    public_id = ID_PREFIX + secrets.token_hex(12)
    with atomic(conn):
        insert(
            conn,
            project=access.owner(conn, caller)[0],
            public_id=public_id,
            name=name,
            model=model,
            dimensions=dimensions,
            now=now,
            metadata=metadata,
            expires=(expires_anchor, expires_days),
            max_input_tokens=max_input_tokens,
            description=description,
        )
    return VectorStore(
        id=public_id,
        name=name,
        created_at=now,
        last_active_at=now,
        metadata=dict(metadata),
        model=model,
        dimensions=dimensions,
        chunk_count=0,
        file_count=0,
        usage_bytes=0,
        expires_anchor=expires_anchor,
        expires_days=expires_days,
        expires_at=expires_at(now, expires_anchor, expires_days),
        max_input_tokens=max(0, max_input_tokens),
        description=description,
    )


def update(
    conn: Connection,
    vector_store_id: str,
    *,
    name: str | None = None,
    metadata: Mapping[str, str] | None = None,
    expires: tuple[str, int] | None = None,
    description: str | None = None,
) -> VectorStore:
    """Changes the fields given (None leaves a field as it is); `expires` is (anchor, days)."""
    if expires is not None:
        check_expiry(*expires)
    with atomic(conn):
        key, _ = lookup(conn, vector_store_id)
        if name is not None:
            conn.execute("UPDATE vector_stores SET name = ? WHERE id = ?", (name, key))
        if metadata is not None:
            conn.execute(
                "UPDATE vector_stores SET metadata = ? WHERE id = ?",
                (json.dumps(dict(metadata)), key),
            )
        if expires is not None:
            conn.execute(
                "UPDATE vector_stores SET expires_anchor = ?, expires_days = ? WHERE id = ?",
                (*expires, key),
            )
        if description is not None:
            conn.execute(
                "UPDATE vector_stores SET description = ? WHERE id = ?", (description, key)
            )
        return lookup_key(conn, key)


def list_page(
    conn: Connection,
    *,
    limit: int,
    order: str,
    after: str | None,
    before: str | None,
    name: str | None = None,
    caller: Access = EVERYTHING,
) -> Page[VectorStore]:
    """One page in creation order ("asc" oldest first, "desc" newest first), of the
    vector stores called `name` if given.

    `after` pages forward from a vector store id (exclusive). `before` returns the `limit` items
    immediately preceding it in the same order; there `has_more` means more items precede the
    page. Both together bound the page on each side.
    """
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be 1..{MAX_LIST_LIMIT}, got {limit}")
    if order not in ("asc", "desc"):
        raise InvalidArgument(f"order must be 'asc' or 'desc', got {order!r}")
    ascending = order == "asc"
    # A re-index's shadow (reindex.py) is not a vector store of its own.
    visible, visible_params = access.vector_stores_visible(conn, caller, "vector_stores")
    conditions: list[str] = ["shadow_of IS NULL", *visible]
    params: list[Any] = list(visible_params)
    if name is not None:
        conditions.append("name = ?")
        params.append(name)
    if after:
        conditions.append("id > ?" if ascending else "id < ?")
        params.append(_cursor_key(conn, after, "after", caller))
    if before:
        conditions.append("id < ?" if ascending else "id > ?")
        params.append(_cursor_key(conn, before, "before", caller))
    # With only `before`, walk backwards from the cursor and flip the page afterwards.
    backwards = bool(before) and not after
    sql_ascending = ascending != backwards
    where = f"WHERE {' AND '.join(conditions)}"
    direction = "ASC" if sql_ascending else "DESC"
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM vector_stores {where} ORDER BY id {direction} LIMIT ?",
        (*params, limit + 1),
    ).fetchall()
    items = [_to_vector_store(row)[1] for row in rows[:limit]]
    if backwards:
        items.reverse()
    return Page(items=items, has_more=len(rows) > limit)


def _cursor_key(conn: Connection, cursor: str, name: str, caller: Access) -> int:
    visible, params = access.vector_stores_visible(conn, caller, "vector_stores")
    where = "".join(f" AND {condition}" for condition in visible)
    row = conn.execute(
        f"SELECT id FROM vector_stores WHERE public_id = ? AND shadow_of IS NULL{where}",
        (cursor, *params),
    ).fetchone()
    if row is None:
        raise InvalidArgument(
            f"{name} cursor {cursor!r} is not an existing vector store id (it may have been "
            "deleted); list again without the cursor"
        )
    return int(row[0])


def delete(conn: Connection, vector_store_id: str) -> None:
    """Deletes the vector store, its file memberships, chunks and vector table in one transaction.

    Its ingest jobs and file batches go too; rows in `files` stay: files exist independently
    of the vector stores that index them.
    """
    with atomic(conn):
        key, _ = lookup(conn, vector_store_id)
        drop(conn, key)


def drop(conn: Connection, key: int) -> None:
    """Deletes a vector store by key inside a transaction, with the re-index it has in progress
    (its shadow, reindex.py) and its re-index records."""
    shadows: list[Any] = conn.execute(
        "SELECT id FROM vector_stores WHERE shadow_of = ?", (key,)
    ).fetchall()
    for (shadow,) in shadows:
        drop(conn, int(shadow))
    conn.execute("DELETE FROM reindexes WHERE vector_store_id = ?", (key,))
    conn.execute("UPDATE reindexes SET shadow_id = NULL WHERE shadow_id = ?", (key,))
    conn.execute("DELETE FROM chunks WHERE vector_store_id = ?", (key,))
    conn.execute("DELETE FROM jobs WHERE vector_store_id = ?", (key,))
    conn.execute("DELETE FROM vector_store_files WHERE vector_store_id = ?", (key,))
    conn.execute("DELETE FROM file_batches WHERE vector_store_id = ?", (key,))
    conn.execute("DELETE FROM vector_stores WHERE id = ?", (key,))
    indexes = engine.of(conn)
    indexes.fulltext.drop(conn, key)
    indexes.vectors.drop_tables(conn, key)


# Vector stores named per model in a status: enough to find them, bounded for a health probe.
MODEL_SAMPLE_IDS = 5


def models_in_use(conn: Connection, served: Sequence[EmbeddingModel] = ()) -> list[ModelUse]:
    """The (model, dimensions) pairs the vector stores are indexed with, with how many stores
    each, the ids of the oldest few, and whether one of `served` fits them."""
    with atomic(conn, write=False):
        groups: list[Any] = conn.execute(
            "SELECT model, dimensions, count(*) FROM vector_stores GROUP BY model, dimensions"
            " ORDER BY count(*) DESC, model"
        ).fetchall()
        uses = []
        for model, dimensions, count in groups:
            ids = conn.execute(
                "SELECT public_id FROM vector_stores WHERE model = ? AND dimensions = ?"
                " ORDER BY id LIMIT ?",
                (model, dimensions, MODEL_SAMPLE_IDS),
            ).fetchall()
            uses.append(
                ModelUse(
                    str(model),
                    int(dimensions),
                    int(count),
                    [str(row[0]) for row in ids],
                    compat.serves(served, str(model), int(dimensions)),
                )
            )
    return uses
