"""K-nearest-neighbour search over one collection's vectors, with scores in [0, 1]."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import cast

import apsw

from services.common.vectors import FloatMatrix, to_bytes
from services.store import catalog, vector_index
from services.store.catalog import lookup
from services.store.compat import check_compatible, check_vectors
from services.store.db import atomic
from services.store.errors import InvalidArgument
from services.store.filters import Filter, compile_filter
from services.store.records import SearchHit
from services.store.vector_index import MAX_K, IndexSettings

# Search modes (SearchRequest.mode): this module's KNN, lexical.py's bm25, fusion.py's RRF.
VECTOR, LEXICAL, HYBRID = "vector", "lexical", "hybrid"
MODES = (VECTOR, LEXICAL, HYBRID)

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


def chunk_public_id(key: int) -> str:
    return f"chunk_{key:d}"


def nearest(
    conn: apsw.Connection,
    *,
    collection_id: str,
    query: FloatMatrix,
    k: int,
    score_threshold: float,
    model: str,
    now: int,
    filter: Filter | None = None,
    index: IndexSettings,
    exact: bool = False,
) -> list[SearchHit]:
    """The k chunks nearest to `query` (1-D), best first, dropping those scoring below the
    threshold. An empty `model` skips the model check. With a filter, only chunks of files
    whose attributes match compete. Large collections are searched through their coarse
    index unless `exact` (vector_index.py)."""
    if not 1 <= k <= MAX_K:
        raise InvalidArgument(f"k must be 1..{MAX_K}, got {k}")
    if not (math.isfinite(score_threshold) and 0.0 <= score_threshold <= 1.0):
        raise InvalidArgument(f"score_threshold must be 0..1, got {score_threshold}")
    if query.ndim != 1:
        raise InvalidArgument(f"expected one query vector, got an array of shape {query.shape}")
    check_vectors(query.reshape(1, -1), "query vector")
    compiled = compile_filter(filter) if filter is not None else None

    with atomic(conn, write=False):
        key, collection = lookup(conn, collection_id)
        check_compatible(collection, model, int(query.shape[0]), query=True)
        allowed = allowed_chunks(key, *compiled) if compiled is not None else None
        ranked = vector_index.nearest_ids(
            conn,
            key,
            to_bytes(query),
            k,
            rows=collection.chunk_count,
            index=collection.vector_index,
            settings=index,
            allowed=allowed,
            exact=exact,
        )
        ids = json.dumps([chunk_key for chunk_key, _ in ranked])
        rows = cast(list[_HitRow], conn.execute(_HITS_SQL, (ids,)).fetchall())
    details = {row[0]: row for row in rows}

    hits = []
    for chunk_key, distance in ranked:
        score = score_from_distance(distance)
        if score < score_threshold or chunk_key not in details:
            continue
        _, file_id, chunk_index, text, filename, attributes = details[chunk_key]
        hits.append(
            SearchHit(
                chunk_id=chunk_public_id(chunk_key),
                file_id=file_id,
                filename=filename,
                text=text,
                score=score,
                chunk_index=chunk_index,
                attributes=json.loads(attributes),
            )
        )
    catalog.touch(conn, key, collection, now)
    return hits
