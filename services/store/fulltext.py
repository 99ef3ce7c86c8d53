"""A vector_store's full-text index: one Tantivy index per vector store, in a folder beside the
database (`<database>-fulltext/<key>`), derived from the chunks and rebuilt from them.

Why Tantivy, not FTS5 (one contentless table per vector store until migration 14): FTS5 ranks
every chunk that holds any query word before it keeps the best k, so a search costs what the
whole posting lists cost. On 100k chunks of ~180 words (man pages) its bm25 top 50 took
361 ms at p50, where Tantivy took 6.6 ms for the same bm25 ranking (`bench/limits.py`,
BENCHMARKS.md). Tantivy scores every chunk that holds a query word too (tantivy-py collects
with a MultiCollector, which never prunes: no block-max WAND), but from compressed blocks of
postings in native code. What bounds its cost is the query: see COMMON_SHARE.

The database stays the only source of truth. Every write of chunk rows records the chunks it
touched in `fulltext_queue`, in its own transaction (`add`, `remove`, `drop`); `FullText`
applies queued rows to the index (the chunk's entry is deleted, and added again from the
database if the chunk is there), commits the index, and only then deletes the rows. Applying
a row is idempotent, so a crash at any moment leaves at worst rows to apply again. A search
first applies what its vector store has queued, so it sees every write committed before it.

An index whose folder is missing or does not carry the generation the database recorded for
it (`fulltext_indexes`), or that holds another number of chunks than the database, is rebuilt
from the chunks: small ones by the search that needs them, large ones by the store's
background loop (`rebuild_step`); meanwhile their lexical searches are unavailable (hybrid
searches go on by vector). A restored database brings its own generations and folders are
forgotten (`forget`), so its indexes are rebuilt too.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, cast

import apsw
import tantivy

from services.store.db import atomic, database_key, try_write
from services.store.sql import Connection

log = logging.getLogger(__name__)

# Tantivy's analyzer for every index: words of letters and digits, lowercased, accents
# folded, English (Porter2) stems; the same for the text and the query.
ANALYZER = "ragd_en"
# Chunks applied per index commit, and read from the database per rebuild step.
BATCH = 2_000
# A vector store of at most this many chunks is (re)built by the search that needs it.
INLINE_ROWS = 5_000
# The writer's memory before it flushes a segment; tantivy's floor is 15 MB a thread.
WRITER_HEAP = 32 << 20
_GENERATION_FILE = "ragd-generation"


class Unavailable(Exception):
    """The vector_store's index is being rebuilt: no lexical ranking until it is done."""


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    # Signed: the writer deletes by a Python int as an i64 term, which no u64 field matches.
    builder.add_integer_field("id", indexed=True, fast=True)
    builder.add_text_field("file", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("text", tokenizer_name=ANALYZER, index_option="position")
    return builder.build()


SCHEMA = _schema()
TOKENS = _analyzer()


def tokens(word: str) -> list[str]:
    """The index's terms for one query word (several for "E-1234" or "snake_case")."""
    return TOKENS.analyze(word)


# In the caller's write transaction: the database side of every change.


def create(conn: apsw.Connection, key: int) -> None:
    """A new vector_store's index, empty, in the caller's transaction: its folder is made now
    (a rolled back transaction leaves it to remove_orphans; keys are never reused), so no
    search ever waits to make it."""
    generation = secrets.token_hex(8)
    for_database(conn).make_empty(key, generation)
    conn.execute(
        "INSERT OR REPLACE INTO fulltext_indexes (vector_store_id, generation) VALUES (?, ?)",
        (key, generation),
    )


def add(conn: apsw.Connection, key: int, ids: Sequence[int]) -> None:
    """Queues new chunks for the vector_store's index."""
    _queue(conn, key, ids)


def remove(conn: apsw.Connection, key: int, ids: Sequence[int]) -> None:
    """Queues chunks about to be deleted."""
    _queue(conn, key, ids)


def drop(conn: apsw.Connection, key: int) -> None:
    """Queues the whole index of a vector store being deleted (chunk 0: none is)."""
    conn.execute("DELETE FROM fulltext_queue WHERE vector_store_id = ?", (key,))
    conn.execute("DELETE FROM fulltext_indexes WHERE vector_store_id = ?", (key,))
    _queue(conn, key, [0])


def _queue(conn: apsw.Connection, key: int, ids: Sequence[int]) -> None:
    conn.executemany(
        "INSERT INTO fulltext_queue (vector_store_id, chunk_id) VALUES (?, ?)",
        [(key, chunk) for chunk in ids],
    )


def directory(database: Path) -> Path:
    return database.with_name(database.name + "-fulltext")


@dataclass
class _Index:
    index: tantivy.Index
    searcher: tantivy.Searcher
    writer: tantivy.IndexWriter | None = None
    # Queue rows up to here are in the index (committed); deleting them from the queue may
    # wait for the write lock, which a search never does (their deletion is best effort).
    applied: int = 0


@dataclass
class _Rebuild:
    folder: Path
    index: tantivy.Index
    writer: tantivy.IndexWriter
    generation: str
    # Queue rows up to here are covered by the chunks this rebuild reads.
    queued_upto: int
    after: int = 0
    done: int = 0


@dataclass
class FullText:
    """The full-text indexes of one database, for every thread of the process."""

    # Searched apart from the database connection: a hybrid search's lexical half can run
    # in another thread than its vector half (search/lexical.py's begin).
    apart: ClassVar[bool] = True

    root: Path
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _open: dict[int, _Index] = field(default_factory=dict)
    _rebuilds: dict[int, _Rebuild] = field(default_factory=dict)

    # Searching

    def search(
        self,
        key: int,
        words: Sequence[str],
        k: int,
        files: Sequence[str] | None = None,
    ) -> tuple[list[tuple[int, float]], float]:
        """The k best (chunk key, bm25 score) for any of `words` (each a phrase of its
        terms), best first, with the highest bm25 score a chunk could reach for the words
        searched (every term's IDF times k1 + 1). In a large index, words that most chunks
        hold are left out unless all are (COMMON_SHARE). Only chunks of `files` compete when
        given. Call catch_up first, outside a transaction. Raises Unavailable while it is
        rebuilt."""
        found = self._open.get(key)
        if found is None:
            raise Unavailable(f"the full-text index of vector_store {key} is being built")
        searcher = found.searcher
        total = max(1, searcher.num_docs)
        phrases: dict[tuple[str, ...], list[int]] = {}
        for word in words:
            terms = tuple(tokens(word))
            if terms and terms not in phrases:
                phrases[terms] = [searcher.doc_freq("text", term) for term in terms]
        # Each phrase's chunks are at most its rarest term's.
        searched = [
            terms
            for terms, frequencies in phrases.items()
            if min(frequencies) <= max(COMMON_SHARE * total, COMMON_MIN_CHUNKS)
        ] or list(phrases)
        if not searched:
            return [], 0.0
        clauses = []
        ceiling = 0.0
        for terms in searched:
            if len(terms) == 1:
                query = tantivy.Query.term_query(SCHEMA, "text", terms[0])
            else:
                query = tantivy.Query.phrase_query(SCHEMA, "text", list(terms))
            clauses.append((tantivy.Occur.Should, query))
            ceiling += sum(_idf(frequency, total) for frequency in phrases[terms]) * (K1 + 1.0)
        query = tantivy.Query.boolean_query(clauses)
        if files is not None:
            if not files:
                return [], ceiling
            query = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, query),
                    # Scored 0: a filtered chunk's bm25 is its unfiltered one.
                    (
                        tantivy.Occur.Must,
                        tantivy.Query.const_score_query(
                            tantivy.Query.term_set_query(SCHEMA, "file", files), 0.0
                        ),
                    ),
                ]
            )
        hits = searcher.search(query, k, count=False).hits
        ids = searcher.fast_field_values("id", [address for _, address in hits])
        ranked = [
            (cast(int, chunk), float(score)) for (score, _), chunk in zip(hits, ids, strict=True)
        ]
        # Ties in id order, as FTS5's ORDER BY rank, rowid did: the same data, the same list.
        ranked.sort(key=lambda pair: (-pair[1], pair[0]))
        return ranked, ceiling

    # Keeping up with the database

    def catch_up(self, conn: apsw.Connection, key: int) -> None:
        """Applies what is queued for vector store `key` (everything committed before this
        call), and builds its index first if it is missing and small; a large one missing
        raises Unavailable (the background loop builds it), and so does an index that cannot
        be written now (a full disk)."""
        found = self._open.get(key)
        if found is not None and (_last_queued(conn, key) or 0) <= found.applied:
            return
        try:
            self._catch_up(conn, key)
        except (ValueError, OSError, apsw.FullError) as error:
            raise Unavailable(f"the full-text index cannot be written now: {error}") from None

    def _catch_up(self, conn: apsw.Connection, key: int) -> None:
        with self._lock:
            if key not in self._open and not self._attach(conn, key):
                rows = _chunk_count(conn, key)
                if rows is None:
                    return  # a vector store deleted meanwhile: the search finds nothing
                if rows > INLINE_ROWS:
                    raise Unavailable(
                        f"the full-text index of this vector store ({rows} chunks) is being "
                        "rebuilt; retry later, or search in vector mode meanwhile"
                    )
                while self.rebuild_step(conn, key):
                    pass
            upto = _last_queued(conn, key)
            while upto is not None and self._apply(conn, key, upto, wait=False):
                pass

    def sync(self, conn: apsw.Connection) -> bool:
        """Applies one batch of the queue, whatever its vector stores; True while more is
        queued. For the background loop."""
        with self._lock:
            keys = [
                cast(int, row[0])
                for row in conn.execute(
                    "SELECT DISTINCT vector_store_id FROM fulltext_queue LIMIT 100"
                ).fetchall()
            ]
            busy = False
            for key in keys:
                if key in self._rebuilds:
                    continue
                if key not in self._open and not self._attach(conn, key):
                    if _chunk_count(conn, key) is None:
                        self._apply(conn, key, None, wait=True)  # deleted: drops the folder
                    continue
                busy = self._apply(conn, key, None, wait=True) or busy
            return busy

    def _apply(self, conn: apsw.Connection, key: int, upto: int | None, wait: bool) -> bool:
        """Applies up to BATCH queued rows of `key` (up to queue row `upto`) not applied yet;
        True if more remain up to it. Then deletes the applied rows from the queue: waiting
        for the write lock if `wait`, else only if it is free (a search's catch-up)."""
        found = self._open.get(key)
        done = found.applied if found is not None else 0
        with atomic(conn, write=False):
            rows = conn.execute(
                "SELECT q.seq, q.chunk_id, c.text, c.file_id FROM fulltext_queue AS q"
                " LEFT JOIN chunks AS c"
                " ON c.id = q.chunk_id AND c.vector_store_id = q.vector_store_id"
                " WHERE q.vector_store_id = ? AND q.seq > ? AND q.seq <= ? ORDER BY q.seq LIMIT ?",
                (key, done, upto if upto is not None else 2**62, BATCH),
            ).fetchall()
            exists = _chunk_count(conn, key) is not None
        if not exists:
            self._discard(key)
            _forget_queued(conn, key, 2**62, wait)
            return False
        if found is None:
            return False
        if rows:
            self._write(found, rows)
            found.applied = cast(int, rows[-1][0])
        if found.applied and (wait or rows):
            _forget_queued(conn, key, found.applied, wait)
        return len(rows) == BATCH

    def _write(self, found: _Index, rows: Sequence[Sequence[object]]) -> None:
        """Makes the index hold each row's chunk as the database has it (or not at all)."""
        latest: dict[int, tuple[str | None, str | None]] = {}
        for _, chunk, text, file_id in rows:
            latest[cast(int, chunk)] = (cast(str | None, text), cast(str | None, file_id))
        try:
            if found.writer is None:
                found.writer = found.index.writer(WRITER_HEAP, 1)
            writer = found.writer
            for chunk, (text, file_id) in latest.items():
                writer.delete_documents_by_term("id", chunk)
                if text is not None and file_id is not None:
                    writer.add_document(_document(chunk, file_id, text))
            writer.commit()
            found.index.reload()
            found.searcher = found.index.searcher()
        except (ValueError, OSError) as error:
            # A full disk, most likely: the rows stay queued for the next try.
            if found.writer is not None:
                found.writer.rollback()
                found.writer = None
            raise Unavailable(
                f"the full-text index cannot take the latest writes now ({error}); retry later"
            ) from None

    # Opening and rebuilding

    def _attach(self, conn: apsw.Connection, key: int) -> bool:
        """Opens the vector_store's index if its folder is the one the database recorded and
        holds as many chunks as it should; False if it must be rebuilt."""
        folder = self.root / str(key)
        with atomic(conn, write=False):
            row = conn.execute(
                "SELECT generation FROM fulltext_indexes WHERE vector_store_id = ?", (key,)
            ).fetchone()
            chunks = _chunk_count(conn, key)
            queued = _last_queued(conn, key) is not None
        if row is None or chunks is None or key in self._rebuilds:
            return False
        try:
            generation = (folder / _GENERATION_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return False
        if generation != row[0]:
            return False
        try:
            index = _open_index(folder)
        except (OSError, ValueError) as error:
            log.warning("full-text index %s unreadable (%s); rebuilding it", folder, error)
            return False
        searcher = index.searcher()
        if not queued and searcher.num_docs != chunks:
            log.warning(
                "full-text index %s holds %d chunks for %d in the database; rebuilding it",
                folder,
                searcher.num_docs,
                chunks,
            )
            return False
        self._open[key] = _Index(index, searcher)
        return True

    def make_empty(self, key: int, generation: str) -> None:
        """The folder of a new vector_store's index, empty, of `generation`."""
        with self._lock:
            folder = self.root / str(key)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True, mode=0o700)
            _open_index(folder)
            (folder / _GENERATION_FILE).write_text(generation, encoding="utf-8")
            _fsync_tree(folder)
            _fsync_dir(self.root)

    def missing(self, conn: apsw.Connection) -> list[int]:
        """VectorStores whose index is not open and cannot be: the rebuilds to run."""
        with self._lock:
            keys = [cast(int, row[0]) for row in conn.execute("SELECT id FROM vector_stores")]
            return [k for k in keys if k not in self._open and not self._attach(conn, k)]

    def rebuild_step(self, conn: apsw.Connection, key: int) -> bool:
        """Indexes the next BATCH chunks of a rebuild of `key` (starting it if needed); True
        while it goes on. The index goes live only once complete."""
        with self._lock:
            build = self._rebuilds.get(key)
            if build is None:
                self._discard(key)
                generation = secrets.token_hex(8)
                folder = self.root / f"{key}.{generation}.building"
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True, mode=0o700)
                index = _open_index(folder)
                upto = _last_queued(conn, key) or 0
                build = _Rebuild(folder, index, index.writer(WRITER_HEAP, 1), generation, upto)
                self._rebuilds[key] = build
            with atomic(conn, write=False):
                rows = conn.execute(
                    "SELECT id, file_id, text FROM chunks WHERE vector_store_id = ? AND id > ?"
                    " ORDER BY id LIMIT ?",
                    (key, build.after, BATCH),
                ).fetchall()
                exists = _chunk_count(conn, key) is not None
            if not exists:
                self._rebuilds.pop(key)
                shutil.rmtree(build.folder, ignore_errors=True)
                return False
            for chunk, file_id, text in rows:
                build.writer.add_document(
                    _document(cast(int, chunk), cast(str, file_id), cast(str, text))
                )
            build.done += len(rows)
            if rows:
                build.after = cast(int, rows[-1][0])
            if len(rows) == BATCH:
                return True
            self._finish(conn, key, build)
            return False

    def _finish(self, conn: apsw.Connection, key: int, build: _Rebuild) -> None:
        build.writer.commit()
        build.writer.wait_merging_threads()
        (build.folder / _GENERATION_FILE).write_text(build.generation, encoding="utf-8")
        _fsync_tree(build.folder)
        live = self.root / str(key)
        shutil.rmtree(live, ignore_errors=True)
        os.replace(build.folder, live)
        _fsync_dir(self.root)
        with atomic(conn):
            conn.execute(
                "INSERT OR REPLACE INTO fulltext_indexes (vector_store_id, generation)"
                " VALUES (?, ?)",
                (key, build.generation),
            )
            conn.execute(
                "DELETE FROM fulltext_queue WHERE vector_store_id = ? AND seq <= ?",
                (key, build.queued_upto),
            )
        del self._rebuilds[key]
        index = _open_index(live)
        self._open[key] = _Index(index, index.searcher())
        log.info("full-text index of vector_store %d built: %d chunks", key, build.done)

    def _discard(self, key: int) -> None:
        found = self._open.pop(key, None)
        if found is not None and found.writer is not None:
            found.writer.rollback()
        shutil.rmtree(self.root / str(key), ignore_errors=True)

    def forget(self) -> None:
        """Drops every index (a restored database): each is rebuilt from the chunks."""
        with self._lock:
            self._open.clear()
            self._rebuilds.clear()
            shutil.rmtree(self.root, ignore_errors=True)

    def close_writers(self) -> None:
        """Releases the writers' memory (an idle store keeps only its searchers)."""
        with self._lock:
            for found in self._open.values():
                if found.writer is not None:
                    found.writer.wait_merging_threads()
                    found.writer = None

    def remove_orphans(self, conn: apsw.Connection) -> None:
        """Deletes folders of vector stores the database no longer has, and rebuilds left over
        by a crash."""
        with self._lock:
            keys = {str(row[0]) for row in conn.execute("SELECT id FROM vector_stores")}
            if not self.root.exists():
                return
            for entry in self.root.iterdir():
                if entry.name not in keys and not any(
                    build.folder == entry for build in self._rebuilds.values()
                ):
                    shutil.rmtree(entry, ignore_errors=True)


K1 = 1.2

# A query word whose rarest term more than this share of the vector store's chunks hold, and
# more than COMMON_MIN_CHUNKS of them, is left out of its search, unless every word is: a
# stopword of this corpus ("gcloud" in gcloud's docs). Its bm25 weight is below ln 2 a term,
# a point or so of a score that the query's other words make, while its postings are most of
# the index, and every chunk in them is scored: on 1.33M chunks of the bench's man-page texts,
# 100 queries took 17.3 ms at p50 and 196 ms at p95 with these words, 6.3 and 51 ms without (a
# phrase such as "gcloud-wide-flags" of three such terms cost 127 ms alone, reading
# positions). Below COMMON_MIN_CHUNKS postings (~0.5 ms of scoring) every word is searched:
# in a small vector store a query finds every chunk that holds any of its words. Tantivy's
# document frequencies count deleted chunks until their segments merge, so after many
# rewrites a word can count as common a little early, as its IDF already does.
COMMON_SHARE = 0.5
COMMON_MIN_CHUNKS = 50_000


def _idf(frequency: int, total: int) -> float:
    """Tantivy's (and Lucene's) BM25 IDF."""
    return math.log(1.0 + (total - frequency + 0.5) / (frequency + 0.5))


def _document(chunk: int, file_id: str, text: str) -> tantivy.Document:
    document = tantivy.Document()
    document.add_integer("id", chunk)
    document.add_text("file", file_id)
    document.add_text("text", text)
    return document


def _open_index(folder: Path) -> tantivy.Index:
    index = tantivy.Index(SCHEMA, path=str(folder))
    index.register_tokenizer(ANALYZER, _analyzer())
    return index


def _chunk_count(conn: apsw.Connection, key: int) -> int | None:
    """The vector_store's chunks, None if it does not exist."""
    row = conn.execute("SELECT chunk_count FROM vector_stores WHERE id = ?", (key,)).fetchone()
    return None if row is None else cast(int, row[0])


def _forget_queued(conn: apsw.Connection, key: int, upto: int, wait: bool) -> None:
    """Deletes the queue rows of `key` up to `upto`, now or (not `wait`, the write lock busy)
    on a later try: they are applied already, and applying them again changes nothing."""

    def work(conn: Connection) -> None:
        conn.execute(
            "DELETE FROM fulltext_queue WHERE vector_store_id = ? AND seq <= ?", (key, upto)
        )

    if wait:
        with atomic(conn):
            work(conn)
    else:
        try_write(conn, work)


def _last_queued(conn: apsw.Connection, key: int) -> int | None:
    row = conn.execute(
        "SELECT max(seq) FROM fulltext_queue WHERE vector_store_id = ?", (key,)
    ).fetchone()
    return None if row is None or row[0] is None else cast(int, row[0])


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_tree(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    _fsync_dir(folder)


_registry: dict[str, FullText] = {}
_registry_lock = threading.Lock()


def for_database(conn: apsw.Connection) -> FullText:
    """The indexes of the database `conn` has open: one object per database file (path and
    inode, so a file made anew under the same path starts with none open) per process."""
    name = database_key(conn)
    with _registry_lock:
        found = _registry.get(name)
        if found is None:
            root = directory(Path(conn.filename)).resolve()
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            found = _registry[name] = FullText(root)
        return found
