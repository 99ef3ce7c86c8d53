"""A vector_store's vectors and the two ways to search them: exact and coarse + rescore.

Tables per vector store (key = vector stores.id, rowid = chunks.id everywhere):

- vec_<key>: vec0 float[D] distance_metric=cosine, always there. sqlite-vec 0.1.9 searches it
  by brute force (~80 ms at 100k x 384 here): the exact path.
- vecf_<key>: the same float32 blobs in a plain rowid table. Rescoring and selective filters
  fetch vectors by rowid, which costs ~2 us from a B-tree against ~90 us from vec0.
- vecq_<key>: vec0 bit[D] with `part = rowid % PARTITIONS` as partition key: one sign bit per
  dimension (vec_quantize_binary), 48 bytes a row at D=384, 1/32 of the floats.

Why partitions: sqlite-vec selects a KNN's top k in each 1024-slot chunk with a pass costing
O(k * chunk size), so one bit KNN for 640 candidates over 100k rows costs as much as the float
scan it should replace. Asking each of 64 rowid-modulo partitions for its ceil(1.5 * C / 64)
nearest divides that by ~40, and the union still holds the global hamming top C with high
probability. Rowid partitions need no training or rebalancing. The research behind these
numbers (recall@10 0.9955 at 10 ms p50 on 100k real MiniLM vectors) is in
docs/design/coarse-index/.

The coarse tables cost ~1.6 KiB a row and pay off only on large vector stores, so a vector store
starts `exact` and a background builder (`build_step`) creates and fills them once it reaches
`min_rows`; meanwhile (`building`) writers keep both copies and searches stay exact. `coarse`
means the coarse tables hold exactly the rows of vec_<key>.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import cast

import apsw
import numpy as np

from services.common.vocabulary import BUILDING, COARSE, EXACT
from services.store import resident
from services.store.db import atomic, database_key, vectors_available, vectors_error
from services.store.errors import VectorsUnavailable

# sqlite-vec's limit on k in a KNN query.
MAX_K = 4096
# Part of the coarse table's layout (rows are stored under rowid % PARTITIONS): fixed.
PARTITIONS = 64


@dataclass(frozen=True)
class IndexSettings:
    # Off: every vector store stays exact and no coarse table is built.
    coarse: bool = True
    # A vector store gets a coarse index at this many vectors. Below it the exact scan costs
    # at most ~13 ms (0.8 ms per 1k rows here).
    min_rows: int = 16_384
    # Coarse candidates C = max(min_candidates, k * oversample): 640 rows rescored for k = 10.
    # Below small_rows the floor is small_min_candidates: on 20k real vectors of one corpus
    # section recall@10 was 0.981 at C = 400 and 0.994 at 800 (9 ms, the scan 14 ms), while at
    # 100k C = 400 gives 0.995 at ~10 ms and 800 costs ~19 ms.
    oversample: int = 40
    min_candidates: int = 400
    small_rows: int = 65_536
    small_min_candidates: int = 800
    # Beyond this many candidates (k > 51) the coarse path stops paying off: search exactly.
    max_candidates: int = 2048
    # Each partition returns ceil(slack * C / PARTITIONS) rows (at least k): absorbs the
    # uneven spread of the global top C over the partitions.
    slack: float = 1.5
    # A filter matching at most exact_ids_max rows is searched exactly over them (~1.3 us a
    # match). A broader one, matching a fraction f, is post-filtered from a pool of C / f coarse
    # candidates when that pool is at most max_pool (f >= 10% at C = 400), else (or when too
    # few candidates survive) each partition's KNN is pre-filtered by its matching rowids.
    max_pool: int = 4000
    exact_ids_max: int = 10_000
    # Rows copied per builder transaction: short enough that writers barely wait.
    build_batch: int = 2000
    # Unfiltered searches run over the vectors in memory when they fit (resident.py).
    resident: resident.ResidentSettings = field(default_factory=resident.ResidentSettings)


def vec_table(key: int) -> str:
    """The vec0 table of a vector store, named from its integer key only (never from input)."""
    if not isinstance(key, int) or isinstance(key, bool) or key <= 0:
        raise ValueError(f"vector_store key must be a positive integer, got {key!r}")
    return f"vec_{key:d}"


def float_table(key: int) -> str:
    return "vecf_" + vec_table(key)[4:]


def coarse_table(key: int) -> str:
    return "vecq_" + vec_table(key)[4:]


# ------------------------------------------------------------------------------------ writes


def create_tables(conn: apsw.Connection, key: int, dimensions: int) -> None:
    """DDL for a new vector store, inside the caller's transaction. It starts exact. Without
    sqlite-vec there is none yet: create_missing makes it once sqlite-vec loads."""
    if not vectors_available():
        return
    conn.execute(
        f"CREATE VIRTUAL TABLE {vec_table(key)} "
        f"USING vec0(embedding float[{dimensions:d}] distance_metric=cosine)"
    )


def has_table(conn: apsw.Connection, key: int) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (vec_table(key),)
    ).fetchall()
    return bool(row)


def create_missing(conn: apsw.Connection) -> int:
    """Creates the vec0 tables of vector stores made while sqlite-vec was not loaded; returns
    how many. Called at startup, when it is."""
    made = 0
    with atomic(conn):
        rows = conn.execute("SELECT id, dimensions FROM vector_stores ORDER BY id").fetchall()
        for key, dimensions in rows:
            if not has_table(conn, cast(int, key)):
                create_tables(conn, cast(int, key), cast(int, dimensions))
                made += 1
    return made


def _need_vectors(what: str) -> None:
    if not vectors_available():
        raise VectorsUnavailable(
            f"{what} needs the vector index, and this store runs without sqlite-vec "
            f"(lexical-only): {vectors_error()}"
        )


def drop_tables(conn: apsw.Connection, key: int) -> None:
    if not vectors_available():
        if has_table(conn, key):
            # A vec0 table cannot be dropped without its module: the drop would be lost.
            _need_vectors("deleting a vector store that has vectors")
        return
    conn.execute(f"DROP TABLE {vec_table(key)}")
    conn.execute(f"DROP TABLE IF EXISTS {coarse_table(key)}")
    conn.execute(f"DROP TABLE IF EXISTS {float_table(key)}")
    _note(conn, resident.Change(key, dropped=True))


def _stored_kind(conn: apsw.Connection, key: int) -> str | None:
    row = conn.execute("SELECT vector_index FROM vector_stores WHERE id = ?", (key,)).fetchone()
    return None if row is None else cast(str, row[0])


def kind(conn: apsw.Connection, key: int) -> str:
    found = _stored_kind(conn, key)
    if found is None:
        raise RuntimeError(f"vector_store key {key} vanished inside a transaction")
    return found


def insert(conn: apsw.Connection, key: int, rows: Sequence[tuple[int, bytes]]) -> None:
    """Writes (chunk id, float32 blob) pairs to every table the vector store has (in the
    caller's transaction)."""
    _need_vectors("writing vectors")
    conn.executemany(f"INSERT INTO {vec_table(key)} (rowid, embedding) VALUES (?, ?)", rows)
    if kind(conn, key) != EXACT:
        _insert_coarse(conn, key, rows)
    _note(conn, resident.Change(key, rows=rows))


def _insert_coarse(conn: apsw.Connection, key: int, rows: Sequence[tuple[int, bytes]]) -> None:
    conn.executemany(f"INSERT INTO {float_table(key)} (id, embedding) VALUES (?, ?)", rows)
    conn.executemany(
        f"INSERT INTO {coarse_table(key)} (rowid, part, embedding)"
        f" VALUES (?1, ?1 % {PARTITIONS:d}, vec_quantize_binary(?2))",
        rows,
    )


def insert_windows(conn: apsw.Connection, key: int, rows: Sequence[tuple[int, int, bytes]]) -> None:
    """Writes (chunk id, window index, float32 blob) of long chunks' windows 1.. (windows.py;
    in the caller's transaction). Deleting a chunk deletes them (ON DELETE CASCADE)."""
    _need_vectors("writing vectors")
    conn.executemany(
        "INSERT INTO chunk_windows (chunk_id, window_index, vector_store_id, embedding)"
        " VALUES (?, ?, ?, ?)",
        [(chunk, window, key, blob) for chunk, window, blob in rows],
    )


def delete(conn: apsw.Connection, key: int, ids: Sequence[int]) -> None:
    """Deletes the vectors of these chunks (callers leave out chunks known to have none)."""
    if not ids:
        return
    _need_vectors("deleting chunks that have vectors")
    params = [(i,) for i in ids]
    conn.executemany(f"DELETE FROM {vec_table(key)} WHERE rowid = ?", params)
    if kind(conn, key) != EXACT:
        conn.executemany(f"DELETE FROM {float_table(key)} WHERE id = ?", params)
        conn.executemany(f"DELETE FROM {coarse_table(key)} WHERE rowid = ?", params)
    _note(conn, resident.Change(key, deleted=ids))


def _note(conn: apsw.Connection, change: resident.Change) -> None:
    """Tells this process's in-memory copies (resident.py) what the write changed: when the
    transaction commits, or now outside one."""
    resident.record(conn, change)
    if not conn.in_transaction:
        resident.committed(conn, database_key(conn))


@dataclass(frozen=True)
class VectorSlots:
    live: int
    # Allocated slots, in `chunks` chunks of `per_chunk` slots.
    slots: int
    chunks: int
    per_chunk: int


def _slots(conn: apsw.Connection, table: str) -> VectorSlots | None:
    """How full a vec0 table's chunks are, from sqlite-vec's shadow tables; None if they are
    not laid out as sqlite-vec 0.1 does (a future version)."""
    try:
        live = conn.execute(f"SELECT count(*) FROM {table}_rowids").fetchone()
        row = conn.execute(
            f"SELECT coalesce(sum(size), 0), count(*), coalesce(max(size), 0) FROM {table}_chunks"
        ).fetchone()
    except apsw.SQLError:
        return None
    if live is None or row is None:
        return None
    return VectorSlots(
        live=int(live[0]), slots=int(row[0]), chunks=int(row[1]), per_chunk=int(row[2])
    )


def vector_slots(conn: apsw.Connection, key: int) -> VectorSlots | None:
    """The fill of a vector_store's float vec0 table (callers count rows the slow way on None)."""
    return _slots(conn, vec_table(key))


def compact(conn: apsw.Connection, key: int) -> bool:
    """Re-packs a vector_store's vec0 tables where deletions left more chunks than their rows
    need, inside the caller's transaction; True if any was rebuilt.

    sqlite-vec 0.1 stores vectors in fixed chunks (1024 slots) and frees a chunk only when
    every vector in it is deleted; new vectors never reuse freed slots. Re-inserting the live
    vectors packs them into as few chunks as they need.
    """
    # The coarse bit table fragments the same way, partition by partition.
    repacked = repack_coarse(conn, key)
    found = vector_slots(conn, key)
    if found is None or found.per_chunk <= 0:
        return repacked
    if found.chunks <= math.ceil(found.live / found.per_chunk):
        return repacked
    table = vec_table(key)
    conn.execute(f"CREATE TEMP TABLE vec_keep AS SELECT rowid AS id, embedding FROM {table}")
    conn.execute(f"DELETE FROM {table}")
    conn.execute(
        f"INSERT INTO {table} (rowid, embedding)"
        " SELECT id, embedding FROM temp.vec_keep ORDER BY id"
    )
    conn.execute("DROP TABLE temp.vec_keep")
    return True


def repack_coarse(conn: apsw.Connection, key: int) -> bool:
    """Rebuilds the bit table from the float copy when deletions left it more chunks than its
    rows need (each partition has its own chunks). Inside the caller's transaction; True if
    it rebuilt."""
    if _stored_kind(conn, key) in (None, EXACT):
        return False  # deleted meanwhile (vacuum lists keys before compacting), or no index
    found = _slots(conn, coarse_table(key))
    if found is None or found.per_chunk <= 0:
        return False
    needed = conn.execute(
        f"SELECT coalesce(sum((n + ? - 1) / ?), 0) FROM"
        f" (SELECT count(*) AS n FROM {float_table(key)} GROUP BY id % {PARTITIONS:d})",
        (found.per_chunk, found.per_chunk),
    ).fetchone()
    if needed is None or found.chunks <= cast(int, needed[0]):
        return False
    conn.execute(f"DELETE FROM {coarse_table(key)}")
    conn.execute(
        f"INSERT INTO {coarse_table(key)} (rowid, part, embedding)"
        f" SELECT id, id % {PARTITIONS:d}, vec_quantize_binary(embedding)"
        f" FROM {float_table(key)} ORDER BY id"
    )
    return True


# ------------------------------------------------------------------------------------ builds


def pending_builds(conn: apsw.Connection, settings: IndexSettings) -> list[int]:
    """VectorStores whose coarse index should be built or finished, smallest key first."""
    if not settings.coarse:
        return []
    rows = conn.execute(
        "SELECT id FROM vector_stores WHERE vector_index = ?"
        " OR (vector_index = ? AND chunk_count >= ? AND dimensions % 8 = 0) ORDER BY id",
        (BUILDING, EXACT, settings.min_rows),
    ).fetchall()
    return [cast(int, row[0]) for row in rows]


def build_step(conn: apsw.Connection, key: int, after: int, settings: IndexSettings) -> int | None:
    """One bounded transaction of a coarse index build: creates the tables if needed, then
    copies up to build_batch vectors with rowid > `after` that the coarse tables lack.

    Returns the last rowid copied (pass it back as `after`), or None when the build is
    finished (the vector store is then `coarse`) or no longer wanted (it was deleted). Rows
    written meanwhile reach the coarse tables through `insert`, so the copy skips them.
    """
    with atomic(conn):
        row = conn.execute(
            "SELECT vector_index, dimensions FROM vector_stores WHERE id = ?", (key,)
        ).fetchone()
        if row is None or row[0] == COARSE:
            return None
        if row[0] == EXACT:
            create_coarse(conn, key, cast(int, row[1]))
            conn.execute("UPDATE vector_stores SET vector_index = ? WHERE id = ?", (BUILDING, key))
        ids = conn.execute(
            f"SELECT c.id FROM chunks AS c WHERE c.vector_store_id = ? AND c.id > ?"
            f" AND NOT EXISTS (SELECT 1 FROM {float_table(key)} AS f WHERE f.id = c.id)"
            " ORDER BY c.id LIMIT ?",
            (key, after, settings.build_batch),
        ).fetchall()
        if not ids:
            conn.execute("UPDATE vector_stores SET vector_index = ? WHERE id = ?", (COARSE, key))
            return None
        # vec0 serves a rowid only as a point lookup; the batch bounds their count.
        lookup = f"SELECT embedding FROM {vec_table(key)} WHERE rowid = ?"
        rows = []
        for (chunk_id,) in ids:
            found = conn.execute(lookup, (chunk_id,)).fetchone()
            if found is not None:
                rows.append((cast(int, chunk_id), cast(bytes, found[0])))
        _insert_coarse(conn, key, rows)
        return cast(int, ids[-1][0])


def create_coarse(conn: apsw.Connection, key: int, dimensions: int) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {float_table(key)}"
        " (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL) STRICT"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {coarse_table(key)} "
        f"USING vec0(part integer partition key, embedding bit[{dimensions:d}])"
    )


def build(conn: apsw.Connection, key: int, settings: IndexSettings) -> None:
    """Runs a build to the end (tests and tools; the store's builder interleaves steps)."""
    after = 0
    while (step := build_step(conn, key, after, settings)) is not None:
        after = step


# ------------------------------------------------------------------------------------ search
#
Hits = list[tuple[int, float]]


@dataclass(frozen=True)
class Allowed:
    """The rows a filter allows, in two SQL forms with positional `?` parameters.

    `ids` yields their rowids (one column): for counting them and for pre-filtering.
    `test` is a boolean expression, true when the rowid `cand.id` is allowed: for checking a
    few candidates without listing every allowed row. Every statement below puts the filter's
    SQL before its own parameters, so binding follows textual order.
    """

    ids: str
    ids_params: Sequence[object]
    test: str
    test_params: Sequence[object]


def nearest_ids(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    k: int,
    *,
    rows: int,
    index: str,
    settings: IndexSettings,
    allowed: Allowed | None = None,
    exact: bool = False,
) -> Hits:
    """The k rowids nearest to `query` (float32 blob) by cosine distance, as (rowid, distance)
    ordered by (distance, rowid). Call it inside one read transaction.

    `rows` is the vector_store's vector count, `index` its vector_index. Filtering is always
    exact: rows outside `allowed` never appear and rows inside it are never lost to a
    post-filter. Ranking is exact on the exact paths (`exact=True` forces them) and
    approximate on the coarse path.
    """
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be 1..{MAX_K}, got {k}")
    floor = (
        settings.min_candidates if rows >= settings.small_rows else settings.small_min_candidates
    )
    candidates = max(floor, k * settings.oversample)
    coarse = (
        not exact
        and settings.coarse
        and index == COARSE
        and rows >= settings.min_rows
        and candidates <= settings.max_candidates
    )
    if allowed is None:
        if not coarse:
            return _exact(conn, key, query, k, None)
        return _coarse_rescored(conn, key, query, k, candidates, None, settings)
    if index != COARSE:
        # While building, the float copy lacks rows: only vec0 has them all.
        return _exact(conn, key, query, k, allowed)
    # One evaluation of the filter to learn its selectivity (a few ms at 100k chunks).
    found = conn.execute(f"SELECT count(*) FROM ({allowed.ids})", allowed.ids_params).fetchone()
    matches = cast(int, found[0]) if found is not None else 0
    if matches == 0:
        return []
    if matches <= settings.exact_ids_max:
        # Exact cosine over just the matching rows: ~1.3 us a match (13 ms for 10k).
        return _exact_over_ids(conn, key, query, k, allowed)
    if not coarse:
        return _exact(conn, key, query, k, allowed)
    pool = math.ceil(candidates * rows / matches)
    if pool <= settings.max_pool:
        hits, survivors = _coarse_postfiltered(conn, key, query, k, pool, allowed, settings)
        # Fewer survivors than C: the filter avoids this query's neighbourhood, so the
        # candidate set would be smaller than the unfiltered search's; do not trust it.
        if survivors >= candidates:
            return hits
    return _coarse_rescored(conn, key, query, k, candidates, allowed, settings)


def resident_nearest(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    k: int,
    *,
    rows: int,
    dimensions: int,
    owner: str,
    settings: resident.ResidentSettings,
    exact: bool = False,
) -> Hits | None:
    """`nearest_ids` without a filter, from the vector_store's vectors in memory; None when
    they are not there (the caller searches SQLite). A small vector store not yet in memory is
    loaded now, inside the caller's read transaction; a larger one is left to `warm` (the
    background builder), so a search never waits for a long load. `owner` is the
    vector_store's public id, which tells a vector store from another of the same key in a
    database made anew under the same path."""
    found = resident.for_database(database_key(conn), settings)
    if found is None:
        return None
    vectors = found.get(key)
    if vectors is None or vectors.owner != owner:
        if rows > settings.inline_rows:
            found.wanted(key)
            return None
        vectors = found.load(key, dimensions, lambda: _all_vectors(conn, key), rows, owner)
        if vectors is None:
            return None
    return vectors.search(np.frombuffer(query, dtype="<f4"), k, exact)


def in_memory(conn: apsw.Connection, owner: str, settings: resident.ResidentSettings) -> bool:
    """Whether the vector store with this public id has its vectors in memory."""
    found = resident.for_database(database_key(conn), settings)
    return found is not None and any(c.owner == owner for c in found.loaded().values())


def warm(conn: apsw.Connection, settings: resident.ResidentSettings) -> bool:
    """Loads one vector store into memory that a search wanted (dropping the least recently
    searched past the budget), else the most recently active one not there yet if it fits
    beside those loaded; True if it loaded one (call again). Unwanted ones never drop others:
    two that fit the budget only one at a time would replace each other for ever."""
    found = resident.for_database(database_key(conn), settings)
    if found is None or not vectors_available():
        return False
    loaded = found.loaded()
    # Begun before the read transaction takes its snapshot: the writes committed while a
    # large vector store loads reach it too.
    watch = found.watch()
    try:
        return _load_one(conn, found, loaded, watch)
    finally:
        found.unwatch(watch)


def _load_one(
    conn: apsw.Connection,
    found: resident.Resident,
    loaded: dict[int, resident.VectorStore],
    watch: resident.Watch,
) -> bool:
    with atomic(conn, write=False):
        rows = cast(
            list[tuple[int, str, int, int]],
            conn.execute(
                "SELECT id, public_id, dimensions, chunk_count FROM vector_stores"
                " WHERE shadow_of IS NULL AND chunk_count > 0 ORDER BY last_active_at DESC, id"
            ).fetchall(),
        )
        wanted = found.take_wanted()
        candidates = sorted(
            (row for row in rows if row[0] not in loaded or loaded[row[0]].owner != row[1]),
            key=lambda row: row[0] not in wanted,
        )
        for key, owner, dimensions, count in candidates:
            if found.fits(dimensions, count, evicting=key in wanted):
                rows_of = partial(_all_vectors, conn, key)
                found.load(key, dimensions, rows_of, count, owner, watch=watch)
                return True
    return False


def _all_vectors(conn: apsw.Connection, key: int) -> Iterator[tuple[int, bytes]]:
    # The plain float table reads ~4x faster than vec0's chunks, but lacks rows while built.
    table = float_table(key) if _stored_kind(conn, key) == COARSE else vec_table(key)
    column = "id" if table == float_table(key) else "rowid"
    for rowid, blob in conn.execute(f"SELECT {column}, embedding FROM {table}"):
        yield cast(int, rowid), cast(bytes, blob)


def distances(conn: apsw.Connection, key: int, query: bytes, ids: Sequence[int]) -> Hits:
    """The cosine distance of `query` to each of these chunks' vectors (those that have one):
    the exact score of a candidate another ranking found. From the resident copy where it
    holds them: read from SQLite, a hybrid search's ~50 lexical candidates were a quarter of
    its time at 100k chunks (point lookups into vec0)."""
    if not ids:
        return []
    found = resident.existing(database_key(conn))
    vectors = found.get(key) if found is not None else None
    if vectors is not None and vectors.owner == _owner(conn, key):
        hits, missing = vectors.distances(np.frombuffer(query, dtype="<f4"), ids)
        return hits + _stored_distances(conn, key, query, missing.tolist())
    return _stored_distances(conn, key, query, ids)


def _owner(conn: apsw.Connection, key: int) -> str | None:
    row = conn.execute("SELECT public_id FROM vector_stores WHERE id = ?", (key,)).fetchone()
    return None if row is None else cast(str, row[0])


def _stored_distances(conn: apsw.Connection, key: int, query: bytes, ids: Sequence[int]) -> Hits:
    if not ids:
        return []
    table = float_table(key) if _stored_kind(conn, key) == COARSE else vec_table(key)
    column = "id" if table == float_table(key) else "rowid"
    # One point lookup per id: vec0 answers `rowid IN (...)` by scanning every vector
    # (~0.5 s at 1M chunks), `rowid = ?` from its rowid index.
    sql = (
        f"SELECT t.{column}, vec_distance_cosine(t.embedding, ?) FROM json_each(?) AS wanted"
        f" CROSS JOIN {table} AS t ON t.{column} = wanted.value"
    )
    return _hits(conn.execute(sql, [query, json.dumps(list(ids))]).fetchall())


def window_distances(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    *,
    allowed: Allowed | None = None,
    ids: Sequence[int] | None = None,
) -> Hits:
    """Each chunk's smallest cosine distance to `query` over its windows 1.. (windows.py), for
    the chunks that have some (of `allowed`, of `ids`): an exact scan of the windows."""
    sql = (
        "SELECT chunk_id, min(vec_distance_cosine(embedding, ?)) FROM chunk_windows"
        " WHERE vector_store_id = ?"
    )
    params: list[object] = [query, key]
    if ids is not None:
        if not ids:
            return []
        sql += f" AND chunk_id IN ({','.join('?' * len(ids))})"
        params += list(ids)
    if allowed is not None:
        sql = f"WITH allowed(id) AS MATERIALIZED ({allowed.ids}) {sql}"
        sql += " AND chunk_id IN (SELECT id FROM allowed)"
        params = [*allowed.ids_params, *params]
    return _hits(conn.execute(sql + " GROUP BY chunk_id", params).fetchall())


def _hits(rows: Sequence[Sequence[object]]) -> Hits:
    return [(cast(int, row[0]), cast(float, row[1])) for row in rows]


def _exact(conn: apsw.Connection, key: int, query: bytes, k: int, allowed: Allowed | None) -> Hits:
    """sqlite-vec's brute-force float KNN; a filter restricts the scan with `rowid IN`."""
    if allowed is None:
        sql = f"SELECT rowid, distance FROM {vec_table(key)} WHERE embedding MATCH ? AND k = ?"
        params: list[object] = [query, k]
    else:
        sql = (
            f"WITH allowed(id) AS MATERIALIZED ({allowed.ids})"
            f" SELECT rowid, distance FROM {vec_table(key)}"
            " WHERE embedding MATCH ? AND k = ? AND rowid IN (SELECT id FROM allowed)"
        )
        params = [*allowed.ids_params, query, k]
    found = conn.execute(sql, params).fetchall()
    return sorted(_hits(found), key=lambda hit: (hit[1], hit[0]))


def _exact_over_ids(
    conn: apsw.Connection, key: int, query: bytes, k: int, allowed: Allowed
) -> Hits:
    sql = f"""
    WITH allowed(id) AS MATERIALIZED ({allowed.ids})
    SELECT v.id, vec_distance_cosine(v.embedding, ?) AS d
    FROM allowed JOIN {float_table(key)} AS v ON v.id = allowed.id
    ORDER BY d, v.id LIMIT ?
    """
    return _hits(conn.execute(sql, [*allowed.ids_params, query, k]).fetchall())


def _coarse_rescored(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    k: int,
    candidates: int,
    allowed: Allowed | None,
    settings: IndexSettings,
) -> Hits:
    """Hamming KNN in every partition (pre-filtered), then exact cosine over the union."""
    per_part = max(k, math.ceil(settings.slack * candidates / PARTITIONS))
    # Each partition gets only its own matching rowids: sqlite-vec copies and sorts the IN
    # list per KNN, so one shared list would be copied PARTITIONS times.
    restrict = " AND rowid IN (SELECT id FROM allowed WHERE part = ?)" if allowed else ""
    arm = (
        f"SELECT * FROM (SELECT rowid AS id FROM {coarse_table(key)}"
        f" WHERE embedding MATCH vec_quantize_binary(?) AND k = ? AND part = ?{restrict})"
    )
    params: list[object] = list(allowed.ids_params) if allowed else []
    for part in range(PARTITIONS):
        params += [query, per_part, part] + ([part] if allowed else [])
    params += [query, k]
    prefix = (
        f"allowed(id, part) AS MATERIALIZED (SELECT id, id % {PARTITIONS:d} FROM ({allowed.ids})), "
        if allowed
        else ""
    )
    sql = f"""
    WITH {prefix}cand(id) AS MATERIALIZED ({" UNION ALL ".join([arm] * PARTITIONS)})
    SELECT v.id, vec_distance_cosine(v.embedding, ?) AS d
    FROM cand JOIN {float_table(key)} AS v ON v.id = cand.id
    ORDER BY d, v.id LIMIT ?
    """
    return _hits(conn.execute(sql, params).fetchall())


def _coarse_postfiltered(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    k: int,
    pool: int,
    allowed: Allowed,
    settings: IndexSettings,
) -> tuple[Hits, int]:
    """Unfiltered partitioned hamming KNN for `pool` candidates, the filter's `test` on each
    (a few primary-key lookups, not a listing of the matches), exact cosine over the
    survivors. Returns the hits and how many candidates survived.

    The survivors are the allowed rows within the pool's hamming radius, i.e. what a
    pre-filtered coarse KNN of that size yields, so with enough of them the recall is that of
    the unfiltered search."""
    per_part = max(k, math.ceil(settings.slack * pool / PARTITIONS))
    arm = (
        f"SELECT * FROM (SELECT rowid AS id FROM {coarse_table(key)}"
        " WHERE embedding MATCH vec_quantize_binary(?) AND k = ? AND part = ?)"
    )
    params: list[object] = []
    for part in range(PARTITIONS):
        params += [query, per_part, part]
    params += [*allowed.test_params, query, k]
    sql = f"""
    WITH cand(id) AS MATERIALIZED ({" UNION ALL ".join([arm] * PARTITIONS)}),
    surv(id) AS MATERIALIZED (
        SELECT id FROM cand WHERE {allowed.test}
    )
    SELECT v.id, vec_distance_cosine(v.embedding, ?) AS d, (SELECT count(*) FROM surv)
    FROM surv JOIN {float_table(key)} AS v ON v.id = surv.id
    ORDER BY d, v.id LIMIT ?
    """
    found = conn.execute(sql, params).fetchall()
    survivors = cast(int, found[0][2]) if found else 0
    return _hits(found), survivors
