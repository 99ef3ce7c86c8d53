"""Issue 31: the PostgreSQL engine's own search modules (services/store/postgres/vectors.py and
fulltext.py) on one vector store, against exact rankings in the same run.

    python -m bench.pg_search --rows 100000 --snippets /work/data/bench-cache
    python -m bench.pg_search --rows 1000000 --snippets /work/data/bench-cache \
        --baseline-queries 10

Data: bench/pg_layouts.py's (the benchmarks' real MiniLM vectors of man-page snippets, the
rest of the rows mixes of two, each with a ~180-word chunk text; the last 100 snippets held
out as the queries), all in one vector store, ten chunks a file. The tables are the engine's
columns (vectors.DDL, fulltext.DDL) on the tests' minimal `chunks` and `vector_stores`.

Vectors: `nearest_ids` through the partial halfvec HNSW index, rescored in float32, at k 10
and 50, unfiltered and with a file filter keeping 10% (iterative scan) and 2% (exact over the
files) of the chunks; recall@k against numpy's exact cosine over the same rows, and
PostgreSQL's exact scan (`exact=True`) as the baseline of the same run. Full text: `rank` at
k 50 with the store's query words (query_words), bounded (max_candidates) against bm25 over
every match (unbounded): latency, chunks scored, and how many of the unbounded top 10 the
bounded ranking keeps. `--skip-vectors`: full text only (no HNSW build, no vector searches).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psycopg

from bench.pg_layouts import _material, _server
from bench.stats import median, percentile, recall_at_k, share_kept
from bench.vectors import long_text
from services.common.vectors import FloatMatrix
from services.store.postgres import fulltext, vectors
from services.store.postgres.fulltext import FullTextSettings
from services.store.search.lexical import query_words
from tests import pg_tables

KEY = 1
PER_FILE = 10
UNBOUNDED = FullTextSettings(max_candidates=10**9)
T = TypeVar("T")
# Bounds on the chunks a lexical search scores (FullTextSettings.max_candidates).
CAPS = (1000, 2000, 5000)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--snippets", type=Path, default=Path("bench/results/cache"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/pg-search"))
    parser.add_argument(
        "--toast-target",
        type=int,
        default=0,
        help="chunks' toast_tuple_target before the load (0: PostgreSQL's 2032 bytes)",
    )
    parser.add_argument(
        "--baseline-queries",
        type=int,
        default=0,
        help="the exact scans and unbounded bm25 on only the first N queries (0: all); at 1M"
        " each such search takes seconds",
    )
    parser.add_argument(
        "--skip-vectors", action="store_true", help="full text only: no HNSW, no vector searches"
    )
    args = parser.parse_args(argv)
    data, queries, query_texts = _material(args.snippets, args.rows)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"rows": args.rows, "load_before": os.getloadavg()}
    with _server(args.out / f"pgdata-{args.rows}") as server:
        url = server.url(server.create_database())
        with psycopg.connect(url, autocommit=True) as conn:
            texts = [long_text(row, data) for row in range(data.size)]
            results["load"] = _load(
                conn, data.vectors, texts, args.toast_target, index=not args.skip_vectors
            )
            print(json.dumps(results, indent=1), flush=True)
            baseline = args.baseline_queries or len(queries)
            results["baseline_queries"] = baseline
            if not args.skip_vectors:
                results["vectors"] = _vector_runs(conn, data.vectors, queries, baseline)
                print(json.dumps(results["vectors"], indent=1), flush=True)
            results["fulltext"] = _fulltext_runs(conn, query_texts, baseline)
    results["load_after"] = os.getloadavg()
    (args.out / f"search-{args.rows}.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


def _literal(vector: FloatMatrix) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _load(
    conn: psycopg.Connection[Any],
    matrix: FloatMatrix,
    texts: list[str],
    toast_target: int,
    index: bool = True,
) -> dict[str, Any]:
    for statement in [*pg_tables.TABLES, *vectors.DDL, *fulltext.DDL]:
        conn.execute(statement.encode())
    if toast_target:
        conn.execute(f"ALTER TABLE chunks SET (toast_tuple_target = {toast_target:d})".encode())
    pg_tables.add_store(conn, KEY, matrix.shape[1])
    began = time.perf_counter()
    with (
        conn.cursor() as cursor,
        cursor.copy(
            "COPY chunks (vector_store_id, file_id, chunk_index, text, embedding) FROM STDIN"
        ) as copy,
    ):
        for row, text in enumerate(texts):
            file_row = (KEY, f"file-{row // PER_FILE}", row % PER_FILE, text)
            copy.write_row((*file_row, _literal(matrix[row])))
    copied = time.perf_counter() - began
    conn.execute(
        "UPDATE vector_stores SET chunk_count = %s, fulltext_words ="
        " (SELECT sum(words_length) FROM chunks WHERE vector_store_id = %s) WHERE id = %s",
        [len(texts), KEY, KEY],
    )
    began = time.perf_counter()
    with conn.transaction():
        if index:
            vectors.create_tables(conn, KEY, matrix.shape[1])
    built = time.perf_counter() - began
    conn.execute("VACUUM ANALYZE chunks")
    ids = conn.execute("SELECT min(id), max(id) FROM chunks").fetchone()
    assert ids == (1, len(texts)), ids  # chunk id = row + 1 below

    def size(relation: str) -> int:
        row = conn.execute("SELECT pg_total_relation_size(%s)", [relation]).fetchone()
        return int(row[0]) if row else 0

    heap = conn.execute("SELECT pg_relation_size('chunks')").fetchone()
    return {
        "copy_rows_per_s": len(texts) / copied,
        "hnsw_build_s": built,
        "hnsw_bytes_per_row": size(vectors.index_name(KEY)) / len(texts) if index else 0.0,
        "gin_bytes_per_row": size("chunks_words") / len(texts),
        "table_bytes_per_row": size("chunks") / len(texts),
        "heap_bytes_per_row": int(heap[0]) / len(texts) if heap else 0.0,
    }


def _exact(
    matrix: FloatMatrix, query: FloatMatrix, k: int, allowed: np.ndarray | None
) -> list[int]:
    distance = (1.0 - (matrix @ query) / np.linalg.norm(matrix, axis=1)).astype(np.float32)
    rows = np.arange(matrix.shape[0]) if allowed is None else allowed
    order = np.lexsort((rows, distance[rows]))[:k]
    return [int(rows[i]) + 1 for i in order]


def _timed(
    conn: psycopg.Connection[Any], call: Callable[[Any], T], items: Sequence[Any], warm: int = 10
) -> tuple[list[float], list[T]]:
    """Each call in its own read transaction, after the first `warm` once untimed (the index
    and the rows into the buffer cache)."""
    for item in items[:warm]:
        with conn.transaction():
            call(item)
    latencies, found = [], []
    for item in items:
        began = time.perf_counter()
        with conn.transaction():
            found.append(call(item))
        latencies.append(time.perf_counter() - began)
    return latencies, found


def _summary(latencies: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": 1000 * median(latencies), "p95_ms": 1000 * percentile(latencies, 95)}


def _vector_runs(
    conn: psycopg.Connection[Any], matrix: FloatMatrix, queries: FloatMatrix, baseline: int
) -> dict[str, Any]:
    rows, dims = matrix.shape
    files = rows // PER_FILE
    out: dict[str, Any] = {}
    for name, every in (("all", None), ("filter_10pct", 10), ("filter_2pct", 50)):
        kept = None if every is None else [f"file-{n}" for n in range(0, files, every)]
        allowed = (
            None if every is None else np.flatnonzero((np.arange(rows) // PER_FILE) % every == 0)
        )
        for k in (10, 50):
            truth = [_exact(matrix, q, k, allowed) for q in queries]
            for exact in (False, True):

                def search(
                    query: FloatMatrix, k: int = k, exact: bool = exact, kept: Any = kept
                ) -> list[int]:
                    hits = vectors.nearest_ids(
                        conn,
                        KEY,
                        query.astype("<f4").tobytes(),
                        k,
                        dimensions=dims,
                        rows=rows,
                        files=kept,
                        exact=exact,
                    )
                    return [chunk for chunk, _ in hits]

                asked = list(queries[:baseline] if exact else queries)
                latencies, found = _timed(conn, search, asked, 2 if exact else 10)
                label = f"{name}_k{k}_{'exact' if exact else 'default'}"
                out[label] = {
                    **_summary(latencies),
                    "recall": recall_at_k(found, truth[: len(found)], k),
                    "queries": len(found),
                }
                print(label, out[label], flush=True)
    return out


def _fulltext_runs(
    conn: psycopg.Connection[Any], texts: Sequence[str], baseline: int
) -> dict[str, Any]:
    words = [query_words(text) for text in texts]
    out: dict[str, Any] = {"words_p50": median([len(w) for w in words])}
    # Unbounded first: the truth every bound is compared with.
    truth: list[list[int]] = []
    for cap in (None, *CAPS):
        settings = UNBOUNDED if cap is None else FullTextSettings(max_candidates=cap)

        def search(query: list[str], settings: FullTextSettings = settings) -> fulltext.Ranking:
            return fulltext.rank(conn, KEY, query, 50, settings=settings)

        asked = words[:baseline] if cap is None else words
        latencies, found = _timed(conn, search, asked, 2 if cap is None else 10)
        top = [[chunk for chunk, _ in ranking.hits[:10]] for ranking in found]
        if cap is None:
            truth = top
        label = "unbounded" if cap is None else f"cap_{cap}"
        out[label] = {
            **_summary(latencies),
            "scored_p50": median([r.scored for r in found]),
            "exact_share": sum(r.exact for r in found) / len(found),
            "queries": len(found),
            # Of the unbounded top 10 (or fewer, when fewer chunks match), the share kept,
            # over the queries the unbounded run asked.
            "kept_top10": share_kept(top[: len(truth)], truth, 10),
        }
        print(label, out[label], flush=True)
    return out


if __name__ == "__main__":
    main()
