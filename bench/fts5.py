"""The store's lexical ranking before issue 33, as a baseline in the benchmark's process: one
contentless FTS5 table with the tokenizer the store had, every match ranked by bm25, the best
k kept (`ORDER BY bm25 LIMIT k`), queries built as the store built them (fts_query)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import apsw

from services.store.search.lexical import fts_query

_TOKENIZE = "porter unicode61 remove_diacritics 2"


class Fts5:
    """A throwaway FTS5 index at `path` (deleted by close())."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._remove()
        self.conn = apsw.Connection(str(path))
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(
            "CREATE VIRTUAL TABLE f USING fts5(text, content = '', contentless_delete = 1,"
            f" tokenize = '{_TOKENIZE}')"
        )

    def add(self, rows: Iterable[tuple[int, str]]) -> float:
        """Indexes (rowid, text) pairs; returns the seconds it took."""
        began = time.perf_counter()
        with self.conn:
            self.conn.executemany("INSERT INTO f (rowid, text) VALUES (?, ?)", rows)
        return time.perf_counter() - began

    def ranked(self, text: str, k: int) -> list[tuple[int, float]]:
        """The k best (rowid, bm25) for `text`, best first (FTS5's bm25 is negative)."""
        query = fts_query(text)
        if query is None:
            return []
        rows = self.conn.execute(
            "SELECT rowid, bm25(f) AS rank FROM f WHERE f MATCH ? ORDER BY rank, rowid LIMIT ?",
            (query, k),
        ).fetchall()
        return cast(list[tuple[int, float]], rows)

    def close(self) -> None:
        self.conn.close()
        self._remove()

    def _remove(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
