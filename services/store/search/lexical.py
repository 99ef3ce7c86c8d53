"""Lexical search: bm25 over chunk text (fulltext.py's index), with scores in [0, 1].

Each vector store has its own full-text index holding exactly its chunks, so bm25's statistics
(document frequencies, average length) are the vector_store's own. The index scores every
chunk that holds a searched word (fulltext.py leaves out the words most chunks hold); only
the chunks finally returned are then looked up (hits.py).

Conversation history (items.py) still ranks with FTS5 (`fts_query`): a history is small.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from services.store import engine
from services.store.search.filters import matching_files
from services.store.sql import Connection

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

_PUNCTUATION = string.punctuation + "\u2018\u2019\u201c\u201d"

# Hybrid searches' lexical halves, run beside their vector halves where the engine's full-text
# index is searched apart from the database connection (SQLite's Tantivy files). Both halves
# are mostly native code that lets go of the GIL (Tantivy, numpy), so on two cores a hybrid
# search waits for its slower half rather than for both. Threads start when first needed.
_BESIDE = ThreadPoolExecutor(max_workers=4, thread_name_prefix="store-lexical")

Ranking = tuple[list[tuple[int, float]], float]


def query_words(text: str) -> list[str]:
    """The words a query searches for, in order: distinct (case-insensitively), STOPWORDS left
    out unless the text has nothing else, and of more than MAX_QUERY_TERMS words the longest
    (long words are the rare ones)."""
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
    return kept


def fts_query(text: str) -> str | None:
    """A safe FTS5 query for free text: each of query_words a quoted phrase, OR-ed together.

    Quoting makes every FTS5 operator (AND OR NOT NEAR, * ^ : + - and parentheses) a literal,
    so no user text is a syntax error; a quote inside a word is doubled, FTS5's only escape.
    A quoted word is tokenized like the indexed text, so "E-1234" or "snake_case" must match
    as adjacent tokens. OR lets documents that match only some words count, ranked by bm25.
    None when it has no words.
    """
    terms = ['"' + word.replace('"', '""') + '"' for word in query_words(text)]
    return " OR ".join(terms) if terms else None


def score_from_bm25(rank: float, best: float) -> float:
    """SQLite's bm25() is negative, more negative for better matches, and unbounded; the score
    is its ratio to the best candidate's, in (0, 1], the best scoring 1."""
    if best >= 0.0:
        return 1.0
    return min(1.0, max(0.0, rank / best))


def ranked(
    conn: Connection,
    key: int,
    *,
    text: str,
    k: int,
    condition: tuple[str, list[object]] | None,
) -> Ranking:
    """The keys of the k chunks that best match the words of `text` by bm25, best first,
    with their bm25 scores, and the highest score a chunk could reach for these words (see
    fulltext.FullText.search), inside the caller's read transaction; the caller has run
    fulltext's catch_up. Each word is a phrase of its terms ("E-1234": "e" then "1234"); any
    of them matches. With a compiled filter `condition`, only chunks of files whose
    attributes match compete."""
    return begin(conn, key, text=text, k=k, condition=condition)()


def begin(
    conn: Connection,
    key: int,
    *,
    text: str,
    k: int,
    condition: tuple[str, list[object]] | None,
) -> Callable[[], Ranking]:
    """ranked's ranking, begun: the function returned gives it (or raises what it raised).
    Where the engine's index is searched apart from the connection, it runs in a worker
    thread while the caller goes on (with a hybrid search's vector half); else at once."""
    words = query_words(text)
    if not words:
        return lambda: ([], 0.0)
    files = matching_files(conn, key, condition) if condition is not None else None
    index = engine.of(conn).fulltext.for_database(conn)
    if index.apart:
        return _BESIDE.submit(index.search, key, words, k, files).result
    found: Ranking = index.search(key, words, k, files)
    return lambda: found


def relative(found: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """bm25 scores as their ratio to the best one: the best scores 1."""
    best = found[0][1] if found else 0.0
    return [(chunk, min(1.0, score / best) if best > 0 else 1.0) for chunk, score in found]
