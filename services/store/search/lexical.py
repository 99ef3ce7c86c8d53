"""Lexical search: FTS5 bm25 over chunk text, with scores normalized to [0, 1].

The index is `chunks_fts` (migration 3), an external-content FTS5 table over `chunks` kept in
sync by triggers, so it holds exactly the chunks that exist, and chunks exist only for
completed files. Its bm25 statistics (document frequencies, average length) are database-wide
rather than per collection: a rare word is rare everywhere.
"""

from __future__ import annotations

import json
from typing import cast

import apsw

from services.store.records import SearchHit, chunk_public_id

# Words of the query beyond this many distinct ones are ignored: each is one posting-list scan.
MAX_QUERY_TERMS = 64

# FTS5 first, materialized, so the planner cannot turn the join around and run a full-text
# query per chunk of the collection; then the same restriction as the vector search: this
# collection, completed files, the attribute filter.
_LEXICAL_SQL = """
WITH fts AS MATERIALIZED (
    SELECT rowid AS chunk_id, bm25(chunks_fts) AS rank FROM chunks_fts WHERE chunks_fts MATCH ?
)
SELECT fts.chunk_id, fts.rank, c.file_id, c.chunk_index, c.text, f.filename, cf.attributes
FROM fts
JOIN chunks AS c ON c.id = fts.chunk_id
JOIN collection_files AS cf ON cf.collection_id = c.collection_id AND cf.file_id = c.file_id
JOIN files AS f ON f.id = c.file_id
WHERE c.collection_id = ? AND cf.status = 'completed'{condition}
ORDER BY fts.rank, fts.chunk_id
LIMIT ?
"""

# chunk id, bm25, file id, chunk index, text, filename, attributes JSON
_HitRow = tuple[int, float, str, int, str, str, str]


def fts_query(text: str) -> str | None:
    """A safe FTS5 query for free text: each word a quoted phrase, the phrases OR-ed together.

    Quoting makes every FTS5 operator (AND OR NOT NEAR, * ^ : + - and parentheses) a literal,
    so no user text is a syntax error; a quote inside a word is doubled, FTS5's only escape.
    A quoted word is tokenized like the indexed text, so "E-1234" or "snake_case" must match
    as adjacent tokens. OR lets documents that match only some words count, ranked by bm25.
    None when the text has no words.
    """
    terms: list[str] = []
    seen: set[str] = set()
    for word in text.split():
        # FTS5 reads its query as a C string: a NUL would cut it short.
        word = word.replace("\x00", "")
        key = word.casefold()
        if not word or key in seen:
            continue
        seen.add(key)
        terms.append('"' + word.replace('"', '""') + '"')
        if len(terms) == MAX_QUERY_TERMS:
            break
    return " OR ".join(terms) if terms else None


def score_from_bm25(rank: float, best: float) -> float:
    """SQLite's bm25() is negative, more negative for better matches, and unbounded; the score
    is its ratio to the best candidate's, in (0, 1], the best scoring 1."""
    if best >= 0.0:
        return 1.0
    return min(1.0, max(0.0, rank / best))


def matches(
    conn: apsw.Connection,
    key: int,
    *,
    text: str,
    k: int,
    condition: tuple[str, list[object]] | None,
) -> list[SearchHit]:
    """The k chunks that best match the words of `text` by bm25, best first, scored relative
    to the best of them, inside the caller's read transaction. With a compiled filter
    `condition`, only chunks of files whose attributes match compete."""
    query = fts_query(text)
    if query is None:
        return []
    sql, params = _LEXICAL_SQL.format(condition=""), [query, key]
    if condition is not None:
        sql = _LEXICAL_SQL.format(condition=f" AND {condition[0]}")
        params += condition[1]
    rows = cast(list[_HitRow], conn.execute(sql, [*params, k]).fetchall())
    best = rows[0][1] if rows else 0.0
    return [
        SearchHit(
            chunk_id=chunk_public_id(chunk_key),
            file_id=file_id,
            filename=filename,
            text=chunk_text,
            score=score_from_bm25(rank, best),
            chunk_index=chunk_index,
            attributes=json.loads(attributes),
        )
        for chunk_key, rank, file_id, chunk_index, chunk_text, filename, attributes in rows
    ]
