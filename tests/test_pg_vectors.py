"""services/store/postgres/vectors.py on a real PostgreSQL with pgvector: the same top k and
scores as an exact cosine in numpy, through the HNSW index and exactly, with filters and ties
ordered as the SQLite engine orders them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from services.store.postgres import vectors
from services.store.postgres.vectors import VectorSettings
from tests import pg_tables
from tests.postgres_server import PostgresServer, available

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

DIMS = 24
ROWS = 400
FILES = 20
QUERIES = 30
# Every search through the index, however small the vector store.
INDEXED = VectorSettings(exact_rows=0, exact_filtered_max=0)


@pytest.fixture(scope="module")
def conn(postgres: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    yield from pg_tables.connected(postgres)


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype("<f4")
    return unit


@pytest.fixture(scope="module")
def store(conn: psycopg.Connection[Any]) -> tuple[list[int], np.ndarray]:
    """Vector store 1: ROWS random vectors over FILES files, and store 2 beside it (other
    vectors of another dimension, which no search of store 1 may return)."""
    rng = np.random.default_rng(31)
    matrix = _unit(rng.standard_normal((ROWS, DIMS)))
    pg_tables.add_store(conn, 1, DIMS)
    pg_tables.add_store(conn, 2, 8)
    ids: list[int] = []
    per_file = ROWS // FILES
    with conn.transaction():
        vectors.create_tables(conn, 1, DIMS)
        vectors.create_tables(conn, 2, 8)
    for number in range(FILES):
        ids += pg_tables.add_chunks(conn, 1, f"file-{number}", ["x"] * per_file)
        other = pg_tables.add_chunks(conn, 2, f"file-{number}", ["y"] * 5)
        with conn.transaction():
            rows = matrix[number * per_file : (number + 1) * per_file]
            pairs = zip(ids[-per_file:], rows, strict=True)
            vectors.insert(conn, 1, [(i, v.tobytes()) for i, v in pairs])
            noise = _unit(rng.standard_normal((5, 8)))
            vectors.insert(conn, 2, [(i, v.tobytes()) for i, v in zip(other, noise, strict=True)])
    return ids, matrix


def _queries() -> np.ndarray:
    return _unit(np.random.default_rng(7).standard_normal((QUERIES, DIMS)))


def _exact(
    ids: list[int], matrix: np.ndarray, query: np.ndarray, k: int, allowed: set[int] | None = None
) -> list[tuple[int, float]]:
    """The reference: cosine distance as sqlite-vec computes it (float32), ordered by
    (distance, id)."""
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
    distance = (1.0 - (matrix @ query) / norms).astype(np.float32)
    pairs = [
        (i, float(d)) for i, d in zip(ids, distance, strict=True) if allowed is None or i in allowed
    ]
    return sorted(pairs, key=lambda pair: (pair[1], pair[0]))[:k]


def _search(
    conn: psycopg.Connection[Any], query: np.ndarray, k: int, **options: Any
) -> list[tuple[int, float]]:
    with conn.transaction():
        return vectors.nearest_ids(
            conn, 1, query.astype("<f4").tobytes(), k, dimensions=DIMS, rows=ROWS, **options
        )


@pytest.mark.parametrize("k", [1, 10, 50])
def test_exact_search_is_numpys(
    conn: psycopg.Connection[Any], store: tuple[list[int], np.ndarray], k: int
) -> None:
    ids, matrix = store
    for query in _queries():
        found = _search(conn, query, k, exact=True)
        expected = _exact(ids, matrix, query, k)
        assert [i for i, _ in found] == [i for i, _ in expected]
        assert np.allclose([d for _, d in found], [d for _, d in expected], atol=1e-6)


@pytest.mark.parametrize("k", [10, 50])
def test_indexed_search_has_the_exact_scores_and_recall(
    conn: psycopg.Connection[Any], store: tuple[list[int], np.ndarray], k: int
) -> None:
    ids, matrix = store
    exact = dict(zip(ids, range(len(ids)), strict=True))
    hits = 0
    for query in _queries():
        found = _search(conn, query, k, settings=INDEXED)
        assert len(found) == k
        # Rescored with the float32 vectors: every distance is the exact one, in its order.
        for chunk, distance in found:
            reference = _exact([chunk], matrix[[exact[chunk]]], query, 1)[0][1]
            assert distance == pytest.approx(reference, abs=1e-6)
        assert found == sorted(found, key=lambda pair: (pair[1], pair[0]))
        hits += len({i for i, _ in found} & {i for i, _ in _exact(ids, matrix, query, k)})
    assert hits / (QUERIES * k) >= 0.98


@pytest.mark.parametrize("filtered", [False, True])
def test_the_search_walks_the_vector_stores_index(
    conn: psycopg.Connection[Any], store: tuple[list[int], np.ndarray], filtered: bool
) -> None:
    """Even where the planner would rather sort a small vector store's rows (as here)."""
    query = vectors.Vector(_queries()[0].tobytes())
    params = {"query": query, "candidates": 80, "k": 10, "files": ["file-1"]}
    with conn.transaction(), vectors._cursor(conn) as cursor:
        cursor.execute("SELECT set_config('enable_sort', 'off', true)")
        sql = vectors._indexed_sql(1, DIMS, filtered)
        cursor.execute(("EXPLAIN " + sql).encode(), params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using chunks_hnsw_1 on chunks" in plan


@pytest.mark.parametrize(
    "settings",
    [INDEXED, VectorSettings(exact_rows=0, exact_filtered_max=10_000)],
    ids=["iterative-scan", "exact-over-files"],
)
@pytest.mark.parametrize("kept", [2, 10])
def test_a_filter_keeps_its_chunks_and_recall(
    conn: psycopg.Connection[Any],
    store: tuple[list[int], np.ndarray],
    settings: VectorSettings,
    kept: int,
) -> None:
    ids, matrix = store
    files = [f"file-{number}" for number in range(0, FILES, FILES // kept)]
    per_file = ROWS // FILES
    allowed = {
        ids[number * per_file + i]
        for number in range(0, FILES, FILES // kept)
        for i in range(per_file)
    }
    hits = 0
    for query in _queries():
        found = _search(conn, query, 10, files=files, settings=settings)
        expected = _exact(ids, matrix, query, 10, allowed)
        assert len(found) == 10
        assert {i for i, _ in found} <= allowed
        hits += len({i for i, _ in found} & {i for i, _ in expected})
    assert hits / (QUERIES * 10) >= 0.98


def test_a_filter_of_no_files_finds_nothing(
    conn: psycopg.Connection[Any], store: tuple[list[int], np.ndarray]
) -> None:
    assert _search(conn, _queries()[0], 10, files=[]) == []
    assert _search(conn, _queries()[0], 10, files=["no-such-file"]) == []


def test_distances_are_exact(
    conn: psycopg.Connection[Any], store: tuple[list[int], np.ndarray]
) -> None:
    ids, matrix = store
    query = _queries()[3]
    chosen = [ids[5], ids[77], ids[300]]
    with conn.transaction():
        found = dict(vectors.distances(conn, 1, query.tobytes(), [*chosen, 10**9]))
    assert set(found) == set(chosen)
    for chunk in chosen:
        row = matrix[ids.index(chunk)]
        assert found[chunk] == pytest.approx(_exact([chunk], row[None], query, 1)[0][1], abs=1e-6)


@pytest.mark.parametrize(
    ("key", "settings"), [(3, INDEXED), (7, VectorSettings())], ids=["indexed", "exact"]
)
def test_ties_go_to_the_lower_id(
    conn: psycopg.Connection[Any], key: int, settings: VectorSettings
) -> None:
    """Equal vectors are equally near: the SQLite engine orders them by chunk id."""
    pg_tables.add_store(conn, key, 4)
    with conn.transaction():
        vectors.create_tables(conn, key, 4)
    same = _unit(np.array([1.0, 2.0, 3.0, 4.0]))
    other = _unit(np.array([-1.0, 0.5, 0.0, 2.0]))
    ids = pg_tables.add_chunks(conn, key, "f", ["t"] * 12)
    rows = [(i, (same if n % 2 else other).tobytes()) for n, i in enumerate(ids)]
    with conn.transaction():
        vectors.insert(conn, key, list(reversed(rows)))
        found = vectors.nearest_ids(
            conn, key, same.tobytes(), 4, dimensions=4, rows=12, settings=settings
        )
    assert [i for i, _ in found] == [ids[1], ids[3], ids[5], ids[7]]
    assert len({d for _, d in found}) == 1


def test_indexes_come_and_go_with_the_vector_store(conn: psycopg.Connection[Any]) -> None:
    pg_tables.add_store(conn, 4, 8)
    pg_tables.add_store(conn, 5, 5000)
    with conn.transaction():
        vectors.create_tables(conn, 4, 8)
        vectors.create_tables(conn, 5, 5000)
    assert vectors.has_index(conn, 4)
    # Too many dimensions for an HNSW index: searched exactly.
    assert not vectors.has_index(conn, 5)
    with conn.transaction():
        vectors.drop_tables(conn, 4)
    assert not vectors.has_index(conn, 4)
    with conn.transaction():
        made = vectors.create_missing(conn)
    assert made >= 1 and vectors.has_index(conn, 4)
    with conn.transaction():
        assert vectors.create_missing(conn) == 0


def test_a_large_vector_store_without_index_is_searched_exactly(
    conn: psycopg.Connection[Any],
) -> None:
    rng = np.random.default_rng(5)
    pg_tables.add_store(conn, 6, 4100)
    matrix = _unit(rng.standard_normal((30, 4100)))
    ids = pg_tables.add_chunks(conn, 6, "f", ["z"] * 30)
    with conn.transaction():
        vectors.insert(conn, 6, [(i, v.tobytes()) for i, v in zip(ids, matrix, strict=True)])
        found = vectors.nearest_ids(
            conn, 6, matrix[4].tobytes(), 3, dimensions=4100, rows=10**6, settings=INDEXED
        )
    assert found[0][0] == ids[4] and found[0][1] == pytest.approx(0.0, abs=1e-6)


def test_ef_search_grows_with_k_and_rows() -> None:
    settings = VectorSettings()
    assert vectors.ef_search(10, 40_000, settings) == 80
    assert vectors.ef_search(50, 40_000, settings) == 200
    assert vectors.ef_search(10, 100_000, settings) == 160
    assert vectors.ef_search(10, 1_000_000, settings) == 320
    assert vectors.ef_search(400, 1_000_000, settings) == vectors.MAX_EF_SEARCH


def test_a_search_leaves_the_transactions_settings_alone(
    conn: psycopg.Connection[Any], store: tuple[list[int], np.ndarray]
) -> None:
    with conn.transaction():
        vectors.nearest_ids(
            conn,
            1,
            _queries()[0].tobytes(),
            10,
            dimensions=DIMS,
            rows=ROWS,
            files=["file-1"],
            settings=INDEXED,
        )
        row = conn.execute("SELECT current_setting('enable_sort')").fetchone()
    assert row == ("on",)


def test_a_new_sessions_first_search_takes_its_settings(
    conn: psycopg.Connection[Any], store: tuple[list[int], np.ndarray]
) -> None:
    """hnsw.* are set before pgvector's library is loaded in a new session: they must hold."""
    ids, matrix = store
    query = _queries()[1]
    with psycopg.connect(conn.info.dsn) as fresh:
        found = vectors.nearest_ids(
            fresh,
            1,
            query.tobytes(),
            50,
            dimensions=DIMS,
            rows=ROWS,
            files=["file-3"],
            settings=INDEXED,
        )
        assert fresh.execute("SHOW hnsw.ef_search").fetchone() == ("40",)
    per_file = ROWS // FILES
    allowed = set(ids[3 * per_file : 4 * per_file])
    assert [i for i, _ in found] == [i for i, _ in _exact(ids, matrix, query, 50, allowed)]
