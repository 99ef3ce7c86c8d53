"""services/store/postgres/fulltext.py on a real PostgreSQL: bm25 over the tsvector column
agrees with a brute-force bm25 over the same rows, per vector store, filtered by files, and a
query of common words over many rows scores at most its bound of candidates."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from services.store.postgres import fulltext
from services.store.postgres.fulltext import K1, B, FullTextSettings
from tests import pg_tables
from tests.postgres_server import PostgresServer, available

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

# Words of very different frequencies (a Zipf draw): some in most chunks, some in a few.
VOCABULARY = (
    "socket buffer kernel process signal thread memory page cache device driver network"
    " packet route filter table index query column schema vacuum replica backup restore"
    " archive compress encrypt certificate token session cookie header payload stream"
    " channel queue worker lease timeout retry backoff quorum leader follower snapshot"
).split()
FILES = 8


def _texts(rng: np.random.Generator, count: int) -> list[str]:
    weights = 1.0 / np.arange(1, len(VOCABULARY) + 1) ** 1.1
    weights /= weights.sum()
    texts = []
    for _ in range(count):
        length = int(rng.integers(8, 60))
        words = rng.choice(VOCABULARY, size=length, p=weights)
        texts.append(" ".join(words) + " and the " + str(rng.integers(1000)))
    return texts


@pytest.fixture(scope="module")
def conn(postgres: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    yield from pg_tables.connected(postgres)


def _fill(conn: psycopg.Connection[Any], key: int, texts: list[str]) -> list[int]:
    pg_tables.add_store(conn, key, 4)
    ids: list[int] = []
    per_file = math.ceil(len(texts) / FILES)
    for number in range(FILES):
        part = texts[number * per_file : (number + 1) * per_file]
        if part:
            added = pg_tables.add_chunks(conn, key, f"file-{number}", part)
            with conn.transaction():
                fulltext.add(conn, key, added)
            ids += added
    return ids


@pytest.fixture(scope="module")
def corpus(conn: psycopg.Connection[Any]) -> list[int]:
    """Vector store 1: 300 chunks; vector store 2 beside it, with other statistics."""
    rng = np.random.default_rng(33)
    ids = _fill(conn, 1, _texts(rng, 300))
    _fill(conn, 2, [f"{word} {word} kernel" for word in VOCABULARY] * 3)
    return ids


def _brute_force(
    conn: psycopg.Connection[Any], key: int, words: list[str], k: int
) -> tuple[list[tuple[int, float]], float]:
    """bm25 (Tantivy's IDF, k1, b) over every chunk of the vector store, from the rows' own
    tsvectors, computed in Python."""
    rows = conn.execute(
        "SELECT c.id, c.words_length, u.lexeme, array_length(u.positions, 1)"
        " FROM chunks AS c, unnest(c.words) AS u WHERE c.vector_store_id = %s",
        [key],
    ).fetchall()
    lengths = dict(
        conn.execute(
            "SELECT id, words_length FROM chunks WHERE vector_store_id = %s", [key]
        ).fetchall()
    )
    frequency: dict[int, dict[str, int]] = {chunk: {} for chunk in lengths}
    for chunk, _, lexeme, tf in rows:
        frequency[chunk][lexeme] = tf
    total = len(lengths)
    average = sum(lengths.values()) / total
    lexemes: list[str] = []
    for word in words:
        row = conn.execute(
            "SELECT tsvector_to_array(to_tsvector('ragd_english', %s))", [word]
        ).fetchone()
        assert row is not None
        lexemes += [lexeme for lexeme in row[0] if lexeme not in lexemes]
    documents = Counter(lexeme for terms in frequency.values() for lexeme in terms)
    idf = {
        lexeme: math.log(1 + (total - documents[lexeme] + 0.5) / (documents[lexeme] + 0.5))
        for lexeme in lexemes
    }
    scores = {}
    for chunk, terms in frequency.items():
        score = 0.0
        for lexeme in lexemes:
            tf = terms.get(lexeme, 0)
            if tf:
                norm = 1 - B + B * lengths[chunk] / average
                score += idf[lexeme] * tf * (K1 + 1) / (tf + K1 * norm)
        if score > 0:
            scores[chunk] = score
    ranked = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))[:k]
    return ranked, sum(idf.values()) * (K1 + 1)


def _same(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [chunk for chunk, _ in found] == [chunk for chunk, _ in expected]
    assert [score for _, score in found] == pytest.approx([s for _, s in expected], rel=1e-9)


QUERIES = [
    ["kernel"],
    ["snapshot", "quorum"],
    ["socket", "buffer", "kernel"],
    ["leader", "followers", "leases"],
    ["timeout", "retry", "backoff", "socket"],
    ["Compressing", "ARCHIVES"],
]


@pytest.mark.parametrize("words", QUERIES, ids=lambda words: "-".join(words))
@pytest.mark.parametrize("k", [5, 50])
def test_bm25_agrees_with_brute_force(
    conn: psycopg.Connection[Any], corpus: list[int], words: list[str], k: int
) -> None:
    with conn.transaction():
        found = fulltext.rank(conn, 1, words, k)
    expected, ceiling = _brute_force(conn, 1, words, k)
    assert found.exact
    assert found.ceiling == pytest.approx(ceiling, rel=1e-12)
    _same(found.hits, expected)
    assert all(0 < score <= found.ceiling for _, score in found.hits)


def test_statistics_are_the_vector_stores_own(
    conn: psycopg.Connection[Any], corpus: list[int]
) -> None:
    words = ["kernel", "quorum"]
    for key in (1, 2):
        with conn.transaction():
            found, ceiling = fulltext.search(conn, key, words, 10)
        expected, expected_ceiling = _brute_force(conn, key, words, 10)
        assert ceiling == pytest.approx(expected_ceiling, rel=1e-12)
        _same(found, expected)
        assert ({chunk for chunk, _ in found} <= set(corpus)) == (key == 1)


def test_a_file_filter_keeps_the_unfiltered_scores(
    conn: psycopg.Connection[Any], corpus: list[int]
) -> None:
    words = ["socket", "buffer", "kernel"]
    files = ["file-2", "file-5"]
    with conn.transaction():
        everything = dict(fulltext.search(conn, 1, words, 300)[0])
        found, ceiling = fulltext.search(conn, 1, words, 10, files)
        assert fulltext.search(conn, 1, words, 10, []) == ([], ceiling)
        allowed = {
            row[0]
            for row in conn.execute(
                "SELECT id FROM chunks WHERE vector_store_id = 1 AND file_id = ANY(%s)", [files]
            ).fetchall()
        }
    assert len(found) == 10 and {chunk for chunk, _ in found} <= allowed
    expected = sorted(
        ((c, s) for c, s in everything.items() if c in allowed), key=lambda p: (-p[1], p[0])
    )
    _same(found, expected[:10])


def test_words_match_as_the_sqlite_engine_matches_them(conn: psycopg.Connection[Any]) -> None:
    """Stemmed and lowercased on both sides; a word of several terms is a phrase; no stop
    words (Tantivy has none); a word that is not a word finds nothing."""
    ids = _fill(
        conn,
        3,
        [
            "The daemon RUNS every night",
            "use snake_case names",
            "a snake in the case",
            "it's a quote: don't 'break' \\ me",
        ],
    )
    with conn.transaction():
        assert [c for c, _ in fulltext.search(conn, 3, ["running"], 5)[0]] == [ids[0]]
        assert [c for c, _ in fulltext.search(conn, 3, ["Snake_Case"], 5)[0]] == [ids[1]]
        assert sorted(c for c, _ in fulltext.search(conn, 3, ["the"], 5)[0]) == [ids[0], ids[2]]
        assert fulltext.search(conn, 3, ["--", "'"], 5) == ([], 0.0)
        assert [c for c, _ in fulltext.search(conn, 3, ["don't", "\\break'"], 5)[0]] == [ids[3]]


def test_the_words_counter_follows_adds_and_removes(conn: psycopg.Connection[Any]) -> None:
    ids = _fill(conn, 4, ["one two three", "four five", "six"])

    def counted() -> tuple[int, int]:
        row = conn.execute(
            "SELECT fulltext_words, (SELECT sum(words_length) FROM chunks"
            " WHERE vector_store_id = 4) FROM vector_stores WHERE id = 4"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    assert counted() == (6, 6)
    with conn.transaction():
        fulltext.remove(conn, 4, ids[:2])
        conn.execute("DELETE FROM chunks WHERE id = ANY(%s)", [ids[:2]])
    assert counted() == (1, 1)


@pytest.fixture(scope="module")
def common(conn: psycopg.Connection[Any]) -> list[int]:
    """Vector store 5: 1,200 chunks that all hold the same ordinary words, a few a rare one."""
    texts = [
        "ordinary common words again and again"
        + (" zebra" if n % 300 == 7 else "")
        + f" item{n % 40}"
        for n in range(1200)
    ]
    return _fill(conn, 5, texts)


@pytest.mark.parametrize("analyzed", [False, True])
def test_common_words_score_at_most_the_bound(
    conn: psycopg.Connection[Any], common: list[int], analyzed: bool
) -> None:
    if analyzed:
        conn.execute("ANALYZE chunks")
    bound = FullTextSettings(max_candidates=100)
    with conn.transaction():
        found = fulltext.rank(conn, 5, ["ordinary", "common", "words"], 10, settings=bound)
        unbounded = fulltext.rank(conn, 5, ["ordinary", "common", "words"], 10)
    assert found.scored <= 100 < unbounded.scored == 1200
    assert len(found.hits) == 10 and not found.exact
    assert {chunk for chunk, _ in found.hits} <= set(common)
    # A rare word's chunks are candidates whatever the common words match: they rank first.
    with conn.transaction():
        found = fulltext.rank(conn, 5, ["ordinary", "zebra", "words"], 10, settings=bound)
    assert found.scored <= 100
    assert [chunk for chunk, _ in found.hits[:4]] == [common[n] for n in (7, 307, 607, 907)]


def test_the_rare_words_bound_is_exact_when_the_rest_cannot_catch_up(
    conn: psycopg.Connection[Any], common: list[int]
) -> None:
    """zebra (4 chunks) fits in the bound, ordinary (every chunk) does not; with ANALYZE's
    statistics ordinary's IDF is ~0, so no chunk without zebra can reach the second best."""
    conn.execute("ANALYZE chunks")
    with conn.transaction():
        found = fulltext.rank(
            conn, 5, ["zebra", "ordinary"], 2, settings=FullTextSettings(max_candidates=10)
        )
        everything = fulltext.rank(conn, 5, ["zebra", "ordinary"], 2)
    assert found.exact and found.scored == 4
    # The same chunks; ordinary's IDF differs a little: estimated from the whole table's
    # statistics (every vector store's chunks) when too common to count.
    assert [chunk for chunk, _ in found.hits] == [chunk for chunk, _ in everything.hits]
    assert [chunk for chunk, _ in found.hits] == [common[n] for n in (7, 307)]


def test_a_search_past_the_statement_timeout_is_unavailable(
    postgres: PostgresServer, conn: psycopg.Connection[Any], corpus: list[int]
) -> None:
    """The caller's transaction goes on: a hybrid search then ranks by vector alone."""
    locked, release = threading.Event(), threading.Event()
    url = conn.info.dsn

    def hold() -> None:
        with psycopg.connect(url) as other, other.transaction():
            other.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        with conn.transaction():
            conn.execute("SET LOCAL statement_timeout = '200ms'")
            with pytest.raises(fulltext.Unavailable, match="out of time"):
                fulltext.search(conn, 1, ["kernel"], 5)
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        release.set()
        holder.join()
