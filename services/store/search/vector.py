"""K-nearest-neighbour search over one collection's vectors, with scores in [0, 1]."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import cast

import apsw

from services.store import vector_index
from services.store.compat import check_query
from services.store.records import Collection, SearchHit, chunk_public_id
from services.store.vector_index import IndexSettings

# A filter allows the chunks of the completed files whose attributes match. The condition
# (compiled by filters.py over `cf`) runs once per file in a subquery SQLite evaluates once;
# tested per chunk row instead, its json_each would run 100k times at 100k chunks (~30 ms).
# Chunks exist only for completed files (written in the same transaction as the status), so
# the status test on the hits below is a second line of defence.
_MATCHING_FILES_SQL = """
    SELECT cf.file_id FROM collection_files AS cf
    WHERE cf.collection_id = ? AND cf.status = 'completed' AND {condition}
"""
_ALLOWED_IDS_SQL = """
    SELECT c.id FROM chunks AS c
    WHERE c.collection_id = ? AND c.file_id IN ({files})
"""
_ALLOWED_TEST_SQL = """EXISTS (
    SELECT 1 FROM chunks AS tc
    WHERE tc.id = cand.id AND tc.collection_id = ? AND tc.file_id IN ({files})
)"""


def allowed_chunks(key: int, condition: str, params: Sequence[object]) -> vector_index.Allowed:
    """The chunks of `key` a compiled filter (filters.compile_filter) allows."""
    files = _MATCHING_FILES_SQL.format(condition=condition)
    return vector_index.Allowed(
        ids=_ALLOWED_IDS_SQL.format(files=files),
        ids_params=[key, key, *params],
        test=_ALLOWED_TEST_SQL.format(files=files),
        test_params=[key, key, *params],
    )


# The hits' text and source, by chunk id (a JSON array, bound as one parameter).
_HITS_SQL = """
SELECT c.id, c.file_id, c.chunk_index, c.text, f.filename, cf.attributes
FROM chunks AS c
JOIN collection_files AS cf ON cf.collection_id = c.collection_id AND cf.file_id = c.file_id
JOIN files AS f ON f.id = c.file_id
WHERE c.id IN (SELECT value FROM json_each(?)) AND cf.status = 'completed'
"""


# chunk id, file id, chunk index, text, filename, attributes JSON
_HitRow = tuple[int, str, int, str, str, str]


def score_from_distance(distance: float) -> float:
    """Maps sqlite-vec's cosine distance d = 1 - cos(a, b), in [0, 2], to 1 - d / 2.

    That is (1 + cos) / 2: 1 for the same direction, 0.5 for orthogonal, 0 for opposite.
    Clamped to [0, 1] against float rounding.
    """
    return min(1.0, max(0.0, 1.0 - distance / 2.0))


def nearest(
    conn: apsw.Connection,
    key: int,
    collection: Collection,
    *,
    query: bytes,
    k: int,
    model: str,
    condition: tuple[str, list[object]] | None,
    index: IndexSettings,
    exact: bool,
) -> list[SearchHit]:
    """The k chunks nearest to `query` (one float32 vector, checked), best first, inside the
    caller's read transaction. An empty `model` skips the model check. With a compiled filter
    `condition`, only chunks of files whose attributes match compete. Large collections are
    searched through their coarse index unless `exact` (vector_index.py)."""
    check_query(collection, model, len(query) // 4)
    allowed = allowed_chunks(key, *condition) if condition is not None else None
    ranked = vector_index.nearest_ids(
        conn,
        key,
        query,
        k,
        rows=collection.chunk_count,
        index=collection.vector_index,
        settings=index,
        allowed=allowed,
        exact=exact,
    )
    ids = json.dumps([chunk_key for chunk_key, _ in ranked])
    details = {row[0]: row for row in cast(list[_HitRow], conn.execute(_HITS_SQL, (ids,)))}
    hits = []
    for chunk_key, distance in ranked:
        if chunk_key not in details:
            continue
        _, file_id, chunk_index, text, filename, attributes = details[chunk_key]
        hits.append(
            SearchHit(
                chunk_id=chunk_public_id(chunk_key),
                file_id=file_id,
                filename=filename,
                text=text,
                score=score_from_distance(distance),
                chunk_index=chunk_index,
                attributes=json.loads(attributes),
            )
        )
    return hits
