"""A vector store's full text on PostgreSQL: a tsvector column of `chunks`, one GIN index, and
bm25 computed in SQL over a bounded set of candidates.

The SQLite engine keeps a Tantivy index per vector store beside the database (fulltext.py),
which scores every chunk holding a searched word from compressed postings. Here the words
are a generated column of the chunk's own row
(`to_tsvector('ragd_english', text)`: the same Snowball English stemmer as Tantivy's,
lowercased, no stop words; unlike Tantivy it keeps accents), so there is no queue, no
rebuild and nothing to catch up: a chunk is searchable when its transaction commits, and
deleted with its row. One GIN index over (vector_store_id, words) (btree_gin) serves every
vector store.

GIN finds the chunks that hold a word fast but has no order to stop early in, and ranking
every match costs what the posting lists cost (247 ms for a 40k-row vector store with
`ts_rank`: docs/design/postgres.md). So a search ranks at most `max_candidates` chunks:

1. each query word's document frequency in the vector store: counted through the index up to
   max_candidates + 1 for words that are rare in the table, estimated from ANALYZE's
   statistics of the column (pg_stats.most_common_elems) for those that are common;
2. the candidates are the chunks holding any of the rarest words, as many words as fit in
   max_candidates together (MaxScore over whole posting lists: the words left out are the
   common ones, whose bm25 weight is smallest); when even the rarest word is too common,
   chunks holding all the words, then the two rarest, then the rarest (at most
   max_candidates of them);
3. each candidate is scored with bm25 over every query word (Tantivy's formula and IDF,
   k1 1.2, b 0.75; a chunk's length is its count of words by whitespace, close to
   Tantivy's count of tokens, and the vector store's average comes from a counter kept with
   its chunk count), best first, ties by chunk id.

When every chunk holding a query word was a candidate, or the words left out could not lift a
chunk above the k-th score (`Ranking.exact`), the top k is bm25's own. Scores are raw bm25
with the ceiling the hybrid fusion divides by (every word's IDF times k1 + 1), as the SQLite
engine returns them. A word of several terms ("E-1234") matches as a phrase and scores as
its terms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psycopg
from psycopg import Connection

# The columns and index the baseline schema adds to its `chunks` table, and the words
# counter on `vector_stores` (avgdl = fulltext_words / chunk_count).
DDL: list[str] = [
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    # English's Snowball stemmer without its stop words, as Tantivy's analyzer has none: a
    # query of "and" or "not" finds the chunks that say it.
    "CREATE TEXT SEARCH DICTIONARY ragd_english_stem (TEMPLATE = snowball, Language = english)",
    "CREATE TEXT SEARCH CONFIGURATION ragd_english (COPY = english)",
    "ALTER TEXT SEARCH CONFIGURATION ragd_english ALTER MAPPING FOR asciiword, asciihword,"
    " hword_asciipart, word, hword, hword_part WITH ragd_english_stem",
    "ALTER TABLE chunks ADD COLUMN words tsvector"
    " GENERATED ALWAYS AS (to_tsvector('ragd_english', text)) STORED",
    # A chunk's length for bm25: its spaces, tabs and line breaks plus one. On the benchmark's
    # man-page chunks 7% fewer than Tantivy's tokens (runs of letters and digits), a factor
    # that dl / avgdl cancels, at a seventh of regexp_count's cost (to_tsvector's own is
    # ~0.8 ms a chunk here: the load's bound).
    "ALTER TABLE chunks ADD COLUMN words_length integer GENERATED ALWAYS AS"
    " (length(text) - length(replace(translate(text, E'\\t\\n\\r', '   '), ' ', '')) + 1)"
    " STORED",
    "CREATE INDEX chunks_words ON chunks USING gin (vector_store_id, words)",
    "ALTER TABLE vector_stores ADD COLUMN fulltext_words bigint NOT NULL DEFAULT 0",
]

# Tantivy's (and Lucene's) bm25 parameters.
K1 = 1.2
B = 0.75


class Unavailable(Exception):
    """No lexical ranking now (the search ran past the statement timeout): a hybrid search
    goes on by vector, a lexical one is refused."""


@dataclass(frozen=True)
class FullTextSettings:
    # Chunks scored per search at most; each costs reading its tsvector from TOAST. On 100k
    # man-page chunks (bench/pg_search.py, BENCHMARKS.md) the top 10 of bm25 over every match
    # (4.6 s p50) was kept at 0.77 / 0.85 / 0.90 with 1,000 / 2,000 / 5,000, for 24 / 31 /
    # 136 ms p50 on the loaded machine.
    max_candidates: int = 2_000


@dataclass(frozen=True)
class Ranking:
    hits: list[tuple[int, float]]
    # The bm25 a chunk could reach for these words: every term's IDF times k1 + 1.
    ceiling: float
    # Chunks scored.
    scored: int
    # Whether the top k is bm25's over every chunk of the vector store.
    exact: bool


@dataclass
class _Word:
    query: str  # tsquery text: one lexeme, or a phrase of several
    lexemes: list[str]
    frequency: int = 0  # document frequency of its rarest lexeme (bounded: see _frequencies)


# ------------------------------------------------------------------------------------ writes
# In the caller's write transaction, as the SQLite engine's: the words themselves are a
# generated column, only the vector store's length counter is kept here.


def create(conn: Connection[Any], key: int) -> None:
    """Nothing: the index serves every vector store, the counter starts at 0."""


def drop(conn: Connection[Any], key: int) -> None:
    """Nothing: the words go with the chunks' rows, the counter with the vector store's."""


def add(conn: Connection[Any], key: int, ids: Sequence[int]) -> None:
    """Counts the words of new chunks (already inserted) in the vector store's total."""
    _count(conn, key, ids, "+")


def remove(conn: Connection[Any], key: int, ids: Sequence[int]) -> None:
    """Takes the words of chunks about to be deleted out of the vector store's total."""
    _count(conn, key, ids, "-")


def _count(conn: Connection[Any], key: int, ids: Sequence[int], sign: str) -> None:
    if not ids:
        return
    conn.execute(
        f"UPDATE vector_stores SET fulltext_words = fulltext_words {sign}"
        " (SELECT coalesce(sum(words_length), 0) FROM chunks"
        "  WHERE id = ANY(%s) AND vector_store_id = %s) WHERE id = %s".encode(),
        [list(ids), key, key],
    )


# ------------------------------------------------------------------------------------ search


def search(
    conn: Connection[Any],
    key: int,
    words: Sequence[str],
    k: int,
    files: Sequence[str] | None = None,
    settings: FullTextSettings | None = None,
) -> tuple[list[tuple[int, float]], float]:
    """The k best (chunk id, bm25) for any of `words` (lexical.query_words), best first, with
    the highest bm25 a chunk could reach for these words, as the SQLite engine's
    FullText.search. Only chunks of `files` compete when given; their bm25 is the unfiltered
    one. Inside the caller's transaction. Raises Unavailable past the statement timeout."""
    found = rank(conn, key, words, k, files, settings)
    return found.hits, found.ceiling


def rank(
    conn: Connection[Any],
    key: int,
    words: Sequence[str],
    k: int,
    files: Sequence[str] | None = None,
    settings: FullTextSettings | None = None,
) -> Ranking:
    """`search` with what it cost: how many chunks it scored and whether its top k is
    exact."""
    settings = settings or FullTextSettings()
    try:
        # A savepoint: a cancelled statement must not end the caller's transaction.
        with conn.transaction():
            return _rank(conn, key, words, k, files, settings)
    except psycopg.errors.QueryCanceled as error:
        raise Unavailable(f"the full-text search ran out of time: {error}") from None


def _rank(
    conn: Connection[Any],
    key: int,
    words: Sequence[str],
    k: int,
    files: Sequence[str] | None,
    settings: FullTextSettings,
) -> Ranking:
    parsed = _parse(conn, words)
    if not parsed:
        return Ranking([], 0.0, 0, True)
    row = conn.execute(
        "SELECT chunk_count, fulltext_words FROM vector_stores WHERE id = %s", [key]
    ).fetchone()
    total = max(1, int(row[0])) if row is not None else 1
    average = max(1.0, int(row[1]) / total) if row is not None else 1.0
    cap = settings.max_candidates
    frequency = _frequencies(conn, key, parsed, total, cap)
    idf = {lexeme: _idf(count, total) for lexeme, count in frequency.items()}
    ceiling = sum(idf.values()) * (K1 + 1.0)
    if files is not None and not files:
        return Ranking([], ceiling, 0, True)
    for word in parsed:
        word.frequency = min(frequency[lexeme] for lexeme in word.lexemes)
    parsed.sort(key=lambda word: word.frequency)
    taken, total_frequency = 0, 0
    while taken < len(parsed) and total_frequency + parsed[taken].frequency <= cap:
        total_frequency += parsed[taken].frequency
        taken += 1
    scoring = _Scoring(key, idf, average, k, files, cap)
    if taken:
        hits, scored = scoring.run(conn, " | ".join(word.query for word in parsed[:taken]))
        exact = taken == len(parsed) or _left_out(parsed[taken:], idf) < _kth(hits, k)
        return Ranking(hits, ceiling, scored, exact)
    # Every word is common: chunks holding all of them first, then fewer.
    hits, scored = [], 0
    for count in sorted({len(parsed), min(2, len(parsed)), 1}, reverse=True):
        hits, scored = scoring.run(conn, " & ".join(f"({w.query})" for w in parsed[:count]))
        if len(hits) >= k:
            break
    return Ranking(hits, ceiling, scored, False)


def _parse(conn: Connection[Any], words: Sequence[str]) -> list[_Word]:
    """Each word's tsquery and lexemes, by the column's own configuration; stop words and
    words without letters or digits drop out, and so do repeats."""
    rows = conn.execute(
        "SELECT phraseto_tsquery('ragd_english', w)::text,"
        " tsvector_to_array(to_tsvector('ragd_english', w))"
        " FROM unnest(%s::text[]) WITH ORDINALITY AS t(w, i) ORDER BY i",
        [list(words)],
    ).fetchall()
    parsed: dict[tuple[str, ...], _Word] = {}
    for query, lexemes in rows:
        if query and lexemes:
            parsed.setdefault(tuple(sorted(lexemes)), _Word(query, list(lexemes)))
    return list(parsed.values())


def _frequencies(
    conn: Connection[Any], key: int, words: Sequence[_Word], total: int, cap: int
) -> dict[str, int]:
    """Each lexeme's count of the vector store's chunks that hold it: exact up to cap; a
    larger count is ANALYZE's share of the whole table times the vector store's chunks (a
    lexeme too common to count), or cap + 1 when the statistics do not know it."""
    lexemes = sorted({lexeme for word in words for lexeme in word.lexemes})
    common = _common_shares(conn)
    estimated = {lexeme: round(common.get(lexeme, 0.0) * total) for lexeme in lexemes}
    counted = [lexeme for lexeme in lexemes if estimated[lexeme] <= cap]
    frequency = {lexeme: max(cap + 1, estimated[lexeme]) for lexeme in lexemes}
    if counted:
        rows = conn.execute(
            "SELECT t.lexeme, (SELECT count(*) FROM (SELECT 1 FROM chunks"
            f"  WHERE vector_store_id = {key:d} AND words @@ t.query LIMIT %s) AS s)"
            " FROM unnest(%s::text[], %s::tsquery[]) AS t(lexeme, query)".encode(),
            [cap + 1, counted, [_quoted(lexeme) for lexeme in counted]],
        ).fetchall()
        for lexeme, count in rows:
            if int(count) <= cap:
                frequency[lexeme] = int(count)
    return frequency


def _common_shares(conn: Connection[Any]) -> dict[str, float]:
    """The most common lexemes of chunks.words with the share of the table's rows holding
    each, from the last ANALYZE (autovacuum's); empty before one."""
    row = conn.execute(
        "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats"
        " WHERE schemaname = current_schema() AND tablename = 'chunks' AND attname = 'words'"
    ).fetchone()
    if row is None or row[0] is None:
        return {}
    return dict(zip(row[0], row[1], strict=False))


def _quoted(lexeme: str) -> str:
    """A lexeme as tsquery input: quoted, so that no character of it is an operator."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _idf(frequency: int, total: int) -> float:
    """Tantivy's (and Lucene's) bm25 IDF."""
    return math.log(1.0 + (total - frequency + 0.5) / (frequency + 0.5))


def _left_out(words: Sequence[_Word], idf: dict[str, float]) -> float:
    """The most a chunk could score from these words alone (bm25's ceiling for them)."""
    lexemes = {lexeme for word in words for lexeme in word.lexemes}
    return sum(idf[lexeme] for lexeme in lexemes) * (K1 + 1.0)


def _kth(hits: Sequence[tuple[int, float]], k: int) -> float:
    return hits[k - 1][1] if len(hits) >= k else 0.0


_SCORE_SQL = """
WITH cand AS MATERIALIZED (
    SELECT id, words, words_length FROM chunks
    WHERE vector_store_id = {key:d} AND words @@ %(match)s::tsquery{files}
    LIMIT %(cap)s
), terms AS (
    SELECT c.id, c.words_length AS dl, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf
    FROM cand AS c, unnest(ts_filter(setweight(c.words, 'A', %(lexemes)s), '{{a}}')) AS u
)
SELECT t.id,
    sum(w.idf * t.tf * (%(k1)s + 1) / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * t.dl / %(avgdl)s)))
        AS score,
    (SELECT count(*) FROM cand)
FROM terms AS t JOIN unnest(%(lexemes)s::text[], %(idfs)s::float8[]) AS w(lexeme, idf)
    USING (lexeme)
GROUP BY t.id ORDER BY score DESC, t.id LIMIT %(k)s
"""


@dataclass
class _Scoring:
    key: int
    idf: dict[str, float]
    average: float
    k: int
    files: Sequence[str] | None
    cap: int
    _sql: bytes = field(init=False)

    def __post_init__(self) -> None:
        files = "" if self.files is None else " AND file_id = ANY(%(files)s)"
        self._sql = _SCORE_SQL.format(key=self.key, files=files).encode()

    def run(self, conn: Connection[Any], match: str) -> tuple[list[tuple[int, float]], int]:
        """The k best of (at most cap) chunks matching the tsquery text `match`, and how many
        were scored."""
        lexemes = list(self.idf)
        rows = conn.execute(
            self._sql,
            {
                "match": match,
                "files": list(self.files) if self.files is not None else None,
                "cap": self.cap,
                "lexemes": lexemes,
                "idfs": [self.idf[lexeme] for lexeme in lexemes],
                "k1": K1,
                "b": B,
                "avgdl": self.average,
                "k": self.k,
            },
        ).fetchall()
        hits = [(int(row[0]), float(row[1])) for row in rows]
        return hits, int(rows[0][2]) if rows else 0


# ------------------------------------------------------------------------------------ parity


@dataclass
class FullText:
    """The SQLite engine's FullText surface over one connection, for code written against it:
    searching takes the connection; keeping up, rebuilding and cleaning have nothing to do
    (the words are a column of the chunks)."""

    # Searched through the connection, which one thread at a time may use: a hybrid search's
    # lexical half runs after its vector half.
    apart: ClassVar[bool] = False

    conn: Connection[Any]
    settings: FullTextSettings = field(default_factory=FullTextSettings)

    def search(
        self, key: int, words: Sequence[str], k: int, files: Sequence[str] | None = None
    ) -> tuple[list[tuple[int, float]], float]:
        return search(self.conn, key, words, k, files, self.settings)

    def catch_up(self, conn: Connection[Any], key: int) -> None:
        """Nothing: a committed chunk is searchable."""

    def sync(self, conn: Connection[Any]) -> bool:
        return False

    def missing(self, conn: Connection[Any]) -> list[int]:
        return []

    def rebuild_step(self, conn: Connection[Any], key: int) -> bool:
        return False

    def forget(self) -> None:
        """Nothing: a restored database brings its words."""

    def close_writers(self) -> None:
        """Nothing: no writer of its own."""

    def remove_orphans(self, conn: Connection[Any]) -> None:
        """Nothing: nothing outside the database."""


def for_database(conn: Connection[Any]) -> FullText:
    return FullText(conn)
