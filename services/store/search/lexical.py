"""Lexical search: FTS5 bm25 over chunk text, with scores normalized to [0, 1].

Each collection has its own full-text table (fulltext.py), holding exactly its chunks, and
chunks exist only for completed files. FTS5 ranks the matches and cuts to the top k (ORDER BY
bm25 LIMIT k) before any other table is read; only the chunks finally returned are then looked
up (hits.py). Ranking every match in SQL instead (joining each to its chunk, file and
membership, text included, then sorting) cost ~3x as much on a natural-language query matching
a third of the chunks. bm25's statistics (document frequencies, average length) are the
collection's own.
"""

from __future__ import annotations

import string
from typing import cast

import apsw

from services.store import fulltext

# A query keeps at most this many distinct words, its longest: each is a posting-list scan and
# a bm25 term for every chunk it matches. On 50-word queries over 10k chunks the 16 longest
# ranked as well as all of them (MRR@10 0.900, the first 16 words 0.874) in a third of the
# time; the 16 rarest (document counts from FTS5's vocabulary) ranked the same (0.899), but
# counting scans each word's postings: ~50 ms a query on a 1M-chunk store.
MAX_QUERY_TERMS = 16

# English function words, left out of a query that has other words. OR-ed in, each matches
# nearly every chunk: bm25 then scores the whole index for a few points of weight (their IDF
# is near zero), which is where a natural-language query's time went. Lucene's English set
# plus pronouns, question words and auxiliaries, the rest of a typical question's glue.
STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
    then there these they this to was will with i me my we our you your he him his she her its
    them what which who whom whose when where why how do does did done doing has have had
    having am been being were can could should would may might must shall from about than
    so too very just also any all some each more most other only own same up down out off
    over under again further once here both few nor s t""".split()
)

# Without a filter: FTS5 ranks the collection's matches and keeps the best k.
_TOP_SQL = """
SELECT rowid, bm25({table}) AS rank FROM {table} WHERE {table} MATCH ?
ORDER BY rank, rowid LIMIT ?
"""

# With an attribute filter: FTS5 first, materialized, so the planner cannot turn the join
# around and run a full-text query per chunk; then the filter over each match's file. (The
# table holds this collection's chunks only: a collection_id term would make SQLite walk
# every chunk of the collection instead of looking the matches up.)
_FILTERED_SQL = """
WITH fts AS MATERIALIZED (
    SELECT rowid AS chunk_id, bm25({table}) AS rank FROM {table} WHERE {table} MATCH ?
)
SELECT fts.chunk_id, fts.rank
FROM fts
JOIN chunks AS c ON c.id = fts.chunk_id
JOIN collection_files AS cf ON cf.collection_id = c.collection_id AND cf.file_id = c.file_id
WHERE cf.status = 'completed' AND {condition}
ORDER BY fts.rank, fts.chunk_id
LIMIT ?
"""

_PUNCTUATION = string.punctuation + "\u2018\u2019\u201c\u201d"


def fts_query(text: str) -> str | None:
    """A safe FTS5 query for free text: each word a quoted phrase, the phrases OR-ed together.

    Quoting makes every FTS5 operator (AND OR NOT NEAR, * ^ : + - and parentheses) a literal,
    so no user text is a syntax error; a quote inside a word is doubled, FTS5's only escape.
    A quoted word is tokenized like the indexed text, so "E-1234" or "snake_case" must match
    as adjacent tokens. OR lets documents that match only some words count, ranked by bm25.
    STOPWORDS are left out unless the text has nothing else. Of more than MAX_QUERY_TERMS
    words the longest are kept (long words are the rare ones). None when it has no words.
    """
    words: list[tuple[str, bool]] = []
    seen: set[str] = set()
    for word in text.split():
        # FTS5 reads its query as a C string: a NUL would cut it short.
        word = word.replace("\x00", "")
        key = word.casefold()
        if not word or key in seen:
            continue
        seen.add(key)
        words.append((word, key.strip(_PUNCTUATION) in STOPWORDS))
    if not all(stop for _, stop in words):
        words = [(word, stop) for word, stop in words if not stop]
    kept = [word for word, _ in words]
    if len(kept) > MAX_QUERY_TERMS:
        longest = sorted(range(len(kept)), key=lambda i: -len(kept[i]))[:MAX_QUERY_TERMS]
        kept = [kept[i] for i in sorted(longest)]
    terms = ['"' + word.replace('"', '""') + '"' for word in kept]
    return " OR ".join(terms) if terms else None


def score_from_bm25(rank: float, best: float) -> float:
    """SQLite's bm25() is negative, more negative for better matches, and unbounded; the score
    is its ratio to the best candidate's, in (0, 1], the best scoring 1."""
    if best >= 0.0:
        return 1.0
    return min(1.0, max(0.0, rank / best))


def ranked(
    conn: apsw.Connection,
    key: int,
    *,
    text: str,
    k: int,
    condition: tuple[str, list[object]] | None,
) -> list[tuple[int, float]]:
    """The keys of the k chunks that best match the words of `text` by bm25, best first,
    scored relative to the best of them (score_from_bm25), inside the caller's read
    transaction. With a compiled filter `condition`, only chunks of files whose attributes
    match compete."""
    query = fts_query(text)
    if query is None:
        return []
    table = fulltext.table(key)
    if condition is None:
        rows = conn.execute(_TOP_SQL.format(table=table), (query, k)).fetchall()
    else:
        sql = _FILTERED_SQL.format(table=table, condition=condition[0])
        rows = conn.execute(sql, [query, *condition[1], k]).fetchall()
    found = cast(list[tuple[int, float]], rows)
    best = found[0][1] if found else 0.0
    return [(chunk_key, score_from_bm25(rank, best)) for chunk_key, rank in found]
