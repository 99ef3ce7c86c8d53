"""A vector store's vectors on PostgreSQL: pgvector, one partial HNSW index per vector store.

Layout (docs/design/postgres.md, "Recommendation"): the float32 vector is a column of `chunks`
(`embedding vector`, no fixed dimension since vector stores differ in model, NULL until
embedded), and each vector store has one HNSW index over the half-precision cast of its own
rows only:

    CREATE INDEX chunks_hnsw_<key> ON chunks USING hnsw
        ((embedding::halfvec(<dims>)) halfvec_cosine_ops) WHERE vector_store_id = <key>

halfvec halves the index (~1.1 KB a row at 384 dims against ~2 KB) at the same recall, and a
partial index per vector store keeps a tenant's recall and latency independent of the others'
(one shared index lost 80% of a small vector store's top 10). A search names the key as a
literal (never a bound parameter: a generic plan could not prove the index's predicate), takes
a few times k candidates from the index and rescores them with the float32 vectors
(`embedding <=> query`), ordered by (distance as float32, chunk id): the order and the scores
of the SQLite engine's exact search, whose candidates the index finds with recall ~0.99.

What the SQLite engine needs beside this, and PostgreSQL does not: the resident numpy copies
(resident.py; the buffer cache holds the index and the rows), the coarse tables and their
background build (`build_step`, `pending_builds`, `warm`: HNSW is maintained row by row on
write) and vec0's re-packing (`compact`, `vector_slots`: VACUUM reclaims dead rows and their
index entries). Deleting a chunk deletes its vector, which is a column of its row (`delete`
has nothing to do).

Vectors travel as little-endian float32 bytes, as everywhere in the store; they are sent to
the server in pgvector's binary format (`_VectorDumper`). Every function runs inside the
caller's transaction on a psycopg 3 connection; searches need one (SET LOCAL).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from psycopg import Connection, Cursor
from psycopg.adapt import Dumper
from psycopg.pq import Format

# The columns and extension the baseline schema adds to its `chunks` table (after creating it).
DDL: list[str] = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    "ALTER TABLE chunks ADD COLUMN embedding vector",
    # A chunk's row keeps its vector (1,544 B at 384 dims), compressed text and tsvector up
    # to 4,000 B: under PostgreSQL's 2,032 all three went to TOAST, one more lookup for every
    # vector rescored or scanned (exact scan 0.56x the time at 4,000, disk +5%: BENCHMARKS.md).
    "ALTER TABLE chunks SET (toast_tuple_target = 4000)",
]

# pgvector indexes halfvec up to 4,000 dimensions; a larger vector store is searched exactly.
HNSW_MAX_DIMENSIONS = 4000
# pgvector's ceiling on hnsw.ef_search.
MAX_EF_SEARCH = 1000
# Matches vector_index.MAX_K: the largest k a search takes.
MAX_K = 4096

Hits = list[tuple[int, float]]


@dataclass(frozen=True)
class VectorSettings:
    # The graph: pgvector's defaults, as measured (docs/design/postgres.md).
    m: int = 16
    ef_construction: int = 64
    # A vector store of at most this many chunks is scanned exactly (~1.5 us a row here), for
    # recall 1.0 where it costs about what the index does.
    exact_rows: int = 2_000
    # hnsw.ef_search = clamp(ef_per_k * k, min_ef, MAX_EF_SEARCH) times `scale(rows)`: on 40k
    # and 5k rows recall@10 0.996-0.999 at 80, recall@50 0.99 at 160-200; one graph of 100k
    # rows needs about twice that (0.990 at 160). The index's ef_search nearest are the
    # candidates the float32 vectors rescore.
    ef_per_k: int = 4
    min_ef: int = 80
    # ef_search doubles past large_rows and doubles again past 4 x large_rows: at 1M rows
    # recall@10 0.985 and recall@50 0.993 (bench/pg_search.py, BENCHMARKS.md).
    large_rows: int = 50_000
    # A filter that keeps at most this many chunks is searched exactly over them (the
    # vector_store_id, file_id index finds them; ~4.3 us a row read and rescored). At 1M
    # rows a filter keeping 20k went exact in 85 ms and through the iterative scan in 266;
    # one keeping 100k, 445 against 189; at 100k rows one keeping 10k cost about the same
    # either way.
    exact_filtered_max: int = 20_000
    # A broader filter walks the index with pgvector 0.8's iterative scan (relaxed order,
    # re-sorted here) until it has its candidates, reading at most this many tuples for each
    # candidate it would need if the filter kept every row, and at least min_scan_tuples.
    scan_tuples_per_candidate: int = 4
    min_scan_tuples: int = 20_000


def index_name(key: int) -> str:
    """The vector store's HNSW index, named from its integer key only (never from input)."""
    if not isinstance(key, int) or isinstance(key, bool) or key <= 0:
        raise ValueError(f"vector_store key must be a positive integer, got {key!r}")
    return f"chunks_hnsw_{key:d}"


def _dimensions(dimensions: int) -> int:
    if not isinstance(dimensions, int) or not 1 <= dimensions <= 16_000:
        raise ValueError(f"dimensions must be 1..16000, got {dimensions!r}")
    return dimensions


# ------------------------------------------------------------------------------------ wire


class Vector(bytes):
    """A float32 vector (little-endian bytes) bound as a pgvector `vector` parameter."""


class _VectorDumper(Dumper):
    """pgvector's binary input (vector_recv): dimensions and a reserved word as int16, then
    big-endian float4. Sent with no type (oid 0): the statement's `::vector` types it."""

    format = Format.BINARY
    oid = 0

    def dump(self, obj: Any) -> bytes:
        values = np.frombuffer(obj, dtype="<f4")
        return struct.pack(">HH", values.size, 0) + values.astype(">f4").tobytes()


def _cursor(conn: Connection[Any]) -> Cursor[Any]:
    cursor = conn.cursor()
    # On the cursor, not the connection: whoever made the connection need not know of it.
    cursor.adapters.register_dumper(Vector, _VectorDumper)
    return cursor


def _run(
    conn: Connection[Any], sql: str, params: Mapping[str, object] | Sequence[object] = ()
) -> list[tuple[Any, ...]]:
    with _cursor(conn) as cursor:
        cursor.execute(sql.encode(), params)
        return cursor.fetchall() if cursor.description else []


# ------------------------------------------------------------------------------------ writes


def create_tables(
    conn: Connection[Any], key: int, dimensions: int, settings: VectorSettings | None = None
) -> None:
    """The HNSW index of a new vector store, in the caller's transaction (named as SQLite's
    vec0 table maker is). Over no rows yet it is made at once, but CREATE INDEX holds a SHARE
    lock on `chunks` until the transaction ends: writes of other vector stores wait for that
    commit, so keep the transaction short. A vector store of more than HNSW_MAX_DIMENSIONS
    gets none and is searched exactly."""
    settings = settings or VectorSettings()
    if _dimensions(dimensions) > HNSW_MAX_DIMENSIONS:
        return
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {index_name(key)} ON chunks USING hnsw"
        f" ((embedding::halfvec({dimensions:d})) halfvec_cosine_ops)"
        f" WITH (m = {settings.m:d}, ef_construction = {settings.ef_construction:d})"
        f" WHERE vector_store_id = {key:d}".encode()
    )


def drop_tables(conn: Connection[Any], key: int) -> None:
    """Drops the vector store's index (its vectors go with its chunks' rows)."""
    conn.execute(f"DROP INDEX IF EXISTS {index_name(key)}".encode())


def has_index(conn: Connection[Any], key: int) -> bool:
    return bool(_run(conn, "SELECT 1 FROM pg_class WHERE relname = %s", [index_name(key)]))


def create_missing(conn: Connection[Any], settings: VectorSettings | None = None) -> int:
    """Makes the indexes of vector stores that lack theirs (a restore that skipped indexes,
    a failed build); returns how many, in the caller's transaction. A large vector store's
    build takes minutes: call it at startup, as the SQLite engine's create_missing."""
    rows = _run(
        conn,
        "SELECT id, dimensions FROM vector_stores WHERE dimensions <= %s AND NOT EXISTS"
        " (SELECT 1 FROM pg_class WHERE relname = 'chunks_hnsw_' || vector_stores.id)"
        " ORDER BY id",
        [HNSW_MAX_DIMENSIONS],
    )
    for key, dimensions in rows:
        create_tables(conn, int(key), int(dimensions), settings)
    return len(rows)


def insert(conn: Connection[Any], key: int, rows: Sequence[tuple[int, bytes]]) -> None:
    """Writes (chunk id, float32 bytes) pairs onto the vector store's chunks, which exist."""
    with _cursor(conn) as cursor:
        cursor.executemany(
            "UPDATE chunks SET embedding = %s::vector"
            f" WHERE id = %s AND vector_store_id = {key:d}".encode(),
            [(Vector(blob), chunk) for chunk, blob in rows],
        )


def insert_windows(conn: Connection[Any], key: int, rows: Sequence[tuple[int, int, bytes]]) -> None:
    """Writes (chunk id, window index, float32 bytes) of long chunks' windows 1..
    (windows.py); deleting a chunk deletes them (ON DELETE CASCADE)."""
    with _cursor(conn) as cursor:
        cursor.executemany(
            "INSERT INTO chunk_windows (chunk_id, window_index, vector_store_id, embedding)"
            " VALUES (%s, %s, %s, %s::vector)",
            [(chunk, window, key, Vector(blob)) for chunk, window, blob in rows],
        )


def delete(conn: Connection[Any], key: int, ids: Sequence[int]) -> None:
    """Nothing: a chunk's vector is a column of its row, deleted with it."""


# ------------------------------------------------------------------------------------ search


def ef_search(k: int, rows: int, settings: VectorSettings) -> int:
    """hnsw.ef_search for the k nearest among `rows` vectors (VectorSettings says why)."""
    scale = 1 if rows <= settings.large_rows else 2 if rows <= 4 * settings.large_rows else 4
    return min(MAX_EF_SEARCH, max(settings.min_ef, settings.ef_per_k * k) * scale)


def nearest_ids(
    conn: Connection[Any],
    key: int,
    query: bytes,
    k: int,
    *,
    dimensions: int,
    rows: int,
    files: Sequence[str] | None = None,
    exact: bool = False,
    settings: VectorSettings | None = None,
) -> Hits:
    """The k chunks nearest to `query` (float32 bytes of the vector store's dimensions) by
    cosine distance, as (chunk id, distance as float32) ordered by (distance, chunk id), inside
    the caller's transaction (hnsw.* are set for its own statement only).

    `rows` is the vector store's chunk count. `files` (the completed files a compiled filter
    allows: filters.matching_files) restricts the search to their chunks, never losing one
    of them to the index: a search that gets fewer than it should from the index goes exact.
    `exact` scans every (allowed) row; small vector stores and narrow filters always are.
    """
    settings = settings or VectorSettings()
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be 1..{MAX_K}, got {k}")
    if files is not None and not files:
        return []
    params: dict[str, object] = {"query": Vector(query), "k": k, "files": files}
    indexed = dimensions <= HNSW_MAX_DIMENSIONS and rows > settings.exact_rows and not exact
    if files is None:
        wanted = min(k, rows)
        if indexed:
            found = _indexed(conn, key, dimensions, params, ef_search(k, rows, settings), k, None)
            if len(found) >= wanted:
                return found
        return _exact(conn, key, params)
    found_rows = _run(
        conn,
        f"SELECT count(*) FROM chunks WHERE vector_store_id = {key:d} AND file_id = ANY(%s)",
        [list(files)],
    )
    matches = int(found_rows[0][0])
    if matches == 0:
        return []
    if indexed and matches > settings.exact_filtered_max:
        candidates = ef_search(k, rows, settings)
        # The index yields the allowed rows at about matches / rows of its pace.
        tuples = settings.scan_tuples_per_candidate * candidates * rows // matches
        scan = max(settings.min_scan_tuples, tuples)
        found = _indexed(conn, key, dimensions, params, candidates, k, scan)
        if len(found) >= min(k, matches):
            return found
    return _exact(conn, key, params)


def _settings(conn: Connection[Any], values: Mapping[str, object]) -> None:
    """SET LOCAL for each, in one statement: set_config(..., true) takes bound parameters."""
    calls = ", ".join(["set_config(%s, %s, true)"] * len(values))
    _run(conn, f"SELECT {calls}", [part for pair in values.items() for part in map(str, pair)])


def _filter(filtered: bool) -> str:
    return " AND file_id = ANY(%(files)s)" if filtered else ""


def _indexed(
    conn: Connection[Any],
    key: int,
    dimensions: int,
    params: dict[str, object],
    candidates: int,
    k: int,
    scan: int | None,
) -> Hits:
    """The index's `candidates` nearest (iterative scan, re-sorted, when filtered or when k
    needs more than MAX_EF_SEARCH), rescored with the float32 vectors."""
    ef = min(candidates, MAX_EF_SEARCH)
    candidates = max(candidates, k)
    # The vector store's count (not the planner's statistics, stale after a large load)
    # chose this path: no sort of every row instead of the index.
    changes: dict[str, object] = {"hnsw.ef_search": ef, "enable_sort": "off"}
    if scan is not None or candidates > ef:
        changes["hnsw.iterative_scan"] = "relaxed_order"
        changes["hnsw.max_scan_tuples"] = scan or 20_000 + candidates
    else:
        changes["hnsw.iterative_scan"] = "off"
    sql = _indexed_sql(key, dimensions, params["files"] is not None)
    # In a savepoint rolled back after the read: the settings end with this statement, not
    # with the caller's transaction (a hybrid search's other statements plan as usual).
    with conn.transaction(force_rollback=True):
        _settings(conn, changes)
        return _hits(_run(conn, sql, {**params, "candidates": candidates}))


def _indexed_sql(key: int, dimensions: int, filtered: bool) -> str:
    half = f"halfvec({dimensions:d})"
    return f"""
    SELECT id, (embedding <=> %(query)s::vector)::real AS d FROM (
        SELECT id, embedding FROM chunks
        WHERE vector_store_id = {key:d} AND embedding IS NOT NULL{_filter(filtered)}
        ORDER BY embedding::{half} <=> %(query)s::vector::{half}
        LIMIT %(candidates)s
    ) AS cand
    ORDER BY d, id LIMIT %(k)s
    """


def _exact(conn: Connection[Any], key: int, params: Mapping[str, object]) -> Hits:
    # The ORDER BY is not the index's expression: the planner cannot take the HNSW index.
    sql = f"""
    SELECT id, (embedding <=> %(query)s::vector)::real AS d FROM chunks
    WHERE vector_store_id = {key:d} AND embedding IS NOT NULL{_filter(params["files"] is not None)}
    ORDER BY d, id LIMIT %(k)s
    """
    return _hits(_run(conn, sql, params))


def distances(conn: Connection[Any], key: int, query: bytes, ids: Sequence[int]) -> Hits:
    """The cosine distance (float32) of `query` to each of these chunks' vectors (those that
    have one): the exact score of a candidate another ranking found."""
    if not ids:
        return []
    sql = f"""
    SELECT id, (embedding <=> %s::vector)::real FROM chunks
    WHERE id = ANY(%s) AND vector_store_id = {key:d} AND embedding IS NOT NULL
    """
    return _hits(_run(conn, sql, [Vector(query), list(ids)]))


def window_distances(
    conn: Connection[Any],
    key: int,
    query: bytes,
    *,
    files: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
) -> Hits:
    """Each chunk's smallest cosine distance (float32) to `query` over its windows 1..
    (windows.py), for the chunks that have some (of `files`, of `ids`): an exact scan of the
    vector store's windows, which only long chunks have."""
    if (ids is not None and not ids) or (files is not None and not files):
        return []
    sql = (
        "SELECT chunk_id, min((embedding <=> %(query)s::vector)::real) FROM chunk_windows"
        f" WHERE vector_store_id = {key:d}"
    )
    if ids is not None:
        sql += " AND chunk_id = ANY(%(ids)s)"
    if files is not None:
        sql += (
            f" AND chunk_id IN (SELECT id FROM chunks WHERE vector_store_id = {key:d}"
            " AND file_id = ANY(%(files)s))"
        )
    params = {
        "query": Vector(query),
        "ids": None if ids is None else list(ids),
        "files": None if files is None else list(files),
    }
    return _hits(_run(conn, sql + " GROUP BY chunk_id", params))


def _hits(rows: Sequence[Sequence[object]]) -> Hits:
    return [(cast(int, row[0]), float(cast(float, row[1]))) for row in rows]
