"""Giving a database's free pages back to the disk without holding writes.

A plain VACUUM rewrites the whole file inside one write transaction: at 1M chunks (3.7 GB)
every write waited 14 minutes while its WAL grew to twice the file. Here the database is in
`auto_vacuum = INCREMENTAL` mode (new databases are made so, db.open_database), so freed pages
stay on SQLite's free list and `PRAGMA incremental_vacuum(n)` moves the last n pages of the
file into free slots and truncates it: the work is done in slices of at most STEP_PAGES (fewer
when a slice takes long: next_step), each its own short write transaction, with a pause
between them in which waiting writers go first.
Incremental vacuum does not defragment (it moves pages, it does not rewrite tables in order);
space is what it is for.

A database made before this (auto_vacuum NONE) is switched once by a full VACUUM, the old
way, with writes waiting: an operator runs that first vacuum in a quiet hour. Every later one
is incremental.

vec0 tables keep the slots of deleted vectors until they are re-packed (vector_index.compact),
which copies a vector_store's vectors in one transaction: done here only for vector stores of up
to COMPACT_MAX_ROWS chunks (one short transaction each), so a larger vector store keeps its empty
slots (`vector_slots` in the stats shows them).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast

import apsw

from services.store import vector_index
from services.store.db import BUSY_TIMEOUT_MS, atomic, vectors_available
from services.store.maintenance import file_bytes
from services.store.records import VacuumResult

# Pages moved per transaction, at most (2 MiB of 4 KiB pages), and the least a slice shrinks to.
STEP_PAGES = 512
MIN_STEP_PAGES = 16
# A slice that took longer than this moves half the pages next time, one under a quarter of
# it twice as many (up to STEP_PAGES): what a page costs to move varies with the tables it
# belongs to and with the load, and a write waits behind a whole slice. (At 1M chunks, with
# 2 clients writing and 4 searching, one write waited 1.06 s during a vacuum of fixed
# 512-page slices: BENCHMARKS.md, issue 33.)
SLICE_SECONDS = 0.15
# Between two slices: writers queued behind one get the lock first.
PAUSE_SECONDS = 0.02
COMPACT_MAX_ROWS = 20_000
INCREMENTAL = 2


def _pragma(conn: apsw.Connection, name: str) -> int:
    row = conn.execute(f"PRAGMA {name}").fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def next_step(pages: int, seconds: float) -> int:
    """The pages of the next slice, after one of `pages` took `seconds` (its commit included)."""
    if seconds > SLICE_SECONDS:
        return max(MIN_STEP_PAGES, pages // 2)
    if seconds < SLICE_SECONDS / 4:
        return min(STEP_PAGES, pages * 2)
    return pages


def vacuum(conn: apsw.Connection, *, path: Path, checkpoint: bool = True) -> VacuumResult:
    """Compacts the small vector_stores' vector tables and gives the free pages back to the
    disk, in slices (see the module's docstring); copies the WAL back as it goes unless
    `checkpoint` is False (Litestream owns checkpoints, see db.open_database)."""
    started = time.monotonic()
    before = sum(file_bytes(path))
    compacted = 0
    if vectors_available():
        rows = cast(
            list[tuple[int, int]],
            conn.execute("SELECT id, chunk_count FROM vector_stores ORDER BY id").fetchall(),
        )
        for key, chunks in rows:
            if chunks > COMPACT_MAX_ROWS:
                continue
            with atomic(conn):
                compacted += vector_index.compact(conn, key)
    if _pragma(conn, "auto_vacuum") != INCREMENTAL:
        # Once per database: the switch needs the whole file rewritten.
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")
        if checkpoint:
            # Writes waited for the VACUUM already; the WAL holds the whole file now.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    else:
        pages = STEP_PAGES
        while True:
            with atomic(conn):
                began = time.monotonic()
                free = _pragma(conn, "freelist_count")
                if free:
                    conn.execute(f"PRAGMA incremental_vacuum({min(free, pages):d})").fetchall()
            if free <= pages:
                break
            pages = next_step(pages, time.monotonic() - began)
            if checkpoint:
                # Moved pages go through the WAL: copy them back as we go, so it stays small.
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            time.sleep(PAUSE_SECONDS)
        if checkpoint:
            # The WAL back into the file without holding writers (PASSIVE), then cut to
            # nothing if no writer is in the way right now: a TRUNCATE checkpoint holds
            # writers while it runs, but with the frames already copied that is only the cut.
            # Busy, the WAL stays until the next write starts it over (journal_size_limit).
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            conn.set_busy_timeout(0)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except apsw.BusyError:
                pass
            finally:
                conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    return VacuumResult(
        bytes_before=before,
        bytes_after=sum(file_bytes(path)),
        seconds=time.monotonic() - started,
        compacted=compacted,
    )
