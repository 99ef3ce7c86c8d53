"""PostgreSQL connections for the store: one per thread, wrapped to offer what the shared
modules use of apsw's (sql.Connection), and db.atomic's contract on PostgreSQL.

The shared SQL keeps SQLite's `?` placeholders; each statement text is translated once (to
psycopg's `%s`, literal `%` doubled) and cached. Transactions: write transactions take one
advisory lock for their length, so writers run one at a time across every store on the
database, as SQLite's one writer does (BEGIN IMMEDIATE): the shared modules' read-then-write
steps stay correct without a row lock each. Reads (`write=False`) run in one REPEATABLE READ
READ ONLY snapshot and take no lock.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors
from psycopg.adapt import Loader
from psycopg.pq import TransactionStatus

from services.store.errors import (
    AlreadyExists,
    Busy,
    DatabaseUnavailable,
    InvalidArgument,
    StorageFull,
    Unavailable,
)
from services.store.sql import POSTGRES, Connection, Dialect

log = logging.getLogger(__name__)

# pg_advisory_xact_lock keys (any bigint, fixed for ragd): the writers' lock, and the
# migrations' (migrations take both: a writer never sees a half-made schema).
WRITE_LOCK = 0x72616764_0001  # "ragd" 1
MIGRATION_LOCK = 0x72616764_0002
# Seconds a statement may wait for a row or advisory lock before the call answers Busy.
LOCK_TIMEOUT_MS = 30_000
CONNECT_TIMEOUT_SECONDS = 10
# Milliseconds a statement of a read transaction (a search, a listing) may run: past the
# gateway's wait for the store (RAGD_STORE_TIMEOUT, 30 s) nobody reads its answer, and it
# must not hold a connection and the server's CPU. Writes are not cut short (an index build
# may take longer).
READ_STATEMENT_TIMEOUT_MS = 30_000


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """SQLite's `?` placeholders as psycopg's `%s`, literal `%` doubled; quoted strings and
    identifiers are left as they are."""
    out: list[str] = []
    quote = ""
    for char in sql:
        if quote:
            out.append("%%" if char == "%" else char)
            if char == quote:
                quote = ""
        elif char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


class _IntegralNumeric(Loader):
    """numeric as int when it has no fraction (sum() of bigint columns), else float: the
    shared code reads SQLite's integers and reals, never Decimal."""

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        return float(text) if any(c in text for c in ".eEN") else int(text)


def _error(error: psycopg.Error) -> Exception:
    """The store's error kind for a database error, as wire/rpc_base.py maps apsw's."""
    if isinstance(error, psycopg.errors.UniqueViolation):
        return AlreadyExists(f"already exists: {error.diag.message_primary or error}")
    if isinstance(error, psycopg.errors.DiskFull):
        return StorageFull("the database server's disk is full")
    if isinstance(
        error,
        psycopg.errors.LockNotAvailable
        | psycopg.errors.SerializationFailure
        | psycopg.errors.DeadlockDetected,
    ):
        return Busy(f"the database is busy ({type(error).__name__}); retry")
    if isinstance(error, psycopg.errors.QueryCanceled):
        return Unavailable(
            "the database did not answer within its statement timeout "
            f"({READ_STATEMENT_TIMEOUT_MS // 1000} s for a read); retry"
        )
    if isinstance(error, psycopg.DataError):
        # A value PostgreSQL cannot hold, such as text with a NUL character (SQLite can):
        # the caller's input, not a fault of the store.
        return InvalidArgument(f"PostgreSQL cannot store this value: {str(error).strip()}")
    if isinstance(error, psycopg.OperationalError | psycopg.errors.AdminShutdown):
        return DatabaseUnavailable(f"PostgreSQL is unavailable: {str(error).strip()}")
    return error


class Cursor:
    """A statement's rows, as apsw's cursor offers them."""

    def __init__(self, rows: list[tuple[Any, ...]] | None) -> None:
        self._rows = rows or []
        self._next = 0

    def __iter__(self) -> Iterator[Any]:
        while (row := self.fetchone()) is not None:
            yield row

    def fetchone(self) -> Any | None:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[Any]:
        rows, self._next = self._rows[self._next :], len(self._rows)
        return rows

    @property
    def get(self) -> Any:
        """apsw's: None without rows; a lone row's lone value, or its tuple; else the list."""
        rows = self.fetchall()
        if not rows:
            return None
        flat = [row[0] if len(row) == 1 else row for row in rows]
        return flat[0] if len(flat) == 1 else flat


class PostgresConnection:
    """One psycopg connection (autocommit: transactions are atomic()'s) as a sql.Connection."""

    dialect: Dialect = POSTGRES

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw
        self._changes = 0
        self._total = 0

    @classmethod
    def connect(cls, url: str) -> PostgresConnection:
        try:
            raw = psycopg.connect(
                url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                application_name="ragd-store",
            )
        except psycopg.Error as error:
            raise _error(error) from error
        raw.adapters.register_loader("numeric", _IntegralNumeric)
        raw.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS:d}")
        return cls(raw)

    @property
    def broken(self) -> bool:
        return self.raw.closed or self.raw.broken

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def execute(self, statements: str, bindings: Any = None, /) -> Cursor:
        try:
            cursor = self.raw.execute(translate(statements), bindings, prepare=False)
            rows = cursor.fetchall() if cursor.description is not None else None
        except psycopg.Error as error:
            raise _error(error) from error
        self._count(cursor.rowcount)
        return Cursor(rows)

    def executemany(self, statements: str, sequenceofbindings: Iterable[Any], /) -> Cursor:
        try:
            with self.raw.cursor() as cursor:
                cursor.executemany(translate(statements), list(sequenceofbindings))
                self._count(cursor.rowcount)
        except psycopg.Error as error:
            raise _error(error) from error
        return Cursor(None)

    def _count(self, rowcount: int) -> None:
        self._changes = max(rowcount, 0)
        self._total += self._changes

    def changes(self) -> int:
        return self._changes

    def total_changes(self) -> int:
        return self._total

    @contextmanager
    def atomic(self, *, write: bool) -> Iterator[None]:
        """db.atomic on PostgreSQL: one transaction; writers one at a time (the write lock),
        readers one snapshot."""
        if self.in_transaction:
            raise RuntimeError("atomic() blocks do not nest")
        self.execute("BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            if write:
                self.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
            else:
                self.execute(f"SET LOCAL statement_timeout = {READ_STATEMENT_TIMEOUT_MS:d}")
        except BaseException:
            self._rollback()
            raise
        try:
            yield
        except BaseException:
            self._rollback()
            raise
        try:
            self.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def try_write(self, work: Callable[[Connection], object]) -> bool:
        """db.try_write on PostgreSQL: False, never waiting, when another writer holds the
        write lock; False too for a full disk."""
        if self.in_transaction:
            raise RuntimeError("atomic() blocks do not nest")
        self.execute("BEGIN")
        try:
            if not self.execute("SELECT pg_try_advisory_xact_lock(?)", (WRITE_LOCK,)).get:
                self._rollback()
                return False
            self.execute("SET LOCAL lock_timeout = 1")
            work(self)
            self.execute("COMMIT")
        except (StorageFull, Busy):
            self._rollback()
            return False
        except BaseException:
            self._rollback()
            raise
        return True

    def _rollback(self) -> None:
        if self.broken:
            return
        try:
            self.raw.execute("ROLLBACK")
        except psycopg.Error:
            log.warning("rollback failed; the connection is closed", exc_info=True)
            self.raw.close()

    def close(self) -> None:
        self.raw.close()


class PostgresConnections:
    """One connection per thread, opened on first use and opened anew when the server
    dropped it; `close()` closes them all."""

    def __init__(self, url: str, *, limit: int) -> None:
        self.url = url
        self.limit = limit
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[PostgresConnection] = []
        self._closed = False

    def get(self) -> PostgresConnection:
        conn: PostgresConnection | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.broken:
            return conn
        with self._lock:
            if self._closed:
                raise RuntimeError("the database has been closed")
            if conn is not None:  # the server dropped it: a new one in its place
                # Forgotten before the new one is opened: if that fails too (the server is
                # still away), the next call starts from nothing rather than this one.
                self._local.conn = None
                self._opened.remove(conn)
                conn.close()
            if len(self._opened) >= self.limit:
                raise Unavailable(
                    f"the store's {self.limit} PostgreSQL connections are all in use "
                    "(RAGD_DATABASE_POOL_MAX)"
                )
            conn = PostgresConnection.connect(self.url)
            self._opened.append(conn)
        self._local.conn = conn
        return conn

    def counts(self) -> tuple[int, int]:
        """Connections open now, and the most this store opens (RAGD_DATABASE_POOL_MAX)."""
        with self._lock:
            return len(self._opened), self.limit

    def close(self) -> None:
        with self._lock:
            self._closed = True
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
