"""Scenario 12, PostgreSQL without pgvector (issue 19's design note, option b): what can be
measured here of a PostgreSQL storage engine for ragd's chunks, on the data sets of scenario
11. Debian 12's archive has PostgreSQL 15 but not pgvector, so vector search is not measured;
the write path, the disk per chunk and full-text search are: chunks with their float32
vectors (bytea) and a GIN index over their words, loaded by COPY in transactions of
load_batch rows (AddChunks' batches), then the held-out queries as OR-of-words full-text
searches ranked by ts_rank (ragd's lexical mode ranks by bm25 the same way).

Needs PostgreSQL's server binaries (Debian's postgresql package) and psycopg; skipped with a
note where either is missing. Optional: `--only postgres --limits-sizes 100000,1000000`.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.context import Context, timed
from bench.search import full_text, material
from bench.stats import Row, median, percentile
from bench.vectors import DataSet, data_set
from services.common.vectors import to_bytes

SCENARIO = "12 postgres"
_SCHEMA = """
CREATE TABLE chunks (
    id bigint PRIMARY KEY,
    vector_store_id integer NOT NULL,
    file_id text NOT NULL,
    text text NOT NULL,
    vector bytea NOT NULL,
    words tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX chunks_vector_store ON chunks (vector_store_id, file_id);
CREATE INDEX chunks_words ON chunks USING gin (words);
"""
_SEARCH = """
SELECT id, ts_rank(words, query) AS rank
FROM chunks, to_tsquery('english', %s) AS query
WHERE vector_store_id = 1 AND words @@ query
ORDER BY rank DESC LIMIT %s
"""
_WORD = re.compile(r"[A-Za-z0-9]+")


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


@contextmanager
def _server(bin_dir: Path) -> Iterator[tuple[str, Path]]:
    """A throwaway PostgreSQL on a Unix socket (trust auth), run as the postgres user when
    this is root (initdb refuses root); yields the psycopg connection string and data dir."""
    root = Path(tempfile.mkdtemp(prefix="ragd-pg-", dir="/var/tmp"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    as_user: list[str] = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
    subprocess.run(
        [*as_user, str(bin_dir / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    server = subprocess.Popen(
        [
            *as_user,
            str(bin_dir / "postgres"),
            "-D",
            str(data),
            "-k",
            str(sockets),
            "-c",
            "listen_addresses=",
            "-c",
            "shared_buffers=1GB",
            "-c",
            "max_wal_size=4GB",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        dsn = f"host={sockets} user=postgres dbname=postgres"
        _wait(dsn)
        yield dsn, data
    finally:
        server.terminate()
        server.wait(60)
        shutil.rmtree(root, ignore_errors=True)


def _wait(dsn: str, timeout: float = 60.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(dsn).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run(ctx: Context) -> None:
    bin_dir = _binaries()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        bin_dir = None
    if bin_dir is None:
        ctx.log("postgres: skipped (needs Debian's postgresql package and psycopg)")
        return
    config = ctx.config
    found = material(ctx, max(config.limits_sizes))
    detail = ctx.detail(SCENARIO)
    for size in sorted(config.limits_sizes):
        data = data_set(found.vectors, found.texts, size)
        with timed(ctx, f"postgres: {size} chunks"), _server(bin_dir) as (dsn, directory):
            figures = _one_size(ctx, dsn, directory, data, found.query_texts)
        detail[str(size)] = figures
        _rows(ctx, size, figures)


def _one_size(
    ctx: Context, dsn: str, directory: Path, data: DataSet, query_texts: Sequence[str]
) -> dict[str, Any]:
    import psycopg

    batch = ctx.config.load_batch
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_SCHEMA)
        began = time.perf_counter()
        for start in range(0, data.size, batch):
            stop = min(start + batch, data.size)
            with (
                conn.transaction(),
                conn.cursor() as cursor,
                cursor.copy(
                    "COPY chunks (id, vector_store_id, file_id, text, vector) FROM STDIN"
                ) as copy,
            ):
                for row in range(start, stop):
                    text = full_text(row, data)
                    vector = to_bytes(data.vectors[row : row + 1])
                    copy.write_row((row, 1, f"file-{start:08d}", text, vector))
        load_rate = data.size / (time.perf_counter() - began)
        conn.execute("CHECKPOINT")
        conn.execute("VACUUM ANALYZE chunks")
        relation = conn.execute("SELECT pg_total_relation_size('chunks')").fetchone()
        latencies = []
        for text in query_texts:
            words = sorted({w.lower() for w in _WORD.findall(text)}, key=len, reverse=True)[:16]
            began = time.perf_counter()
            conn.execute(_SEARCH, (" | ".join(words) or "nothing", ctx.config.k)).fetchall()
            latencies.append(time.perf_counter() - began)
    return {
        "chunks": data.size,
        "load_chunks_per_s": load_rate,
        "relation_bytes": relation[0] if relation else 0,
        "data_dir_bytes": sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()),
        "fts_p50_ms": 1000 * median(latencies),
        "fts_p95_ms": 1000 * percentile(latencies, 95),
    }


def _rows(ctx: Context, size: int, f: dict[str, Any]) -> None:
    label = f"{size:,} chunks"
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: COPY load, chunks with vectors and a GIN word index",
            f["load_chunks_per_s"],
            "chunks/s",
            note=f"transactions of {ctx.config.load_batch} rows",
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
            f"{label}: full-text search p50 (ts_rank over the GIN index)",
            f["fts_p50_ms"],
            "ms",
            note=f"p95 {f['fts_p95_ms']:.1f} ms; vector search needs pgvector, not measured",
        )
    )
