"""Conversation history search on PostgreSQL: search/items.py's two queries, where SQLite's use
FTS5 (`items_fts`) and sqlite-vec (`vec_distance_cosine`).

Words: the items' text through `to_tsvector('english', ...)` (the GIN index `items_words` of
the baseline), each query word a phrase OR-ed as on SQLite, ranked by `ts_rank` (negated: the
caller reads SQLite's bm25, lower is better). Vectors: a conversation history is small next to
a corpus, so the model's vectors of the visible items are scored in numpy, exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from services.store.errors import InvalidArgument
from services.store.search.lexical import query_words
from services.store.sql import Connection

_LEXICAL = """
WITH q AS MATERIALIZED (SELECT {query} AS q),
fts AS MATERIALIZED (
    SELECT i.id AS item_id, -ts_rank(to_tsvector('english', i.text), q.q) AS rank
    FROM items AS i, q
    WHERE i.conversation_id IS NOT NULL AND to_tsvector('english', i.text) @@ q.q
)
SELECT fts.rank, {columns} {source} JOIN fts ON fts.item_id = i.id
WHERE i.conversation_id IS NOT NULL{condition}
ORDER BY fts.rank, i.id
LIMIT ?
"""

_VECTOR = """
SELECT v.vector, i.id, {columns} {source}
JOIN item_vectors AS v ON v.item_id = i.id AND v.model = ?
WHERE i.conversation_id IS NOT NULL{condition}
"""


def lexical(
    conn: Connection,
    text: str,
    k: int,
    *,
    columns: str,
    source: str,
    condition: str,
    scope: list[Any],
) -> list[tuple[float, Any]]:
    """(rank, row of `columns`) of the k best items, best first."""
    words = query_words(text)
    if not words:
        return []
    query = " || ".join("phraseto_tsquery('english', ?)" for _ in words)
    sql = _LEXICAL.format(query=query, columns=columns, source=source, condition=condition)
    rows = conn.execute(sql, [*words, *scope, k]).fetchall()
    return [(float(row[0]), row[1:]) for row in rows]


def vector(
    conn: Connection,
    query: bytes,
    model: str,
    k: int,
    *,
    columns: str,
    source: str,
    condition: str,
    scope: list[Any],
) -> list[tuple[float, Any]]:
    """(cosine distance, row of `columns`) of the k nearest items, nearest first (ties by
    item key, as SQLite orders them)."""
    sql = _VECTOR.format(columns=columns, source=source, condition=condition)
    rows = conn.execute(sql, [model, *scope]).fetchall()
    target = np.frombuffer(query, dtype=np.float32)
    scored: list[tuple[float, int, Any]] = []
    for row in rows:
        stored = np.frombuffer(bytes(row[0]), dtype=np.float32)
        if stored.shape != target.shape:
            raise InvalidArgument(
                f"the query vector does not fit {model}'s vectors: {target.size} values "
                f"against {stored.size}"
            )
        norms = float(np.linalg.norm(stored) * np.linalg.norm(target))
        cosine = float(np.dot(stored, target)) / norms if norms else 0.0
        scored.append((1.0 - cosine, int(row[1]), row[2:]))
    scored.sort(key=lambda found: (found[0], found[1]))
    return [(distance, row) for distance, _, row in scored[:k]]
