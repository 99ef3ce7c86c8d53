"""Every released schema, with rows in every table, migrated to the current one.

The fixtures (tests/data/schema_v<N>.db.gz) were written by the code of each version
(tests/data/make_schema_fixtures.py). Each is migrated to len(MIGRATIONS), whatever that is
now, and every row of every table must still be there with the values it had, every vector
in its vector table, every invariant of the store must hold, and the current code must find
the data: chunks by words and by vector, conversation items by words, API keys by secret.
A migration that rewrites a table on purpose says so in REWRITTEN below.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest

from services.common.vocabulary import LEXICAL
from services.store import migrations
from tests.store_fixtures import check_invariants, open_readonly, open_repository

DATA = Path(__file__).parent / "data"
# The last schema released before these fixtures were made: every version up to it has one.
RELEASED = 11
# Tables a migration replaced or transformed on purpose: table -> why.
REWRITTEN: dict[str, str] = {}
# Tables and columns a migration renamed (15: a collection is a vector store in every layer).
RENAMED_TABLES = {"collections": "vector_stores", "collection_files": "vector_store_files"}
RENAMED_COLUMNS = {"collection_id": "vector_store_id"}
# What the fixture script wrote (tests/data/schema_fixture_rows.py).
KEY_SECRET = "sk-fixture-admin"
LEXICAL_TEXT = "Tide tables list the harbour's high and low water."

Rows = dict[str, tuple[list[str], list[tuple[Any, ...]]]]


def fixture_version(path: Path) -> int:
    match = re.fullmatch(r"schema_v(\d+)\.db\.gz", path.name)
    assert match, path.name
    return int(match.group(1))


FIXTURES = sorted(DATA.glob("schema_v*.db.gz"), key=fixture_version)


def ordinary_tables(conn: apsw.Connection) -> list[str]:
    """The schema's tables, without virtual tables, the tables they keep their data in
    (vec_1_chunks, fts_1_data...) or SQLite's own."""
    virtual = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        )
    ]
    return [
        str(row[1])
        for row in conn.execute("PRAGMA main.table_list")
        if row[2] == "table"
        and not str(row[1]).startswith("sqlite_")
        and not any(str(row[1]).startswith(name + "_") for name in virtual)
    ]


def read_rows(path: Path) -> tuple[Rows, dict[int, dict[int, bytes]]]:
    """Every ordinary table's columns and rows (sorted), and every vector table's vectors."""
    conn = open_readonly(path)
    try:
        tables: Rows = {}
        for table in ordinary_tables(conn):
            columns = [str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')]
            rows = sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            tables[table] = (columns, [tuple(row) for row in rows])
        vectors = {}
        stores = "vector_stores" if "vector_stores" in tables else "collections"
        for row in conn.execute(f"SELECT id FROM {stores}").fetchall():
            key = int(row[0])  # type: ignore[arg-type]
            vectors[key] = {
                int(rowid): bytes(blob)
                for rowid, blob in conn.execute(f"SELECT rowid, embedding FROM vec_{key:d}")
            }
        return tables, vectors
    finally:
        conn.close()


def schema_version(path: Path) -> int:
    conn = apsw.Connection(str(path))
    try:
        return migrations.schema_version(conn)
    finally:
        conn.close()


def unpack(fixture: Path, tmp_path: Path) -> Path:
    path = tmp_path / "ragd.db"
    path.write_bytes(gzip.decompress(fixture.read_bytes()))
    return path


def test_every_released_schema_has_a_fixture() -> None:
    versions = [fixture_version(path) for path in FIXTURES]
    assert versions[:RELEASED] == list(range(1, RELEASED + 1)), versions
    assert versions[-1] <= len(migrations.MIGRATIONS)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda path: f"v{fixture_version(path)}")
def test_a_database_of_every_schema_migrates_with_all_its_data(
    fixture: Path, tmp_path: Path
) -> None:
    path = unpack(fixture, tmp_path)
    version = fixture_version(fixture)
    before, vectors = read_rows(path)
    empty = [table for table, (_, rows) in before.items() if not rows]
    assert not empty, f"the fixture has no rows in {empty}"
    assert schema_version(path) == version
    with open_repository(path):
        pass
    assert schema_version(path) == len(migrations.MIGRATIONS)
    after, vectors_after = read_rows(path)
    for table, (columns, rows) in before.items():
        if table in REWRITTEN:
            continue
        renamed = RENAMED_TABLES.get(table, table)
        assert renamed in after, f"migrating from v{version} dropped {table}"
        new_columns, new_rows = after[renamed]
        columns = [RENAMED_COLUMNS.get(name, name) for name in columns]
        assert set(columns) <= set(new_columns), f"{table} lost columns"
        kept = sorted(
            (tuple(row[new_columns.index(name)] for name in columns) for row in new_rows), key=repr
        )
        assert kept == rows, f"{table}: the rows differ after migrating from v{version}"
    assert vectors_after == vectors
    check_invariants(path)

    # The current code reads the old data.
    with open_repository(path) as repo:
        conn = open_readonly(path)
        main, target = (str(row[0]) for row in conn.execute(
            "SELECT public_id FROM vector_stores ORDER BY id"
        ))  # fmt: skip
        conn.close()
        for rowid, blob in vectors[1].items():
            [top] = repo.search(main, np.frombuffer(blob, dtype="<f4"), k=1)
            assert top.chunk_id == f"chunk_{rowid}" and top.score == pytest.approx(1.0)
        found = repo.search(main, None, k=5, mode=LEXICAL, query_text="lighthouse")
        assert [hit.file_id for hit in found] == ["file-fixture-a"]
        found = repo.search(main, None, k=5, mode=LEXICAL, query_text="tide tables")
        # A file indexed lexically (schema 8 on) is found by its words.
        assert [hit.text for hit in found] == ([LEXICAL_TEXT] if version >= 8 else [])
        if version >= 7:
            # The second vector store is the first one's re-index target, hidden behind it.
            reindex = repo.get_vector_store(main).reindex
            assert reindex is not None and reindex.status == "in_progress"
            assert reindex.model == "fixture-target-model"
        else:
            assert repo.get_vector_store(target).name == "fixture target"
        if version >= 6:
            [conversation] = repo.list_conversations().items
            assert conversation.title == "Where is the lighthouse?"
            items = repo.list_items(conversation.id, order="asc").items
            assert [item.role for item in items] == ["user", "assistant"]
            [hit] = repo.search_history("lighthouse", k=5, conversation_id=conversation.id)
            assert hit.item.id == items[0].id
            history = repo.history(previous_response_id="resp_fixture0002")
            assert [item.text for item in history][-1] == "The keeper of the"
        if version >= 10:
            key = repo.authenticate_api_key(KEY_SECRET)
            assert key is not None and key.name == "fixture-admin" and key.scope == "admin"
    check_invariants(path)
