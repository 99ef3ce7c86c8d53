"""The engine-specific calls of the shared modules (vector index, full text), chosen once by
the connection's dialect: the shared code says `engine.of(conn).vectors.insert(conn, ...)`
and never tests which engine runs.

SQLite's are vector_index.py and fulltext.py as they are. PostgreSQL's are postgres/vectors.py
and postgres/fulltext.py, the same functions taking the raw psycopg connection; until they
exist, vector stores are made and filled there without vectors or full text, and a search
answers Unavailable.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.store import fulltext, vector_index
from services.store.errors import Unavailable
from services.store.sql import POSTGRES, Connection, dialect

# Module functions that only maintain an index: without the module there is nothing to keep.
_MAINTENANCE = frozenset(
    {
        "create",
        "drop",
        "add",
        "remove",
        "create_tables",
        "drop_tables",
        "insert",
        "insert_windows",
        "delete",
    }
)


@dataclass(frozen=True)
class Engine:
    name: str
    # vector_index's functions (SQLite), or postgres/vectors.py's.
    vectors: Any
    # fulltext's functions (SQLite), or postgres/fulltext.py's.
    fulltext: Any

    @property
    def has_vectors(self) -> bool:
        """The engine has its vector module (SQLite's may still lack sqlite-vec: db.py)."""
        return not isinstance(self.vectors, _Missing)


class _OnRaw:
    """A PostgreSQL module's functions called with the wrapper's raw psycopg connection in
    place of the wrapper (the first argument)."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Callable[..., Any]:
        function = getattr(self._module, name)
        if not callable(function):
            return function  # type: ignore[no-any-return]

        def call(conn: Any, *args: Any, **kwargs: Any) -> Any:
            return function(getattr(conn, "raw", conn), *args, **kwargs)

        return call


class _Missing:
    """An index module this build does not have yet (merged from issue 31's other branch)."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in _MAINTENANCE:
            return lambda *args, **kwargs: None

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise Unavailable(f"{self._what} on PostgreSQL is not in this build of the store")

        return refuse


def _postgres_module(name: str, what: str) -> Any:
    try:
        module = importlib.import_module(f"services.store.postgres.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"services.store.postgres.{name}":
            raise
        return _Missing(what)
    return _OnRaw(module)


SQLITE_ENGINE = Engine(name="sqlite", vectors=vector_index, fulltext=fulltext)
_postgres: Engine | None = None


def postgres_engine() -> Engine:
    global _postgres
    if _postgres is None:
        _postgres = Engine(
            name="postgres",
            vectors=_postgres_module("vectors", "vector search"),
            fulltext=_postgres_module("fulltext", "full-text search"),
        )
    return _postgres


def of(conn: Connection) -> Engine:
    return postgres_engine() if dialect(conn) is POSTGRES else SQLITE_ENGINE
