"""The store's core against real SQLite files: migrations, vector stores, chunks, search."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import apsw
import numpy as np
import pytest

from services.store import migrations
from services.store.db import atomic, open_database
from services.store.errors import (
    DatabaseTooNew,
    DimensionMismatch,
    InvalidArgument,
    ModelMismatch,
    VectorStoreNotFound,
)
from services.store.records import ChunkInput
from services.store.repository import Repository
from tests.store_fixtures import MODEL, FakeClock, open_repository, table_names, unit_vectors

DIMS = 16


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def count(conn: apsw.Connection, sql: str, *params: object) -> int:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def vector_count(repo: Repository, vector_store_id: str) -> int:
    """Rows in the vector_store's vec0 table, which the search join would otherwise hide."""
    conn = open_database(repo.path)
    try:
        key = count(conn, "SELECT id FROM vector_stores WHERE public_id = ?", vector_store_id)
        return count(conn, f"SELECT count(*) FROM vec_{key}")
    finally:
        conn.close()


def chunk_inputs(n: int, prefix: str = "chunk") -> list[ChunkInput]:
    return [ChunkInput(text=f"{prefix} {i} é", token_count=3) for i in range(n)]


# Migrations


def test_migrate_creates_schema_from_empty_database(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "ragd.db"
    conn = open_database(path)
    try:
        assert migrations.schema_version(conn) == 0
        assert migrations.migrate(conn) == len(migrations.MIGRATIONS)
        assert migrations.schema_version(conn) == len(migrations.MIGRATIONS)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    finally:
        conn.close()
    assert {"vector_stores", "files", "vector_store_files", "chunks"} <= table_names(path)


def test_reopening_a_migrated_database_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "ragd.db"
    with open_repository(path) as repo:
        created = repo.create_vector_store("notes", MODEL, DIMS)
    with open_repository(path) as repo:
        assert repo.migrate() == len(migrations.MIGRATIONS)
        assert repo.get_vector_store(created.id) == created


def test_refuses_a_database_from_a_newer_build(tmp_path: Path) -> None:
    conn = open_database(tmp_path / "ragd.db")
    try:
        migrations.migrate(conn)
        newer = len(migrations.MIGRATIONS) + 1
        conn.execute(f"PRAGMA user_version = {newer}")
        with pytest.raises(DatabaseTooNew, match=f"schema version {newer}"):
            migrations.migrate(conn)
        assert migrations.schema_version(conn) == newer
        assert not conn.in_transaction
    finally:
        conn.close()


def test_a_failing_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    def broken(conn: apsw.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x INTEGER)")
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    steps = [*migrations.MIGRATIONS, broken]
    conn = open_database(tmp_path / "ragd.db")
    try:
        with pytest.raises(apsw.SQLError):
            migrations.migrate(conn, steps)
        assert migrations.schema_version(conn) == len(migrations.MIGRATIONS)
        assert count(conn, "SELECT count(*) FROM sqlite_master WHERE name = 'half_done'") == 0
    finally:
        conn.close()


def test_atomic_rolls_back_on_error_and_refuses_nesting(tmp_path: Path) -> None:
    conn = open_database(tmp_path / "ragd.db")
    try:
        conn.execute("CREATE TABLE t (x INTEGER)")
        with pytest.raises(ZeroDivisionError), atomic(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            _ = 1 / 0
        assert count(conn, "SELECT count(*) FROM t") == 0
        with atomic(conn), pytest.raises(RuntimeError, match="do not nest"), atomic(conn):
            pass
    finally:
        conn.close()


# VectorStores


def test_create_and_get_vector_store(repo: Repository, clock: FakeClock) -> None:
    created = repo.create_vector_store("notes", MODEL, DIMS, {"team": "docs"})
    assert created.id.startswith("vs_") and len(created.id) == 27
    assert (created.name, created.model, created.dimensions) == ("notes", MODEL, DIMS)
    assert created.metadata == {"team": "docs"}
    assert created.created_at == created.last_active_at == clock.now
    assert (created.chunk_count, created.file_count, created.usage_bytes) == (0, 0, 0)
    assert repo.get_vector_store(created.id) == created


@pytest.mark.parametrize(
    ("model", "dims", "message"),
    [("", DIMS, "model is required"), (MODEL, 0, "dimensions"), (MODEL, 8193, "dimensions")],
)
def test_create_rejects_bad_settings(repo: Repository, model: str, dims: int, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        repo.create_vector_store("x", model, dims)
    assert repo.list_vector_stores().items == []


def test_unknown_vector_store_is_not_found(repo: Repository) -> None:
    with pytest.raises(VectorStoreNotFound, match="vs_missing"):
        repo.get_vector_store("vs_missing")
    with pytest.raises(VectorStoreNotFound):
        repo.delete_vector_store("vs_missing")
    with pytest.raises(VectorStoreNotFound):
        repo.search("vs_missing", np.ones(DIMS), k=1)
    with pytest.raises(VectorStoreNotFound):
        repo.add_chunks("vs_missing", "file-1", "a.txt", {}, [], np.zeros((0, DIMS)), MODEL)


def test_list_vector_stores_pages_in_both_orders(repo: Repository) -> None:
    ids = [repo.create_vector_store(f"c{i}", MODEL, DIMS).id for i in range(5)]
    newest_first = ids[::-1]

    def listed(**kwargs: object) -> tuple[list[str], bool]:
        page = repo.list_vector_stores(**kwargs)  # type: ignore[arg-type]
        return [c.id for c in page.items], page.has_more

    assert listed() == (newest_first, False)
    assert listed(order="asc") == (ids, False)
    assert listed(limit=2) == (newest_first[:2], True)
    assert listed(limit=2, after=newest_first[1]) == (newest_first[2:4], True)
    assert listed(limit=2, after=newest_first[3]) == (newest_first[4:], False)
    assert listed(limit=2, order="asc", after=ids[2]) == (ids[3:5], False)
    # `before` returns the items just preceding the cursor, still in list order.
    assert listed(limit=2, before=newest_first[4]) == (newest_first[2:4], True)
    assert listed(limit=3, before=newest_first[2]) == (newest_first[:2], False)
    assert listed(limit=10, after=ids[4], before=ids[0]) == (newest_first[1:4], False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"order": "newest"}, "order"),
        ({"after": "vs_gone"}, "after cursor"),
        ({"before": "vs_gone"}, "before cursor"),
    ],
)
def test_list_vector_stores_rejects_bad_arguments(
    repo: Repository, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        repo.list_vector_stores(**kwargs)  # type: ignore[arg-type]


# Reads SQLite's own tables (vec0, the file) to see what the search would hide.
@pytest.mark.engines("sqlite")
def test_delete_removes_chunks_vectors_and_table(
    repo: Repository, rng: np.random.Generator
) -> None:
    doomed = repo.create_vector_store("doomed", MODEL, DIMS)
    kept = repo.create_vector_store("kept", MODEL, DIMS)
    for vector_store in (doomed, kept):
        repo.add_chunks(
            vector_store.id,
            "file-1",
            "a.txt",
            {},
            chunk_inputs(4),
            unit_vectors(rng, 4, DIMS),
            MODEL,
        )
    conn = open_database(repo.path)
    try:
        key = count(conn, "SELECT id FROM vector_stores WHERE public_id = ?", doomed.id)
        assert f"vec_{key}" in table_names(repo.path)
        repo.delete_vector_store(doomed.id)
        assert count(conn, "SELECT count(*) FROM chunks WHERE vector_store_id = ?", key) == 0
        assert (
            count(conn, "SELECT count(*) FROM vector_store_files WHERE vector_store_id = ?", key)
            == 0
        )
        assert not {name for name in table_names(repo.path) if name.startswith(f"vec_{key}")}
        assert count(conn, "SELECT count(*) FROM chunks") == 4
    finally:
        conn.close()
    with pytest.raises(VectorStoreNotFound):
        repo.get_vector_store(doomed.id)
    assert [c.id for c in repo.list_vector_stores().items] == [kept.id]
    assert len(repo.search(kept.id, unit_vectors(rng, 1, DIMS)[0], k=10)) == 4


# Adding chunks


def test_add_chunks_updates_counts_usage_and_activity(
    repo: Repository, clock: FakeClock, rng: np.random.Generator
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    chunks = chunk_inputs(3)
    clock.now += 10
    result = repo.add_chunks(
        vector_store.id, "file-1", "a.txt", {}, chunks, unit_vectors(rng, 3, DIMS), MODEL
    )
    text_bytes = sum(len(c.text.encode()) for c in chunks)
    assert result.file_id == "file-1"
    assert result.chunk_count == 3
    assert result.usage_bytes == text_bytes + 3 * 4 * DIMS
    repo.add_chunks(
        vector_store.id, "file-2", "b.txt", {}, chunks[:1], unit_vectors(rng, 1, DIMS), MODEL
    )
    after = repo.get_vector_store(vector_store.id)
    assert (after.chunk_count, after.file_count) == (4, 2)
    assert after.usage_bytes == result.usage_bytes + len(chunks[0].text.encode()) + 4 * DIMS
    assert after.last_active_at == clock.now
    assert after.created_at == clock.now - 10


# Reads SQLite's own tables (vec0, the file) to see what the search would hide.
@pytest.mark.engines("sqlite")
def test_adding_a_file_again_replaces_its_chunks(
    repo: Repository, rng: np.random.Generator
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    repo.add_chunks(
        vector_store.id,
        "file-1",
        "old.txt",
        {"v": 1},
        chunk_inputs(5, "old"),
        unit_vectors(rng, 5, DIMS),
        MODEL,
    )
    second = repo.add_chunks(
        vector_store.id,
        "file-1",
        "new.txt",
        {"v": 2},
        chunk_inputs(2, "new"),
        unit_vectors(rng, 2, DIMS),
        MODEL,
    )
    after = repo.get_vector_store(vector_store.id)
    assert (after.chunk_count, after.file_count, after.usage_bytes) == (2, 1, second.usage_bytes)
    assert vector_count(repo, vector_store.id) == 2
    hits = repo.search(vector_store.id, unit_vectors(rng, 1, DIMS)[0], k=100)
    assert sorted(hit.text for hit in hits) == ["new 0 é", "new 1 é"]
    assert {(hit.filename, hit.attributes["v"]) for hit in hits} == {("new.txt", 2)}


# Reads SQLite's own tables (vec0, the file) to see what the search would hide.
@pytest.mark.engines("sqlite")
def test_a_failing_add_leaves_nothing_behind(repo: Repository, rng: np.random.Generator) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    first = unit_vectors(rng, 3, DIMS)
    repo.add_chunks(vector_store.id, "file-1", "a.txt", {}, chunk_inputs(3), first, MODEL)
    before = repo.get_vector_store(vector_store.id)
    conn = open_database(repo.path)
    try:
        # Fails the last statement of add_chunks, after the chunk and vector rows are written.
        conn.execute(
            "CREATE TRIGGER fail_add BEFORE UPDATE OF chunk_count ON vector_stores "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        for file_id in ("file-1", "file-2"):  # a replacement and a new file
            with pytest.raises(apsw.ConstraintError, match="injected failure"):
                repo.add_chunks(
                    vector_store.id,
                    file_id,
                    "b.txt",
                    {},
                    chunk_inputs(4, "new"),
                    unit_vectors(rng, 4, DIMS),
                    MODEL,
                )
        assert count(conn, "SELECT count(*) FROM chunks") == 3
        assert count(conn, "SELECT count(*) FROM files") == 1
        assert count(conn, "SELECT count(*) FROM vector_store_files") == 1
        assert vector_count(repo, vector_store.id) == 3
    finally:
        conn.close()
    assert repo.get_vector_store(vector_store.id) == before
    hits = repo.search(vector_store.id, first[1], k=10)
    assert hits[0].chunk_index == 1
    assert {hit.text for hit in hits} == {c.text for c in chunk_inputs(3)}


@pytest.mark.parametrize(
    ("file_id", "rows", "vector_fix", "attributes", "message"),
    [
        ("", 2, None, {}, "file_id is required"),
        ("file-1", 3, None, {}, "one vector per chunk"),
        ("file-1", 2, "nan", {}, "NaN"),
        ("file-1", 2, "zero", {}, "all zeros"),
        ("file-1", 2, None, {"n": math.inf}, "attribute 'n'"),
        ("file-1", 2, None, {"": "x"}, "attribute names"),
    ],
)
def test_add_chunks_rejects_bad_input(
    repo: Repository,
    rng: np.random.Generator,
    file_id: str,
    rows: int,
    vector_fix: str | None,
    attributes: dict[str, str | float | bool],
    message: str,
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    vectors = unit_vectors(rng, rows, DIMS)
    if vector_fix == "nan":
        vectors[1, 0] = np.nan
    elif vector_fix == "zero":
        vectors[1] = 0.0
    with pytest.raises(InvalidArgument, match=message):
        repo.add_chunks(
            vector_store.id, file_id, "a.txt", attributes, chunk_inputs(2), vectors, MODEL
        )
    assert repo.get_vector_store(vector_store.id).chunk_count == 0


def test_dimension_and_model_mismatches_say_what_to_do(
    repo: Repository, rng: np.random.Generator
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, 384)
    with pytest.raises(DimensionMismatch) as dims_error:
        repo.add_chunks(
            vector_store.id, "f", "a", {}, chunk_inputs(1), unit_vectors(rng, 1, 768), MODEL
        )
    assert str(dims_error.value) == (
        f"vector store '{vector_store.id}' was indexed with {MODEL} (384 dims), not {MODEL} "
        f"(768 dims); index it from a ragd whose embedder serves {MODEL}, or attach the files "
        f"to a vector store created with {MODEL}"
    )
    with pytest.raises(ModelMismatch, match=r"indexed with all-MiniLM-L6-v2 .*, not bge-base"):
        repo.add_chunks(
            vector_store.id, "f", "a", {}, chunk_inputs(1), unit_vectors(rng, 1, 384), "bge-base"
        )
    with pytest.raises(DimensionMismatch, match="not 768-dim vectors; search it from a ragd"):
        repo.search(vector_store.id, unit_vectors(rng, 1, 768)[0], k=1)
    with pytest.raises(ModelMismatch, match="whose embedder serves all-MiniLM-L6-v2"):
        repo.search(vector_store.id, unit_vectors(rng, 1, 384)[0], k=1, model="bge-base")
    assert repo.search(vector_store.id, unit_vectors(rng, 1, 384)[0], k=1, model=MODEL) == []
    assert repo.search(vector_store.id, unit_vectors(rng, 1, 384)[0], k=1, model="") == []


# Search


def test_search_matches_a_numpy_reference(repo: Repository, rng: np.random.Generator) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    per_file = 150
    vectors = unit_vectors(rng, 3 * per_file, DIMS)
    for f in range(3):
        rows = vectors[f * per_file : (f + 1) * per_file]
        repo.add_chunks(
            vector_store.id,
            f"file-{f}",
            f"{f}.txt",
            {},
            chunk_inputs(per_file, f"f{f}"),
            rows,
            MODEL,
        )
    for query in unit_vectors(rng, 5, DIMS):
        expected_scores = (1.0 + vectors @ query) / 2.0
        expected = np.argsort(-expected_scores)[:10]
        hits = repo.search(vector_store.id, query, k=10)
        got = [int(hit.file_id[-1]) * per_file + hit.chunk_index for hit in hits]
        assert got == expected.tolist()
        np.testing.assert_allclose([h.score for h in hits], expected_scores[expected], atol=1e-5)
        assert all(hit.text == f"f{hit.file_id[-1]} {hit.chunk_index} é" for hit in hits)


def test_scores_map_cosine_distance_into_zero_one(repo: Repository) -> None:
    vector_store = repo.create_vector_store("axes", MODEL, 2)
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=np.float32)
    repo.add_chunks(vector_store.id, "f", "a", {}, chunk_inputs(3), vectors, MODEL)
    hits = repo.search(vector_store.id, [2.0, 0.0], k=3)  # not normalized: cosine ignores length
    assert [hit.chunk_index for hit in hits] == [0, 1, 2]
    np.testing.assert_allclose([hit.score for hit in hits], [1.0, 0.5, 0.0], atol=1e-6)


def test_score_threshold_drops_weaker_hits(repo: Repository, rng: np.random.Generator) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    vectors = unit_vectors(rng, 50, DIMS)
    repo.add_chunks(vector_store.id, "f", "a", {}, chunk_inputs(50), vectors, MODEL)
    query = unit_vectors(rng, 1, DIMS)[0]
    scores = np.sort((1.0 + vectors @ query) / 2.0)[::-1]
    threshold = float((scores[4] + scores[5]) / 2)
    hits = repo.search(vector_store.id, query, k=20, score_threshold=threshold)
    assert len(hits) == 5
    assert all(hit.score >= threshold for hit in hits)


def test_search_returns_attributes_and_source(repo: Repository, rng: np.random.Generator) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    attributes: dict[str, str | float | bool] = {"author": "ana", "year": 2024, "draft": False}
    vectors = unit_vectors(rng, 2, DIMS)
    repo.add_chunks(
        vector_store.id, "file-9", "doc.md", attributes, chunk_inputs(2), vectors, MODEL
    )
    hit = repo.search(vector_store.id, vectors[1], k=1)[0]
    assert (hit.file_id, hit.filename, hit.chunk_index) == ("file-9", "doc.md", 1)
    assert hit.attributes == attributes
    assert isinstance(hit.attributes["draft"], bool)
    assert hit.chunk_id.startswith("chunk_")
    assert hit.score == pytest.approx(1.0, abs=1e-6)


def test_k_larger_than_the_vector_store_returns_everything(
    repo: Repository, rng: np.random.Generator
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    repo.add_chunks(
        vector_store.id, "f", "a", {}, chunk_inputs(3), unit_vectors(rng, 3, DIMS), MODEL
    )
    assert len(repo.search(vector_store.id, unit_vectors(rng, 1, DIMS)[0], k=4096)) == 3


@pytest.mark.parametrize(
    ("k", "threshold", "message"),
    [
        (0, 0.0, "k must be"),
        (4097, 0.0, "k must be"),
        (1, 1.5, "score_threshold"),
        (1, math.nan, "score_threshold"),
    ],
)
def test_search_rejects_bad_arguments(
    repo: Repository, k: int, threshold: float, message: str
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    with pytest.raises(InvalidArgument, match=message):
        repo.search(vector_store.id, np.ones(DIMS), k=k, score_threshold=threshold)


def test_search_updates_last_active_at(repo: Repository, clock: FakeClock) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    clock.now += 60
    repo.search(vector_store.id, np.ones(DIMS), k=1)
    assert repo.get_vector_store(vector_store.id).last_active_at == clock.now


def test_concurrent_searches_use_their_own_connections(
    repo: Repository, rng: np.random.Generator
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    vectors = unit_vectors(rng, 200, DIMS)
    repo.add_chunks(vector_store.id, "f", "a", {}, chunk_inputs(200), vectors, MODEL)

    def nearest(i: int) -> int:
        return repo.search(vector_store.id, vectors[i], k=1)[0].chunk_index

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(nearest, range(200))) == list(range(200))


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (np.zeros(DIMS), "query vector is all zeros"),
        (np.full(DIMS, np.nan), "query vectors must not contain NaN"),
        (np.ones((2, DIMS)), "expected one query vector"),
    ],
)
def test_search_rejects_unusable_query_vectors(
    repo: Repository, query: np.ndarray, message: str
) -> None:
    vector_store = repo.create_vector_store("notes", MODEL, DIMS)
    with pytest.raises(InvalidArgument, match=message):
        repo.search(vector_store.id, query, k=1)
