"""Opening the SQLite database, transactions, and one connection per thread."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import apsw

from services.store import resident
from services.store.sql import Connection, Transactional

try:
    import sqlite_vec
except ImportError:  # the store still serves full-text search without it
    sqlite_vec = None

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
MMAP_BYTES = 1 << 30
WAL_LIMIT_BYTES = 64 << 20


# The database holds every indexed document in clear: owner only. SQLite gives its -wal and
# -shm files the database file's permissions.
FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


def create_private(path: Path) -> None:
    """Creates `path` (and its missing directories) readable by the owner only, or narrows an
    existing file's permissions to that."""
    path.parent.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, FILE_MODE))
    if path.stat().st_mode & 0o777 != FILE_MODE:
        os.chmod(path, FILE_MODE)


@dataclass
class _Vectors:
    """Whether this process has sqlite-vec: decided by the first connection, for all."""

    path: str = ""
    loaded: bool | None = None
    error: str = ""


_vectors = _Vectors()


def use_sqlite_vec(path: str) -> None:
    """Loads sqlite-vec from `path` (RAGD_SQLITE_VEC_PATH) instead of the package's build."""
    _vectors.path = path


def vectors_available() -> bool:
    """sqlite-vec is loaded: vector indexes can be read and written. Without it the store
    runs lexical-only (full-text search, files indexed by text with vectors pending)."""
    return _vectors.loaded is not False


def vectors_error() -> str:
    """Why sqlite-vec could not be loaded ("" when it was)."""
    return _vectors.error


def library_versions(conn: apsw.Connection) -> dict[str, str]:
    """The engine, SQLite, apsw and (when loaded) sqlite-vec, as this connection runs them."""
    versions = {
        "engine": "sqlite",
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
    }
    if _vectors.loaded:
        versions["sqlite_vec"] = str(conn.execute("SELECT vec_version()").get).lstrip("v")
    return versions


def load_vectors(conn: apsw.Connection) -> None:
    """Loads sqlite-vec into the connection; the first failure makes the process lexical-only
    (logged once), and every later connection skips it alike."""
    if _vectors.loaded is False:
        return
    path = _vectors.path or (sqlite_vec.loadable_path() if sqlite_vec is not None else "")
    try:
        if not path:
            raise OSError("the sqlite-vec package is not installed")
        conn.enable_load_extension(True)
        conn.load_extension(path)
    except (apsw.Error, OSError) as error:
        if _vectors.loaded:
            raise  # it loaded before in this process: something else is wrong
        _vectors.loaded = False
        _vectors.error = f"sqlite-vec could not be loaded ({path or 'no path'}): {error}"
        log.warning("%s; serving full-text search only (lexical-only mode)", _vectors.error)
    else:
        _vectors.loaded = True
    finally:
        conn.enable_load_extension(False)


def open_database(path: str | Path, *, checkpoints: bool = True) -> apsw.Connection:
    """Opens (creating it and its directory if needed) the database with sqlite-vec loaded
    when it can be (see vectors_available).

    `checkpoints=False` leaves the WAL to another process (Litestream, replica.py): no
    automatic checkpoints and no journal_size_limit, so no commit of ours copies pages back or
    truncates the WAL before that process has read them."""
    path = Path(path)
    create_private(path)
    conn = apsw.Connection(str(path))
    try:
        load_vectors(conn)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
        if conn.execute("PRAGMA page_count").fetchone() == (0,):
            # A new, empty file: free pages can go back to the disk in slices while writes
            # go on (vacuum.py). (An older file keeps its mode until a full VACUUM; setting
            # it on every open would take the write lock.)
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        # Under WAL a commit acknowledged to the caller survives a process kill whatever this
        # says; NORMAL only skips the fsync per commit, so a power loss may drop the last
        # commits but never corrupts the database.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        # Vector scans read every vector blob; through mmap they skip a copy per page
        # (sqlite-vec's exhaustive KNN at 100k x 384 went from ~95 to ~50 ms). Address space
        # only: pages are shared with the OS cache, not counted twice.
        conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES:d}")
        if checkpoints:
            # A WAL is reused, never shrunk, after a checkpoint: without a limit one bulk load
            # (or a long build) would leave it at its peak size for good.
            conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES:d}")
        else:
            # Litestream checkpoints after it has copied the WAL, and bounds its size itself
            # (a TRUNCATE checkpoint past truncate-page-n). An automatic checkpoint of ours
            # between two of its reads would make it miss frames and take a full snapshot.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
    except BaseException:
        conn.close()
        raise
    return conn


def database_key(conn: apsw.Connection) -> str:
    """Names the database file a connection has open, for the caches of this process: its
    path and inode, so a file deleted and made anew under the same path is another."""
    name = conn.filename
    if not name:
        return ""
    try:
        found = os.stat(name)
    except OSError:
        return ""
    return f"{name}:{found.st_dev}:{found.st_ino}"


@contextmanager
def atomic(conn: Connection, *, write: bool = True) -> Iterator[Connection]:
    """Runs the block in one transaction: committed on success, rolled back on any exception.

    Writers take the write lock up front (BEGIN IMMEDIATE), so two writers never deadlock
    upgrading a read lock; readers (write=False) get one consistent snapshot for the block.
    Transactions do not nest. PostgreSQL's connection keeps the same contract itself
    (postgres/connection.py).
    """
    if not isinstance(conn, apsw.Connection):
        with cast(Transactional, conn).atomic(write=write):
            yield conn
        return
    if conn.in_transaction:
        raise RuntimeError("atomic() blocks do not nest")
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield conn
    except BaseException:
        resident.discarded(conn)
        conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except BaseException:
        resident.discarded(conn)
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    # What the transaction changed in vectors reaches the in-memory copies only now.
    resident.committed(conn, database_key(conn))


def try_write(conn: Connection, work: Callable[[Connection], object]) -> bool:
    """Runs `work` in a write transaction if the write lock is free now; False if it is not.

    For best-effort bookkeeping on read paths (a search's last_active_at, a cache entry's last
    use): a reader must never wait behind an ingest's write transaction for it, nor fail for a
    full disk (False then too).
    """
    if not isinstance(conn, apsw.Connection):
        return cast(Transactional, conn).try_write(work)
    if conn.in_transaction:
        raise RuntimeError("atomic() blocks do not nest")
    conn.set_busy_timeout(0)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except apsw.BusyError:
        return False
    finally:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    try:
        work(conn)
        conn.execute("COMMIT")
    except apsw.FullError:
        # Bookkeeping gives way to a full disk: the read it rides on still answers.
        resident.discarded(conn)
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return False
    except BaseException:
        resident.discarded(conn)
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    resident.committed(conn, database_key(conn))
    return True


class ThreadConnections:
    """One connection per thread, opened on first use; `close()` closes them all."""

    def __init__(self, path: str | Path, *, checkpoints: bool = True) -> None:
        self.path = Path(path)
        # See open_database.
        self.checkpoints = checkpoints
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[apsw.Connection] = []
        self._closed = False

    def get(self) -> apsw.Connection:
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the database has been closed")
                conn = open_database(self.path, checkpoints=self.checkpoints)
                self._opened.append(conn)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
