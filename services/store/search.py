"""K-nearest-neighbour search over one collection's vectors, with scores in [0, 1]."""

from __future__ import annotations

import json
import math
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

DEFAULT_INDEX = IndexSettings()

# Search modes (SearchRequest.mode): this module's KNN, lexical.py's bm25, fusion.py's RRF.
VECTOR, LEXICAL, HYBRID = "vector", "lexical", "hybrid"
MODES = (VECTOR, LEXICAL, HYBRID)

# A filter allows the chunks of the completed files that match. CROSS JOIN keeps files as the
# outer loop, so the condition runs once per file, not per chunk. Chunks exist only for
# completed files (written in the same transaction as the status), so the status test on the
# hits is a second line of defence.
_ALLOWED_SQL = """
    SELECT c.id FROM collection_files AS cf
    CROSS JOIN chunks AS c ON c.collection_id = cf.collection_id AND c.file_id = cf.file_id
    WHERE cf.collection_id = ? AND cf.status = 'completed' AND {condition}
"""

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
    index: IndexSettings = DEFAULT_INDEX,
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
    condition, condition_params = compile_filter(filter) if filter is not None else ("", [])

    with atomic(conn, write=False):
        key, collection = lookup(conn, collection_id)
        check_compatible(collection, model, int(query.shape[0]), query=True)
        allowed = None
        if filter is not None:
            allowed = (_ALLOWED_SQL.format(condition=condition), [key, *condition_params])
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
