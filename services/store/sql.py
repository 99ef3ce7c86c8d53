"""What the shared store modules ask of a database connection, on either engine, and the few
SQL forms that differ between SQLite and PostgreSQL (the dialect).

An apsw connection is a `Connection` as it is; PostgreSQL's is postgres/connection.py's
wrapper, which takes the same `?` placeholders. The shared SQL is written in the forms both
engines accept (`INSERT ... RETURNING id`, `ON CONFLICT ... DO`, `CASE WHEN`); what cannot be
is one function of `Dialect` here, chosen by `dialect(conn)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol


class Cursor(Protocol):
    """A statement's rows: iterate, or take one (`fetchone`, `get`: its single value)."""

    def __iter__(self) -> Iterator[Any]: ...

    def fetchone(self) -> Any | None: ...

    def fetchall(self) -> list[Any]: ...

    @property
    def get(self) -> Any: ...


class Connection(Protocol):
    """The part of apsw's Connection the shared modules use."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, statements: str, bindings: Any = None, /) -> Cursor: ...

    def executemany(self, statements: str, sequenceofbindings: Iterable[Any], /) -> Cursor: ...

    def changes(self) -> int:
        """Rows the last INSERT, UPDATE or DELETE changed."""
        ...

    def total_changes(self) -> int:
        """Rows changed since the connection opened (differences count an executemany)."""
        ...


class Transactional(Connection, Protocol):
    """A connection that runs db.atomic's and db.try_write's contract itself (PostgreSQL's)."""

    def atomic(self, *, write: bool) -> AbstractContextManager[None]: ...

    def try_write(self, work: Callable[[Connection], object]) -> bool: ...


@dataclass(frozen=True)
class Dialect:
    name: str
    # A subquery of the integers, or of the strings, in one `?` parameter holding a JSON
    # list: `WHERE id IN {int_list}` with json.dumps(ids) bound.
    int_list: str
    text_list: str
    # `jobs AS j` as the claim query names it: SQLite is told the partial index of live jobs
    # (its planner would pick the file's index and scan done jobs).
    live_jobs: str
    # Added to the claim query: on PostgreSQL two stores claiming at once skip each other's
    # rows instead of taking the same jobs (SQLite has one writer: nothing to add).
    claim_lock: str
    # A join SQLite must not reorder (CROSS JOIN: the live jobs first); a plain one elsewhere.
    join_first: str
    # Two integers' larger one (SQLite's scalar max, PostgreSQL's greatest).
    greatest: str


SQLITE = Dialect(
    name="sqlite",
    int_list="(SELECT value FROM json_each(?))",
    text_list="(SELECT value FROM json_each(?))",
    live_jobs="jobs AS j INDEXED BY jobs_live",
    claim_lock="",
    join_first="CROSS JOIN",
    greatest="max",
)

POSTGRES = Dialect(
    name="postgres",
    int_list="(SELECT jsonb_array_elements_text(?::jsonb)::bigint)",
    text_list="(SELECT jsonb_array_elements_text(?::jsonb))",
    live_jobs="jobs AS j",
    claim_lock="FOR UPDATE OF j SKIP LOCKED",
    join_first="JOIN",
    greatest="greatest",
)


def dialect(conn: Connection) -> Dialect:
    """The connection's dialect: PostgreSQL's wrapper names its own, apsw's is SQLite."""
    found: Dialect = getattr(conn, "dialect", SQLITE)
    return found
