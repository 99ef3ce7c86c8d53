"""The embedding cache: vectors keyed by (model identity, sha256 of the exact text).

Re-ingesting text the store has seen with the same model weights costs a lookup instead of a
forward pass. The model key names the exact weights (e.g. "all-MiniLM-L6-v2@sha256:<digest of
the GGUF>"), so vectors of two models, or of two builds of one model, never mix. Entries are
evicted least recently used first, in bounded batches, once there are more than the configured
maximum; "used" is refreshed at most hourly, so lookups stay read-only in the common case.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import cast

from services.store.db import atomic, try_write
from services.store.errors import InvalidArgument
from services.store.records import CacheCounters, CacheSize
from services.store.sql import Connection
from services.store.vector_stores import MAX_DIMENSIONS

DEFAULT_MAX_ENTRIES = 100_000
# Hashes per call: callers split larger lookups (a reply stays far below gRPC's message cap).
MAX_KEYS = 4096
MAX_MODEL_KEY = 300
SHA256_BYTES = 32
# A hit refreshes its entry's last use only if that is older than this: LRU to the hour.
TOUCH_SECONDS = 3600
# Rows deleted per eviction transaction, and the share of max_entries freed at once, so
# eviction is rare and no single transaction holds the write lock for long.
EVICT_BATCH = 5000
EVICT_SLACK = 0.1
_FLOAT_BYTES = 4


class Counters:
    """Hit and miss counts since the store started (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hits = self._misses = self._stored = self._evicted = 0

    def add(self, *, hits: int = 0, misses: int = 0, stored: int = 0, evicted: int = 0) -> None:
        with self._lock:
            self._hits += hits
            self._misses += misses
            self._stored += stored
            self._evicted += evicted

    def snapshot(self) -> CacheCounters:
        with self._lock:
            return CacheCounters(self._hits, self._misses, self._stored, self._evicted)


def _check_keys(model_key: str, dimensions: int, hashes: Sequence[bytes]) -> None:
    if not model_key or len(model_key) > MAX_MODEL_KEY:
        raise InvalidArgument(f"model_key must be 1..{MAX_MODEL_KEY} characters")
    if not 1 <= dimensions <= MAX_DIMENSIONS:
        raise InvalidArgument(f"dimensions must be 1..{MAX_DIMENSIONS}, got {dimensions}")
    if len(hashes) > MAX_KEYS:
        raise InvalidArgument(f"at most {MAX_KEYS} text hashes per call, got {len(hashes)}")
    for index, digest in enumerate(hashes):
        if len(digest) != SHA256_BYTES:
            raise InvalidArgument(
                f"text_sha256[{index}] must be a raw {SHA256_BYTES}-byte SHA-256 digest"
            )


def _model_id(conn: Connection, model_key: str, dimensions: int) -> int | None:
    row = conn.execute(
        "SELECT id, dimensions FROM embedding_models WHERE model_key = ?", (model_key,)
    ).fetchone()
    if row is None:
        return None
    model_id, known = cast(tuple[int, int], row)
    if known != dimensions:
        raise InvalidArgument(
            f"the embedding cache holds {known}-dim vectors for {model_key!r}, not {dimensions}"
        )
    return model_id


def get(
    conn: Connection,
    *,
    model_key: str,
    dimensions: int,
    hashes: Sequence[bytes],
    now: int,
) -> list[bytes | None]:
    """The cached vector (float32 bytes) of each hash, or None where there is none."""
    _check_keys(model_key, dimensions, hashes)
    if not hashes:
        return []
    found: dict[bytes, tuple[int, bytes, int]] = {}
    with atomic(conn, write=False):
        model_id = _model_id(conn, model_key, dimensions)
        if model_id is not None:
            for digest in set(hashes):
                row = conn.execute(
                    "SELECT id, vector, last_used_at FROM embedding_cache"
                    " WHERE model_id = ? AND text_sha256 = ?",
                    (model_id, digest),
                ).fetchone()
                if row is not None:
                    entry_id, vector, used = cast(tuple[int, bytes, int], row)
                    found[digest] = (entry_id, bytes(vector), used)
    stale = [(now, entry_id) for entry_id, _, used in found.values() if used < now - TOUCH_SECONDS]
    if stale:
        _touch(conn, stale)
    return [found[digest][1] if digest in found else None for digest in hashes]


def _touch(conn: Connection, stale: list[tuple[int, int]]) -> None:
    # Best effort: a lookup never waits for the write lock; an entry whose last use stays old
    # only risks an earlier eviction.
    try_write(
        conn,
        lambda c: c.executemany("UPDATE embedding_cache SET last_used_at = ? WHERE id = ?", stale),
    )


def put(
    conn: Connection,
    *,
    model_key: str,
    dimensions: int,
    hashes: Sequence[bytes],
    vectors: bytes,
    now: int,
    max_entries: int,
) -> tuple[int, int]:
    """Stores vector i under hash i (existing entries are kept); returns (stored, evicted)."""
    _check_keys(model_key, dimensions, hashes)
    row_bytes = _FLOAT_BYTES * dimensions
    if len(vectors) != row_bytes * len(hashes):
        raise InvalidArgument(
            f"expected {len(hashes)} vectors of {dimensions} float32 values "
            f"({row_bytes * len(hashes)} bytes), got {len(vectors)} bytes"
        )
    if not hashes or max_entries <= 0:
        return 0, 0
    with atomic(conn):
        model_id = _model_id(conn, model_key, dimensions)
        if model_id is None:
            model_id = conn.execute(
                "INSERT INTO embedding_models (model_key, dimensions) VALUES (?, ?) RETURNING id",
                (model_key, dimensions),
            ).get
        before = conn.total_changes()
        conn.executemany(
            "INSERT INTO embedding_cache (model_id, text_sha256, vector, last_used_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (model_id, text_sha256) DO NOTHING",
            [
                (model_id, digest, vectors[i * row_bytes : (i + 1) * row_bytes], now)
                for i, digest in enumerate(hashes)
            ],
        )
        stored = conn.total_changes() - before
        entries = _count(conn)
    evicted = 0
    if entries > max_entries:
        excess = entries - max_entries + int(max_entries * EVICT_SLACK)
        while excess > 0:
            deleted = _evict(conn, min(excess, EVICT_BATCH))
            if deleted == 0:
                break
            evicted += deleted
            excess -= deleted
    return stored, evicted


def _count(conn: Connection) -> int:
    row = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()
    return int(row[0]) if row is not None else 0


def _evict(conn: Connection, limit: int) -> int:
    """Deletes up to `limit` least recently used entries in one transaction."""
    with atomic(conn):
        before = conn.total_changes()
        conn.execute(
            "DELETE FROM embedding_cache WHERE id IN"
            " (SELECT id FROM embedding_cache ORDER BY last_used_at, id LIMIT ?)",
            (limit,),
        )
        return conn.total_changes() - before


def size(conn: Connection) -> CacheSize:
    """Counts from the key index only: never reads the vectors themselves."""
    rows = cast(
        list[tuple[int, int]],
        conn.execute(
            "SELECT m.dimensions, (SELECT count(*) FROM embedding_cache AS c"
            " WHERE c.model_id = m.id) FROM embedding_models AS m"
        ).fetchall(),
    )
    return CacheSize(
        entries=sum(count for _, count in rows),
        bytes=sum(_FLOAT_BYTES * dims * count for dims, count in rows),
        models=len(rows),
    )
