"""Is a database's schema the one ragd's migrations make? Asked before a restore puts a file in
place of the live database: a SQLite file with a ragd user_version but other tables would turn
every route into a 500 while /ready says 200.

The reference is built, not written down: the migrations up to the file's version run on an
empty database in memory, and each vector store's own tables (vec_N, vecf_N, vecq_N, fts_N)
are made by the code that makes them, once per kind of vector store and
renamed for each key the file's `vector_stores` holds (300 vector stores: 0.6 s). Tables are
compared by what SQLite reports of them (columns, foreign keys, strictness), so the way a
released migration's text was laid out never refuses a sound backup; virtual tables, indexes
and triggers by their SQL with whitespace collapsed. The tables FTS5 and sqlite-vec keep for
a virtual table are theirs to lay out (see _objects).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import apsw

from services.common.vocabulary import EXACT
from services.store import migrations, vector_index
from services.store.db import load_vectors, vectors_available

# Migration 5 gave vector stores their kind of vector index; migration 9 moved full-text
# search into one table per vector store (fts_N), migration 14 out of the database (Tantivy
# indexes beside it, rebuilt from the chunks: fulltext.py).
VECTOR_INDEX_SINCE = 5
FULLTEXT_PER_STORE_SINCE = 9
FULLTEXT_OUTSIDE_SINCE = 14
# Migration 15 renamed the table of vector stores (it was `collections`).
VECTOR_STORES_SINCE = 15
# Tables ragd never reads that others make in its database: SQLite (ANALYZE; sqlite_sequence
# is in the reference, made with the first AUTOINCREMENT table) and Litestream, which keeps
# its own in the database it replicates (replica.py).
_OTHERS = {"sqlite_stat1", "sqlite_stat4", "_litestream_seq", "_litestream_lock"}
# A vector store's own tables, named from its integer key (with a shadow table's suffix).
_PER_STORE = re.compile(r"(?:vec|vecf|vecq|fts)_([1-9][0-9]{0,18})(?:_[a-z0-9_]+)?")
_VECTOR_TABLES = re.compile(r"(?:vec|vecf|vecq)_([1-9][0-9]{0,18})(?:_[a-z0-9_]+)?")
_SHADOW_SUFFIX = re.compile(r"[a-z0-9_]+")
_MAX_LISTED = 5
# The key of the vector store whose tables are made once and renamed for each (_store_tables).
_TEMPLATE = 1
_TEMPLATE_NAME = re.compile(rf"(?<![A-Za-z0-9])(vec|vecf|vecq|fts)_{_TEMPLATE:d}(?![0-9])")

Shape = tuple[object, ...]
Migrations = list[Callable[[apsw.Connection], None]]


def problems(conn: apsw.Connection, version: int, migrations: Migrations) -> list[str]:
    """What keeps the database on `conn` (at schema `version`) from being ragd's: missing,
    different and unexpected tables, indexes and triggers; [] when it is ragd's."""
    found = _objects(conn)
    expected = _reference(migrations[:version])
    wrong = _compare(found, expected, per_store=False)
    if wrong:
        # The vector stores' keys are read from `vector_stores` once it is known to be ragd's.
        return wrong
    kind = "vector_index" if version >= VECTOR_INDEX_SINCE else f"'{EXACT}'"
    table = "vector_stores" if version >= VECTOR_STORES_SINCE else "collections"
    keys = {
        int(key): (int(dimensions), str(index))
        for key, dimensions, index in conn.execute(f"SELECT id, dimensions, {kind} FROM {table}")
    }
    vectors = vectors_available()
    if not vectors:
        # Without sqlite-vec no vector table can be made to compare with: those of the file's
        # vector stores are taken as they are (this store cannot read them anyway).
        found = {
            name: value for name, value in found.items() if not _vector_table_of(name, value, keys)
        }
    templates: dict[Tables, dict[str, tuple[str, Shape]]] = {}
    for key, (dimensions, index) in keys.items():
        tables = Tables(
            dimensions=dimensions,
            fulltext=FULLTEXT_PER_STORE_SINCE <= version < FULLTEXT_OUTSIDE_SINCE,
            # vec_N is made again at startup when it is missing (vector_index.create_missing).
            vectors=vectors and vector_index.vec_table(key) in found,
            coarse=vectors
            and (
                index != EXACT
                or vector_index.float_table(key) in found
                or vector_index.coarse_table(key) in found
            ),
        )
        if tables not in templates:
            templates[tables] = _store_tables(tables)
        expected.update(
            (str(_renamed(name, key)), (kind, cast(Shape, _renamed(shape, key))))
            for name, (kind, shape) in templates[tables].items()
        )
    return _compare(found, expected, per_store=True)


def summary(wrong: list[str]) -> str:
    """The first problems, and how many more."""
    shown = "; ".join(wrong[:_MAX_LISTED])
    more = len(wrong) - _MAX_LISTED
    return shown + (f" (and {more} more)" if more > 0 else "")


@dataclass(frozen=True)
class Tables:
    """Which tables one vector store has."""

    dimensions: int
    fulltext: bool
    vectors: bool
    coarse: bool


def _reference(migrations: Migrations) -> dict[str, tuple[str, Shape]]:
    with _memory() as conn:
        for step in migrations:
            with conn:
                step(conn)
        return _objects(conn)


def _store_tables(tables: Tables) -> dict[str, tuple[str, Shape]]:
    """The tables of a vector store of key _TEMPLATE, made as the store makes them. One such
    set per kind of vector store, renamed for each: making a vector store's tables costs more
    the more tables the database has (each DDL statement rewrites the schema)."""
    with _memory() as conn:
        if tables.fulltext:
            migrations.v9_fulltext_table(conn, _TEMPLATE)
        if tables.vectors:
            vector_index.create_tables(conn, _TEMPLATE, tables.dimensions)
        if tables.coarse:
            vector_index.create_coarse(conn, _TEMPLATE, tables.dimensions)
        return _objects(conn)


def _renamed(value: object, key: int) -> object:
    """`value` with the template vector store's key replaced by `key` in every name."""
    if isinstance(value, str):
        return _TEMPLATE_NAME.sub(lambda match: f"{match[1]}_{key:d}", value)
    if isinstance(value, tuple):
        return tuple(_renamed(item, key) for item in value)
    return value


@contextmanager
def _memory() -> Iterator[apsw.Connection]:
    conn = apsw.Connection(":memory:")
    try:
        load_vectors(conn)
        yield conn
    finally:
        conn.close()


def _objects(conn: apsw.Connection) -> dict[str, tuple[str, Shape]]:
    """Every schema object by name, its type and what is compared of it, but the tables a
    virtual table's module keeps for it (FTS5's items_fts_data, sqlite-vec's vec_1_rowids...)
    and their automatic indexes. Those are the module's: each version of FTS5 or sqlite-vec
    lays them out its own way and reads what older ones made, as in the live database; the
    virtual table itself is compared."""
    rows = cast(
        list[tuple[str, str, str, str | None]],
        conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_schema").fetchall(),
    )
    virtual = {
        name
        for kind, name, _, sql in rows
        if kind == "table" and " ".join((sql or "").split()[:3]).upper() == "CREATE VIRTUAL TABLE"
    }

    def shadow(name: str) -> bool:
        parts = name.split("_")
        return any(
            "_".join(parts[:cut]) in virtual and _SHADOW_SUFFIX.fullmatch("_".join(parts[cut:]))
            for cut in range(1, len(parts))
        )

    owned = {name for kind, name, _, _ in rows if kind == "table" and shadow(name)}
    # One listing for all tables: pragma_table_list(name) reads every table each time.
    flags = {
        str(name): (int(rowid), int(strict))
        for name, rowid, strict in conn.execute(
            "SELECT name, wr, strict FROM pragma_table_list WHERE schema = 'main'"
        )
    }
    return {
        name: (kind, _shape(conn, kind, name, table, sql, flags.get(name)))
        for kind, name, table, sql in rows
        if name not in owned and not (kind == "index" and sql is None and table in owned)
    }


def _shape(
    conn: apsw.Connection,
    kind: str,
    name: str,
    table: str,
    sql: str | None,
    flags: tuple[int, int] | None,
) -> Shape:
    text = " ".join(sql.split()) if sql else ""
    if kind == "table" and not text.upper().startswith("CREATE VIRTUAL TABLE"):
        # Names are bound, never spliced: they come from the file being checked.
        columns = conn.execute(
            'SELECT name, upper(type), "notnull", dflt_value, pk, hidden'
            " FROM pragma_table_xinfo(?)",
            (name,),
        ).fetchall()
        keys = conn.execute(
            'SELECT id, seq, "table", "from", "to", on_update, on_delete'
            " FROM pragma_foreign_key_list(?) ORDER BY id, seq",
            (name,),
        ).fetchall()
        return ("columns", tuple(columns), "foreign keys", tuple(keys), "flags", flags)
    if kind == "index" and not text:
        # An index SQLite made for a UNIQUE or PRIMARY KEY constraint.
        columns = conn.execute("SELECT name FROM pragma_index_info(?)", (name,)).fetchall()
        return (table, tuple(columns))
    return (table, text)


def _compare(
    found: dict[str, tuple[str, Shape]],
    expected: dict[str, tuple[str, Shape]],
    *,
    per_store: bool,
) -> list[str]:
    differs, unexpected, missing = [], [], []
    for name, (kind, shape) in sorted(expected.items()):
        if not per_store and _PER_STORE.fullmatch(name):
            continue
        if name not in found:
            missing.append(f"{kind} '{name}' is missing")
        elif found[name] != (kind, shape):
            differs.append(f"{found[name][0]} '{name}' differs from ragd's {kind}")
    for name, (kind, _) in sorted(found.items()):
        if name in expected or name in _OTHERS:
            continue
        if not per_store and (_PER_STORE.fullmatch(name) or _owned_by_store(name, found)):
            continue
        unexpected.append(f"{kind} '{name}' is not one of ragd's")
    # What is there but wrong says more than what is missing.
    return differs + unexpected + missing


def _vector_table_of(name: str, value: tuple[str, Shape], keys: dict[int, tuple[int, str]]) -> bool:
    kind, shape = value
    match = _VECTOR_TABLES.fullmatch(str(shape[0]) if kind == "index" else name)
    return match is not None and int(match[1]) in keys


def _owned_by_store(name: str, found: dict[str, tuple[str, Shape]]) -> bool:
    """An automatic index of a vector store's shadow table (checked with the table)."""
    kind, shape = found[name]
    return kind == "index" and bool(_PER_STORE.fullmatch(str(shape[0])))
