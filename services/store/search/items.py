"""Search over chat history, across every conversation or within one: lexical (FTS5 bm25
over items' text), vector (cosine over the items' embeddings) or hybrid (reciprocal rank
fusion of both), scored in [0, 1] like chunk search.

Vectors come from the gateways in the background (`pending` and `put_vectors`), so an item
not yet embedded is found by its words only; hybrid covers both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import apsw

from services.common.vocabulary import LEXICAL, SEARCH_MODES, VECTOR
from services.store import access, conversations
from services.store.conversations import ITEM_COLUMNS, ITEM_FROM, item_record
from services.store.db import atomic, vectors_available
from services.store.errors import InvalidArgument
from services.store.postgres import history
from services.store.records import EVERYTHING, Access, ItemHit, PendingText
from services.store.search.hybrid import candidate_count, reciprocal_rank_fusion
from services.store.search.lexical import fts_query, score_from_bm25
from services.store.search.vector import score_from_distance
from services.store.sql import POSTGRES, Connection, dialect

MAX_K = 100
MAX_PENDING = 256

_LEXICAL = """
WITH fts AS MATERIALIZED (
    SELECT rowid AS item_id, bm25(items_fts) AS rank FROM items_fts WHERE items_fts MATCH ?
)
SELECT fts.rank, {columns} {source} JOIN fts ON fts.item_id = i.id
WHERE i.conversation_id IS NOT NULL{condition}
ORDER BY fts.rank, i.id
LIMIT ?
"""

# An exhaustive scan of the model's vectors: a conversation history is small next to a
# corpus (sqlite-vec's scan does ~1,000 vectors in a millisecond here).
_VECTOR = """
SELECT vec_distance_cosine(v.vector, ?) AS distance, {columns} {source}
JOIN item_vectors AS v ON v.item_id = i.id AND v.model = ?
WHERE i.conversation_id IS NOT NULL{condition}
ORDER BY distance, i.id
LIMIT ?
"""

# What a gateway embeds next: conversation items with text and no vector of this model.
_PENDING = """
SELECT i.id, i.text FROM items AS i
WHERE i.id > ? AND i.conversation_id IS NOT NULL AND i.text <> ''
  AND NOT EXISTS (SELECT 1 FROM item_vectors AS v WHERE v.item_id = i.id AND v.model = ?)
ORDER BY i.id
LIMIT ?
"""


def search(
    conn: Connection,
    *,
    text: str,
    k: int,
    conversation_id: str = "",
    mode: str = LEXICAL,
    vector: bytes = b"",
    model: str = "",
    caller: Access = EVERYTHING,
) -> list[ItemHit]:
    """The k items of the conversations the caller reaches (of one, if given) that best match
    `text`, or the `vector` of it by `model` (vector and hybrid modes)."""
    if not 1 <= k <= MAX_K:
        raise InvalidArgument(f"k must be 1..{MAX_K}, got {k}")
    if not text.strip():
        raise InvalidArgument("a history search needs a non-empty query")
    if mode not in SEARCH_MODES:
        raise InvalidArgument(f"mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    if mode != LEXICAL and (not vector or len(vector) % 4 or not model):
        raise InvalidArgument(f"a {mode} history search needs the query's vector and its model")
    if not vectors_available():
        mode = LEXICAL  # a store without sqlite-vec has the text index only
    with atomic(conn, write=False):
        visible, scope = access.conversations_visible(conn, caller, "c")
        condition = "".join(f" AND {clause}" for clause in visible)
        if conversation_id:
            key, _ = conversations.lookup(conn, conversation_id)
            condition += " AND i.conversation_id = ?"
            scope.append(key)
        if mode == LEXICAL:
            return _lexical(conn, text, k, condition, scope)
        if mode == VECTOR:
            return _vector(conn, vector, model, k, condition, scope)
        wide = candidate_count(k)
        return _fuse(
            _vector(conn, vector, model, wide, condition, scope),
            _lexical(conn, text, wide, condition, scope),
            k,
        )


def _lexical(
    conn: Connection, text: str, k: int, condition: str, scope: list[Any]
) -> list[ItemHit]:
    if dialect(conn) is POSTGRES:
        found = history.lexical(
            conn, text, k, columns=ITEM_COLUMNS, source=ITEM_FROM, condition=condition, scope=scope
        )
        best = found[0][0] if found else 0.0
        return [ItemHit(item_record(row), score_from_bm25(rank, best)) for rank, row in found]
    query = fts_query(text)
    if query is None:
        return []
    sql = _LEXICAL.format(columns=ITEM_COLUMNS, source=ITEM_FROM, condition=condition)
    rows: list[Any] = conn.execute(sql, [query, *scope, k]).fetchall()
    best = float(rows[0][0]) if rows else 0.0
    return [ItemHit(item_record(row[1:]), score_from_bm25(float(row[0]), best)) for row in rows]


def _vector(
    conn: Connection, vector: bytes, model: str, k: int, condition: str, scope: list[Any]
) -> list[ItemHit]:
    if dialect(conn) is POSTGRES:
        nearest = history.vector(
            conn,
            vector,
            model,
            k,
            columns=ITEM_COLUMNS,
            source=ITEM_FROM,
            condition=condition,
            scope=scope,
        )
        return [ItemHit(item_record(row), score_from_distance(d)) for d, row in nearest]
    sql = _VECTOR.format(columns=ITEM_COLUMNS, source=ITEM_FROM, condition=condition)
    try:
        rows: list[Any] = conn.execute(sql, [vector, model, *scope, k]).fetchall()
    except apsw.SQLError as error:
        # sqlite-vec refuses vectors of another length than the stored ones.
        raise InvalidArgument(f"the query vector does not fit {model}'s vectors: {error}") from None
    return [ItemHit(item_record(row[1:]), score_from_distance(float(row[0]))) for row in rows]


def _fuse(vector: Sequence[ItemHit], lexical: Sequence[ItemHit], k: int) -> list[ItemHit]:
    by_id = {hit.item.id: hit for hit in [*lexical, *vector]}
    # Lexical first, so that ties go to the words: people search their history for what they
    # remember saying, and an item not yet embedded is in the lexical list only.
    fused = reciprocal_rank_fusion(
        [[hit.item.id for hit in lexical], [hit.item.id for hit in vector]]
    )
    if not fused:
        return []
    best = fused[0][1]
    return [replace(by_id[item_id], score=min(1.0, value / best)) for item_id, value in fused[:k]]


def pending(conn: Connection, model: str, after: int, limit: int) -> list[PendingText]:
    """Up to `limit` conversation items after key `after` that have no vector of `model`."""
    if not model or not 1 <= limit <= MAX_PENDING:
        raise InvalidArgument(f"pending texts need a model and a limit of 1..{MAX_PENDING}")
    with atomic(conn, write=False):
        rows: list[Any] = conn.execute(_PENDING, (after, model, limit)).fetchall()
    return [PendingText(key=int(row[0]), text=str(row[1])) for row in rows]


def put_vectors(
    conn: Connection, model: str, dimensions: int, keys: Sequence[int], data: bytes
) -> int:
    """Stores the vectors of items `keys` (rows of `data`); items deleted meanwhile are
    skipped. Returns how many were written."""
    size = 4 * dimensions
    if not model or dimensions <= 0 or len(data) != size * len(keys):
        raise InvalidArgument(
            f"expected {len(keys)} vectors of {dimensions} float32 values, got {len(data)} bytes"
        )
    written = 0
    with atomic(conn):
        for index, key in enumerate(keys):
            conn.execute(
                "INSERT INTO item_vectors (item_id, model, vector)"
                " SELECT id, ?, ? FROM items WHERE id = ?"
                " ON CONFLICT (item_id, model) DO UPDATE SET vector = excluded.vector",
                (model, data[index * size : (index + 1) * size], key),
            )
            written += conn.changes()
    return written
