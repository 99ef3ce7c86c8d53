"""K-nearest-neighbour search over one vector_store's vectors, with scores in [0, 1]."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from services.store import engine, vector_index, windows
from services.store.compat import check_query
from services.store.records import VectorStore
from services.store.search.filters import MATCHING_FILES_SQL, matching_files
from services.store.sql import Connection
from services.store.vector_index import IndexSettings

# A filter allows the chunks of the completed files whose attributes match (MATCHING_FILES_SQL,
# a subquery SQLite evaluates once). Chunks exist only for completed files (written in the
# same transaction as the status), so the status test on the hits below is a second line of
# defence.
_ALLOWED_IDS_SQL = """
    SELECT c.id FROM chunks AS c
    WHERE c.vector_store_id = ? AND c.file_id IN ({files})
"""
_ALLOWED_TEST_SQL = """EXISTS (
    SELECT 1 FROM chunks AS tc
    WHERE tc.id = cand.id AND tc.vector_store_id = ? AND tc.file_id IN ({files})
)"""


def allowed_chunks(key: int, condition: str, params: Sequence[object]) -> vector_index.Allowed:
    """The chunks of `key` a compiled filter (filters.compile_filter) allows."""
    files = MATCHING_FILES_SQL.format(condition=condition)
    return vector_index.Allowed(
        ids=_ALLOWED_IDS_SQL.format(files=files),
        ids_params=[key, key, *params],
        test=_ALLOWED_TEST_SQL.format(files=files),
        test_params=[key, key, *params],
    )


def score_from_distance(distance: float) -> float:
    """Maps sqlite-vec's cosine distance d = 1 - cos(a, b), in [0, 2], to 1 - d / 2.

    That is (1 + cos) / 2: 1 for the same direction, 0.5 for orthogonal, 0 for opposite.
    Clamped to [0, 1] against float rounding.
    """
    return min(1.0, max(0.0, 1.0 - distance / 2.0))


def ranked(
    conn: Connection,
    key: int,
    vector_store: VectorStore,
    *,
    query: bytes,
    k: int,
    model: str,
    condition: tuple[str, list[object]] | None,
    index: IndexSettings,
    exact: bool,
) -> list[tuple[int, float]]:
    """The keys of the k chunks nearest to `query` (one float32 vector, checked) with their
    scores (score_from_distance), best first, inside the caller's read transaction. An empty
    `model` skips the model check. With a compiled filter `condition`, only chunks of files
    whose attributes match compete. Each engine searches its own way: _sqlite_nearest,
    _postgres_nearest."""
    check_query(vector_store, model, len(query) // 4)
    nearest = _NEAREST[engine.of(conn).name]
    found = nearest(conn, key, vector_store, query, k, condition, index, exact)
    return [(chunk_key, score_from_distance(distance)) for chunk_key, distance in found]


def scores_of(conn: Connection, key: int, query: bytes, ids: Sequence[int]) -> dict[int, float]:
    """The exact scores (score_from_distance) of `query` against these chunks, inside the
    caller's read transaction: hybrid search's evidence for a chunk only the words found."""
    vectors = engine.of(conn).vectors
    best = dict(vectors.distances(conn, key, query, ids))
    if windows.present(conn, key):
        for chunk_key, distance in vectors.window_distances(conn, key, query, ids=ids):
            best[chunk_key] = min(best.get(chunk_key, distance), distance)
    return {chunk_key: score_from_distance(distance) for chunk_key, distance in best.items()}


Nearest = Callable[
    [
        Connection,
        int,
        VectorStore,
        bytes,
        int,
        "tuple[str, list[object]] | None",
        IndexSettings,
        bool,
    ],
    Sequence[tuple[int, float]],
]


def _sqlite_nearest(
    conn: Connection,
    key: int,
    vector_store: VectorStore,
    query: bytes,
    k: int,
    condition: tuple[str, list[object]] | None,
    index: IndexSettings,
    exact: bool,
) -> Sequence[tuple[int, float]]:
    """Unfiltered searches over the resident copy when it is there; the rest in SQLite's
    tables, a filter as the rowids it allows; long chunks' windows folded in (windows.py)."""
    vectors = engine.of(conn).vectors
    allowed = allowed_chunks(key, *condition) if condition is not None else None
    found = None
    if condition is None:
        found = vectors.resident_nearest(
            conn,
            key,
            query,
            k,
            rows=vector_store.chunk_count,
            dimensions=vector_store.dimensions,
            owner=vector_store.id,
            settings=index.resident,
            exact=exact,
        )
    if found is None:
        found = vectors.nearest_ids(
            conn,
            key,
            query,
            k,
            rows=vector_store.chunk_count,
            index=vector_store.vector_index,
            settings=index,
            allowed=allowed,
            exact=exact,
        )
    hits = cast(Sequence[tuple[int, float]], found)
    if not windows.present(conn, key):
        return hits
    extra = vectors.window_distances(conn, key, query, allowed=allowed)
    return windows.fold(hits, extra, k, lambda ids: vectors.distances(conn, key, query, ids))


def _postgres_nearest(
    conn: Connection,
    key: int,
    vector_store: VectorStore,
    query: bytes,
    k: int,
    condition: tuple[str, list[object]] | None,
    index: IndexSettings,
    exact: bool,
) -> Sequence[tuple[int, float]]:
    """pgvector's HNSW index of the vector store (postgres/vectors.py), a filter as the files
    it allows; the buffer cache, not a copy of ours, holds the index. Long chunks' windows
    folded in (windows.py)."""
    files = matching_files(conn, key, condition) if condition is not None else None
    vectors = engine.of(conn).vectors
    found = vectors.nearest_ids(
        conn,
        key,
        query,
        k,
        dimensions=vector_store.dimensions,
        rows=vector_store.chunk_count,
        files=files,
        exact=exact,
    )
    hits = cast(Sequence[tuple[int, float]], found)
    if (files is not None and not files) or not windows.present(conn, key):
        return hits
    extra = vectors.window_distances(conn, key, query, files=files)
    return windows.fold(hits, extra, k, lambda ids: vectors.distances(conn, key, query, ids))


# The one place the two engines' vector searches differ in their inputs.
_NEAREST: dict[str, Nearest] = {"sqlite": _sqlite_nearest, "postgres": _postgres_nearest}
