"""Prototype: coarse (binary-quantized) KNN with exact float rescoring for the store.

Works with the sqlite-vec 0.1.9 wheel (no pre-release needed) and unchanged with 0.1.10a4.

Layout per collection (key = collections.id, rowid = chunks.id everywhere):

- vec_<key>  (unchanged) vec0 float[D] distance_metric=cosine: sqlite-vec's brute-force scan,
  the exact path for small collections and the fallback.
- vecf_<key> (new) plain rowid table of the same float32 blobs. Rescoring and selective
  filters fetch vectors by rowid, and a vec0 point lookup costs ~50-100x a B-tree lookup
  (400 lookups: ~36 ms from vec0 vs ~0.8 ms from a plain table, measured), so the floats are
  kept a second time where a rowid lookup is cheap (+1.5 KiB a row at D=384).
- vecq_<key> (new) vec0 bit[D] with a partition key part = rowid % PARTITIONS: one sign bit
  per dimension (vec_quantize_binary), 48 bytes a row at D=384 (1/32 of the floats).

Why partitions: sqlite-vec (0.1.9 and 0.1.10a4 alike) picks a KNN's top k in each 1024-slot
chunk with a selection pass costing O(k * chunk size), so one bit KNN with k = 400 over 100k
rows costs 51 ms, as much as the float scan it should replace. Splitting rows into P partitions
by rowid (not by content) and asking each for ceil(1.5 * C / P) rows divides that cost by
~P / 1.5 while the union still holds the global hamming top C with high probability (measured:
same recall as a flat top C). Rowid-modulo partitions need no training or rebalancing.

Search (nearest_ids):
- no coarse table (D not a multiple of 8, or not built yet), fewer than COARSE_MIN_ROWS rows,
  or k * OVERSAMPLE > MAX_CANDIDATES: exact (sqlite-vec's float KNN, with rowid IN for filters);
- unfiltered: per-partition hamming KNN, union, exact cosine over those rows' floats, top k;
- filtered, matching m of n rows: one filter evaluation counts m. If the pool C * n / m fits
  MAX_POOL, post-filter: unfiltered coarse KNN for that pool, the filter tested per candidate
  (primary-key lookups), rescored; accepted when at least C candidates survive (then it is the
  same candidate set a pre-filtered coarse KNN of size C would give). Otherwise, or when too
  few survive: m <= EXACT_IDS_MAX -> exact cosine over the matching rows fetched by rowid;
  larger m -> every partition's KNN pre-filtered by its own matching rowids, then rescored.
  Rows outside the filter never appear and rows inside it are never dropped by the filter.

Results are (rowid, cosine distance) pairs ordered by (distance, rowid), exactly what the
current search SQL's `knn` CTE yields, so the join to chunks/files is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import apsw
import numpy as np
import numpy.typing as npt

FloatVector = npt.NDArray[np.float32]

# sqlite-vec's limit on k in a KNN query.
MAX_K = 4096
# Below this many rows the exact float scan is fast enough (0.8 ms per 1k rows on 0.1.9: <= 13 ms).
COARSE_MIN_ROWS = 16_384
# Coarse candidates C = max(MIN_CANDIDATES, k * OVERSAMPLE); each partition returns
# ceil(SLACK * C / PARTITIONS) (at least k), so 640 rows are rescored for k = 10: recall@10
# 0.9955 on the real 100k set at ~10 ms (see the report).
OVERSAMPLE = 40
MIN_CANDIDATES = 400
# Above this many candidates the coarse path stops paying off: search exactly.
MAX_CANDIDATES = 2048
PARTITIONS = 64
# Per-partition k = ceil(SLACK * candidates / PARTITIONS): absorbs uneven spread of the global
# top candidates over the partitions.
SLACK = 1.5
# A filter matching a fraction f of the rows is post-filtered from a pool of C / f coarse
# candidates when that pool is at most MAX_POOL (f >= 10% at C = 400: ~11-27 ms at 100k);
# otherwise a filter matching at most EXACT_IDS_MAX rows is searched exactly over its rows
# (~3 us a match), and a larger one pre-filters each partition's KNN by its matching rowids.
MAX_POOL = 4000
EXACT_IDS_MAX = 10_000


def vec_table(key: int) -> str:
    if not isinstance(key, int) or isinstance(key, bool) or key <= 0:
        raise ValueError(f"collection key must be a positive integer, got {key!r}")
    return f"vec_{key:d}"


def coarse_table(key: int) -> str:
    return f"vecq_{vec_table(key)[4:]}"


def float_table(key: int) -> str:
    return f"vecf_{vec_table(key)[4:]}"


# ------------------------------------------------------------------------------------ schema


def create_vector_tables(conn: apsw.Connection, key: int, dimensions: int) -> None:
    """DDL for a new collection (inside the caller's transaction)."""
    conn.execute(
        f"CREATE VIRTUAL TABLE {vec_table(key)} "
        f"USING vec0(embedding float[{dimensions:d}] distance_metric=cosine)"
    )
    if dimensions % 8 == 0:
        _create_coarse(conn, key, dimensions)


def _create_coarse(conn: apsw.Connection, key: int, dimensions: int) -> None:
    conn.execute(
        f"CREATE TABLE {float_table(key)} (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL) STRICT"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE {coarse_table(key)} "
        f"USING vec0(part integer partition key, embedding bit[{dimensions:d}])"
    )


def has_coarse(conn: apsw.Connection, key: int) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (coarse_table(key),)
    ).fetchone()
    return row is not None


def insert_vectors(conn: apsw.Connection, key: int, rows: Sequence[tuple[int, bytes]]) -> None:
    """Ingestion: writes each (chunk id, float32 blob) to both tables, in the caller's txn."""
    conn.executemany(f"INSERT INTO {vec_table(key)} (rowid, embedding) VALUES (?, ?)", rows)
    if has_coarse(conn, key):
        conn.executemany(f"INSERT INTO {float_table(key)} (id, embedding) VALUES (?, ?)", rows)
        conn.executemany(
            f"INSERT INTO {coarse_table(key)} (rowid, part, embedding)"
            f" VALUES (?1, ?1 % {PARTITIONS:d}, vec_quantize_binary(?2))",
            rows,
        )


def delete_vectors(conn: apsw.Connection, key: int, ids: Sequence[int]) -> None:
    params = [(i,) for i in ids]
    conn.executemany(f"DELETE FROM {vec_table(key)} WHERE rowid = ?", params)
    if has_coarse(conn, key):
        conn.executemany(f"DELETE FROM {float_table(key)} WHERE id = ?", params)
        conn.executemany(f"DELETE FROM {coarse_table(key)} WHERE rowid = ?", params)


def drop_vector_tables(conn: apsw.Connection, key: int) -> None:
    conn.execute(f"DROP TABLE {vec_table(key)}")
    conn.execute(f"DROP TABLE IF EXISTS {coarse_table(key)}")
    conn.execute(f"DROP TABLE IF EXISTS {float_table(key)}")


def migrate_add_coarse(conn: apsw.Connection) -> None:
    """Migration step: a coarse table for every existing collection (one transaction)."""
    for row in conn.execute("SELECT id, dimensions FROM collections").fetchall():
        key, dimensions = cast(tuple[int, int], row)
        if dimensions % 8 != 0 or has_coarse(conn, key):
            continue
        _create_coarse(conn, key, dimensions)
        # One pass over vec0 (its full scan is the slow part), then two inserts from the copy.
        conn.execute(
            f"INSERT INTO {float_table(key)} (id, embedding)"
            f" SELECT rowid, embedding FROM {vec_table(key)}"
        )
        conn.execute(
            f"INSERT INTO {coarse_table(key)} (rowid, part, embedding)"
            f" SELECT id, id % {PARTITIONS:d}, vec_quantize_binary(embedding)"
            f" FROM {float_table(key)}"
        )


# ------------------------------------------------------------------------------------ search
#
# A filter arrives as the store's compiled subquery: SQL yielding allowed rowids, with
# positional `?` parameters (as services/store/filters.py compiles them). Every statement below
# puts the filter first, so binding is positional in textual order.

Hits = list[tuple[int, float]]


def _hits(rows: Sequence[Sequence[object]]) -> Hits:
    """(rowid, distance) pairs from rows whose first two columns are those."""
    return [(cast(int, row[0]), cast(float, row[1])) for row in rows]


def _row_count(conn: apsw.Connection, key: int) -> int:
    # The store has collections.chunk_count; this prototype counts vec0's rowid shadow table.
    row = conn.execute(f"SELECT count(*) FROM {vec_table(key)}_rowids").fetchone()
    return cast(int, row[0]) if row else 0


def _exact(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    k: int,
    allowed: tuple[str, Sequence[object]] | None,
) -> Hits:
    """sqlite-vec's brute-force float KNN, restricted by the filter (pre-filter) if any."""
    if allowed is None:
        sql = f"SELECT rowid, distance FROM {vec_table(key)} WHERE embedding MATCH ? AND k = ?"
        params: list[object] = [query, k]
    else:
        sql = (
            f"WITH allowed(id) AS MATERIALIZED ({allowed[0]})"
            f" SELECT rowid, distance FROM {vec_table(key)}"
            " WHERE embedding MATCH ? AND k = ? AND rowid IN (SELECT id FROM allowed)"
        )
        params = [*allowed[1], query, k]
    rows = conn.execute(sql, params).fetchall()
    return sorted(_hits(rows), key=lambda h: (h[1], h[0]))


def _exact_over_ids(
    conn: apsw.Connection, key: int, query: bytes, k: int, allowed: tuple[str, Sequence[object]]
) -> Hits:
    """Exact cosine over the few rows a selective filter matches, fetched by rowid: the cost
    follows the matches, not the collection."""
    sql = f"""
    WITH allowed(id) AS MATERIALIZED ({allowed[0]})
    SELECT v.id, vec_distance_cosine(v.embedding, ?) AS d
    FROM allowed JOIN {float_table(key)} AS v ON v.id = allowed.id
    ORDER BY d, v.id LIMIT ?
    """
    rows = conn.execute(sql, [*allowed[1], query, k]).fetchall()
    return _hits(rows)


def _coarse_rescored(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    k: int,
    candidates: int,
    allowed: tuple[str, Sequence[object]] | None,
) -> Hits:
    """Hamming KNN in every partition (pre-filtered), then exact cosine over the union."""
    per_part = max(k, math.ceil(SLACK * candidates / PARTITIONS))
    # Each partition gets only its own matching rowids: sqlite-vec copies and sorts the IN
    # list per KNN, so one shared list would be copied PARTITIONS times.
    restrict = ""
    if allowed is not None:
        restrict = " AND rowid IN (SELECT id FROM allowed WHERE part = ?)"
    arm = (
        f"SELECT * FROM (SELECT rowid AS id FROM {coarse_table(key)}"
        f" WHERE embedding MATCH vec_quantize_binary(?) AND k = ? AND part = ?{restrict})"
    )
    params: list[object] = list(allowed[1]) if allowed is not None else []
    for part in range(PARTITIONS):
        params += [query, per_part, part] + ([part] if allowed is not None else [])
    params += [query, k]
    prefix = (
        f"allowed(id, part) AS MATERIALIZED (SELECT id, id % {PARTITIONS:d} FROM ({allowed[0]})), "
        if allowed is not None
        else ""
    )
    sql = f"""
    WITH {prefix}cand(id) AS MATERIALIZED ({" UNION ALL ".join([arm] * PARTITIONS)})
    SELECT v.id, vec_distance_cosine(v.embedding, ?) AS d
    FROM cand JOIN {float_table(key)} AS v ON v.id = cand.id
    ORDER BY d, v.id LIMIT ?
    """
    rows = conn.execute(sql, params).fetchall()
    return _hits(rows)


def _coarse_postfiltered(
    conn: apsw.Connection,
    key: int,
    query: bytes,
    k: int,
    pool: int,
    allowed: tuple[str, Sequence[object]],
) -> tuple[Hits, int]:
    """Unfiltered partitioned hamming KNN for `pool` candidates, the filter tested on each
    candidate (EXISTS over the filter subquery: SQLite pushes `a.id = cand.id` down into it,
    so the test is a primary-key lookup, not a scan of the matches), then exact cosine over
    the survivors. Returns the hits and the number of survivors.

    The survivors are exactly the allowed rows nearest in hamming distance (those within the
    pool's hamming radius), i.e. the same set a pre-filtered coarse KNN of that size yields,
    so enough survivors means the same recall as the unfiltered search."""
    per_part = max(k, math.ceil(SLACK * pool / PARTITIONS))
    arm = (
        f"SELECT * FROM (SELECT rowid AS id FROM {coarse_table(key)}"
        " WHERE embedding MATCH vec_quantize_binary(?) AND k = ? AND part = ?)"
    )
    params: list[object] = []
    for part in range(PARTITIONS):
        params += [query, per_part, part]
    params += [*allowed[1], query, k]
    sql = f"""
    WITH cand(id) AS MATERIALIZED ({" UNION ALL ".join([arm] * PARTITIONS)}),
    surv(id) AS MATERIALIZED (
        SELECT id FROM cand WHERE EXISTS (SELECT 1 FROM ({allowed[0]}) AS a WHERE a.id = cand.id)
    )
    SELECT v.id, vec_distance_cosine(v.embedding, ?) AS d, (SELECT count(*) FROM surv)
    FROM surv JOIN {float_table(key)} AS v ON v.id = surv.id
    ORDER BY d, v.id LIMIT ?
    """
    rows = conn.execute(sql, params).fetchall()
    survivors = cast(int, rows[0][2]) if rows else 0
    return _hits(rows), survivors


def nearest_ids(
    conn: apsw.Connection,
    key: int,
    query: FloatVector,
    k: int,
    *,
    allowed_sql: str | None = None,
    allowed_params: Sequence[object] = (),
    row_count: int | None = None,
) -> Hits:
    """The k rowids nearest to `query` by cosine distance, as (rowid, distance), ordered by
    (distance, rowid).

    `allowed_sql` is a subquery yielding the allowed rowids (one column) with positional
    parameters `allowed_params`. Filtering is always exact: rows outside it never appear, and
    rows inside it are never lost to a post-filter. Ranking is exact on the exact paths and
    approximate on the coarse path (recall@10 >= 0.98 measured on real embeddings). Call it
    inside one read transaction so the count and the search see the same snapshot.
    """
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be 1..{MAX_K}, got {k}")
    blob = np.ascontiguousarray(query, dtype="<f4").tobytes()
    allowed = (allowed_sql, allowed_params) if allowed_sql is not None else None
    n = _row_count(conn, key) if row_count is None else row_count
    candidates = max(MIN_CANDIDATES, k * OVERSAMPLE)
    coarse = has_coarse(conn, key)
    if allowed is None:
        if not coarse or n < COARSE_MIN_ROWS or candidates > MAX_CANDIDATES:
            return _exact(conn, key, blob, k, None)
        return _coarse_rescored(conn, key, blob, k, candidates, None)
    if not coarse:
        return _exact(conn, key, blob, k, allowed)
    # One evaluation of the filter to learn its selectivity; the store's filters are JSON tests
    # over collection_files joined to chunks, a few ms at 100k chunks.
    row = conn.execute(f"SELECT count(*) FROM ({allowed[0]})", list(allowed[1])).fetchone()
    matches = cast(int, row[0]) if row is not None else 0
    if matches == 0:
        return []
    pool = math.ceil(candidates * n / matches)
    if n >= COARSE_MIN_ROWS and candidates <= MAX_CANDIDATES and pool <= MAX_POOL:
        hits, survivors = _coarse_postfiltered(conn, key, blob, k, pool, allowed)
        # Fewer survivors than C: the filter avoids this query's neighbourhood; do not trust
        # the smaller candidate set.
        if survivors >= candidates:
            return hits
    if matches <= EXACT_IDS_MAX or n < COARSE_MIN_ROWS or candidates > MAX_CANDIDATES:
        return _exact_over_ids(conn, key, blob, k, allowed)
    return _coarse_rescored(conn, key, blob, k, candidates, allowed)
