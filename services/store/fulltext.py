"""A collection's full-text index: one contentless FTS5 table per collection, fts_<key>.

Why one per collection (migration 9): with one index for the whole database, a search had to
name its collection inside the MATCH, and FTS5 paid for that term in every matching row (a
collection of 1M chunks: 23 ms against 3 ms for the same words alone), or rank every
collection's matches and throw most away. A table per collection also keeps bm25's
statistics (document frequencies, average length) the collection's own, as a vector store's
ranking should be.

Contentless (`content=''`, the text stays in `chunks`) with `contentless_delete=1`: rows are
deleted by rowid, without the text they were indexed from. The rowid is the chunk's id. Every
write of chunk rows goes through ingest.py and catalog.drop, which call these functions in the
same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

# The tokenizer of every full-text table: English stemming, case- and accent-insensitive.
TOKENIZE = "porter unicode61 remove_diacritics 2"


def table(key: int) -> str:
    """The full-text table of a collection, named from its integer key only (never input)."""
    if not isinstance(key, int) or isinstance(key, bool) or key <= 0:
        raise ValueError(f"collection key must be a positive integer, got {key!r}")
    return f"fts_{key:d}"


def create(conn: apsw.Connection, key: int) -> None:
    """DDL for a new collection, inside the caller's transaction."""
    conn.execute(
        f"CREATE VIRTUAL TABLE {table(key)} USING fts5("
        f"text, content = '', contentless_delete = 1, tokenize = '{TOKENIZE}')"
    )


def drop(conn: apsw.Connection, key: int) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {table(key)}")


def add(conn: apsw.Connection, key: int, rows: Sequence[tuple[int, str]]) -> None:
    """Indexes (chunk id, text) pairs."""
    conn.executemany(f"INSERT INTO {table(key)} (rowid, text) VALUES (?, ?)", rows)


def remove(conn: apsw.Connection, key: int, ids: Sequence[int]) -> None:
    conn.executemany(f"DELETE FROM {table(key)} WHERE rowid = ?", [(i,) for i in ids])
