"""K-nearest-neighbour search over one vector_store's vectors, with scores in [0, 1]."""

from __future__ import annotations

from collections.abc import Sequence

from services.store import engine, vector_index
from services.store.compat import check_query
from services.store.records import VectorStore
from services.store.search.filters import MATCHING_FILES_SQL
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
    whose attributes match compete. Unfiltered searches run over the vectors in memory when
    they are there (resident.py); the rest, and `exact` ones without them, go to SQLite,
    large vector stores through their coarse index unless `exact` (vector_index.py)."""
    check_query(vector_store, model, len(query) // 4)
    found = None
    if condition is None:
        found = engine.of(conn).vectors.resident_nearest(
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
        allowed = allowed_chunks(key, *condition) if condition is not None else None
        found = engine.of(conn).vectors.nearest_ids(
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
    return [(chunk_key, score_from_distance(distance)) for chunk_key, distance in found]


def scores_of(conn: Connection, key: int, query: bytes, ids: Sequence[int]) -> dict[int, float]:
    """The exact scores (score_from_distance) of `query` against these chunks, inside the
    caller's read transaction: hybrid search's evidence for a chunk only the words found."""
    found = engine.of(conn).vectors.distances(conn, key, query, ids)
    return {chunk_key: score_from_distance(distance) for chunk_key, distance in found}
