"""The audit log: one row per ingest and search call, kept for a configurable number of days.

The gateway measures the calls (it sees the embedding time and whether a search was degraded)
and sends the rows in batches, so recording costs a search nothing on its own path. Rows past
the retention are pruned on write, at most every few minutes and in bounded batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

from services.common.vocabulary import AUDIT_OPERATIONS
from services.store.db import atomic
from services.store.errors import InvalidArgument
from services.store.records import AuditEntry, Page
from services.store.sql import Connection

OPERATIONS = AUDIT_OPERATIONS
MAX_RECORD = 1000
MAX_LIST_LIMIT = 1000
MAX_DETAIL = 500
DEFAULT_RETENTION_DAYS = 30
PRUNE_INTERVAL_SECONDS = 300
PRUNE_BATCH = 10_000
_DAY_SECONDS = 86400
# id, at, operation, vector_store_id, k, latency_ms, result_count, degraded, detail, key_name,
# embedded_tokens, error_code, project
_Row = tuple[int, float, str, str, int, float, int, int, str, str, int, str, str]


def _check(entry: AuditEntry, index: int) -> None:
    if entry.operation not in OPERATIONS:
        raise InvalidArgument(
            f"entries[{index}].operation must be one of {', '.join(OPERATIONS)}, "
            f"got {entry.operation!r}"
        )
    if not (math.isfinite(entry.at) and entry.at > 0):
        raise InvalidArgument(f"entries[{index}].at must be a positive unix time")
    if not (math.isfinite(entry.latency_ms) and entry.latency_ms >= 0):
        raise InvalidArgument(f"entries[{index}].latency_ms must be a non-negative number")
    if entry.k < 0 or entry.result_count < 0:
        raise InvalidArgument(f"entries[{index}]: k and result_count must not be negative")


def record(conn: Connection, entries: Sequence[AuditEntry]) -> int:
    """Appends the entries in one transaction; returns how many were written."""
    if len(entries) > MAX_RECORD:
        raise InvalidArgument(f"at most {MAX_RECORD} audit entries per call, got {len(entries)}")
    for index, entry in enumerate(entries):
        _check(entry, index)
    if not entries:
        return 0
    with atomic(conn):
        insert(conn, entries)
    return len(entries)


def insert(conn: Connection, entries: Sequence[AuditEntry]) -> None:
    """Writes checked entries inside the caller's transaction (the retention sweep records
    what it deletes in the same one)."""
    conn.executemany(
        "INSERT INTO audit_log (at, operation, vector_store_id, k, latency_ms, result_count,"
        " degraded, detail, key_name, embedded_tokens, error_code, project)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                entry.at,
                entry.operation,
                entry.vector_store_id,
                entry.k,
                entry.latency_ms,
                entry.result_count,
                int(entry.degraded),
                entry.detail[:MAX_DETAIL],
                entry.key_name[:64],
                entry.embedded_tokens,
                entry.error_code[:64],
                entry.project[:64],
            )
            for entry in entries
        ],
    )


def prune(conn: Connection, *, now: float, retention_days: int) -> int:
    """Deletes up to PRUNE_BATCH entries older than the retention; returns how many."""
    if retention_days <= 0:
        return 0
    cutoff = now - retention_days * _DAY_SECONDS
    with atomic(conn):
        before = conn.total_changes()
        conn.execute(
            "DELETE FROM audit_log WHERE id IN"
            " (SELECT id FROM audit_log WHERE at < ? ORDER BY at LIMIT ?)",
            (cutoff, PRUNE_BATCH),
        )
        return conn.total_changes() - before


def list_page(
    conn: Connection,
    *,
    limit: int,
    operation: str | None,
    vector_store_id: str | None,
    before_id: int | None,
    key_name: str | None = None,
) -> Page[AuditEntry]:
    """Newest first; `before_id` pages on from the last entry of the previous page."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be 1..{MAX_LIST_LIMIT}, got {limit}")
    if operation and operation not in OPERATIONS:
        raise InvalidArgument(
            f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}"
        )
    conditions: list[str] = []
    params: list[Any] = []
    if operation:
        conditions.append("operation = ?")
        params.append(operation)
    if vector_store_id:
        conditions.append("vector_store_id = ?")
        params.append(vector_store_id)
    if key_name:
        conditions.append("key_name = ?")
        params.append(key_name)
    if before_id:
        conditions.append("id < ?")
        params.append(before_id)
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    with atomic(conn, write=False):
        rows = cast(
            list[_Row],
            conn.execute(
                "SELECT id, at, operation, vector_store_id, k, latency_ms, result_count, degraded,"
                " detail, key_name, embedded_tokens, error_code, project"
                f" FROM audit_log {where} ORDER BY id DESC LIMIT ?",
                (*params, limit + 1),
            ).fetchall(),
        )
    items = [
        AuditEntry(
            id=row[0],
            at=row[1],
            operation=row[2],
            vector_store_id=row[3],
            k=row[4],
            latency_ms=row[5],
            result_count=row[6],
            degraded=bool(row[7]),
            detail=row[8],
            key_name=row[9],
            embedded_tokens=row[10],
            error_code=row[11],
            project=row[12],
        )
        for row in rows[:limit]
    ]
    return Page(items=items, has_more=len(rows) > limit)


def count(conn: Connection) -> int:
    # Entries are only ever pruned oldest first, so the ids in the table are contiguous: no
    # scan of what may be millions of rows.
    row = conn.execute("SELECT max(id) - min(id) + 1 FROM audit_log").fetchone()
    return int(row[0] or 0) if row is not None else 0
