"""Scenario 3, search latency and recall: REST and the store's gRPC against raw sqlite-vec KNN
in-process and an exact numpy scan, on real MiniLM vectors loaded through AddChunks.

Rows are identified across paths by their number, stored as the chunk text's "#<row>" prefix
(REST results carry text, not chunk ids). Recall@k is measured against the exact scan.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import apsw
import grpc
import httpx
import numpy as np
import sqlite_vec

from bench.context import Context, timed
from bench.load import LoadResult, http_session, post_json, run_load
from bench.processes import RunningStack, running_stack
from bench.stats import Row, median, not_available, percentile, recall_at_k
from bench.vectors import DataSet, data_set, real_vectors
from services.common.grpc_server import MAX_MESSAGE_BYTES
from services.common.vectors import FloatMatrix, to_bytes
from services.pb import embedder_pb2, embedder_pb2_grpc, store_pb2, store_pb2_grpc
from services.store.vector_index import IndexSettings

SCENARIO = "3 search"
# Issue 16: default REST search (one client) p50 and the vector ranking's recall@10 against
# the exact scan, by vector store size.
TARGET_P50_MS = {100_000: 12.0, 1_000_000: 40.0}
TARGET_RECALL = {100_000: 0.98, 1_000_000: 0.95}
# Issue 4: the store's own search (gRPC, one client) at 100k x 384.
TARGET_STORE_P50_MS = 20.0
TARGET_P50_SIZE = 100_000
_ROW = re.compile(r"#(\d+) ")
_WARM_UP_QUERIES = 5
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


@dataclass(frozen=True)
class Timings:
    """Per-query latencies (seconds) and the row numbers each query returned."""

    latencies: list[float]
    found: list[list[int]]

    @property
    def p50_ms(self) -> float:
        return 1000 * median(self.latencies)

    @property
    def p95_ms(self) -> float:
        return 1000 * percentile(self.latencies, 95)


def _rows_of(texts: Sequence[str]) -> list[int]:
    rows = []
    for text in texts:
        match = _ROW.match(text)
        if match is None:
            raise RuntimeError(f"a search hit without its row number: {text[:60]!r}")
        rows.append(int(match.group(1)))
    return rows


def exact(vectors: FloatMatrix, queries: FloatMatrix, k: int) -> Timings:
    """Brute-force cosine top-k (the vectors are unit length), one query at a time."""
    latencies, found = [], []
    for query in queries:
        began = time.perf_counter()
        scores = vectors @ query
        top = np.argpartition(-scores, k)[:k]
        ordered = top[np.argsort(-scores[top], kind="stable")]
        latencies.append(time.perf_counter() - began)
        found.append([int(i) for i in ordered])
    return Timings(latencies, found)


def raw_sqlite_vec(path: Path, data: DataSet, queries: FloatMatrix, k: int) -> Timings:
    """The same vectors in a bare vec0 table (float, cosine) in this process: the floor."""
    conn = apsw.Connection(str(path))
    try:
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        dims = data.vectors.shape[1]
        conn.execute(
            f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{dims:d}] distance_metric=cosine)"
        )
        with conn:
            conn.executemany(
                "INSERT INTO v (rowid, embedding) VALUES (?, ?)",
                ((row + 1, to_bytes(vector)) for row, vector in enumerate(data.vectors)),
            )
        sql = "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ? ORDER BY distance"
        for query in queries[:_WARM_UP_QUERIES]:
            conn.execute(sql, (to_bytes(query), k)).fetchall()
        latencies, found = [], []
        for query in queries:
            began = time.perf_counter()
            hits = conn.execute(sql, (to_bytes(query), k)).fetchall()
            latencies.append(time.perf_counter() - began)
            found.append([cast(int, hit[0]) - 1 for hit in hits])
        return Timings(latencies, found)
    finally:
        conn.close()
        path.unlink(missing_ok=True)


def _chunk_text(row: int, data: DataSet) -> str:
    return f"#{row} " + (data.texts[row] if row < data.real else "(derived)")


def full_text(row: int, data: DataSet) -> str:
    """Every row with a real snippet's text (derived rows repeat one): the full-text index and
    the disk hold what a store of real chunks would."""
    return f"#{row} " + data.texts[row % data.real]


def index_kind(vector_store: store_pb2.VectorStore) -> str | None:
    """The vector_store's search index as the store reports it (a field named like "index"),
    or None for a store that has no such field."""
    for descriptor in vector_store.DESCRIPTOR.fields:
        if "index" in descriptor.name:
            return f"{descriptor.name}={getattr(vector_store, descriptor.name)}"
    return None


def wait_for_index(
    target: str, store_id: str, timeout: float = 900.0, resident_timeout: float = 60.0
) -> tuple[str | None, float]:
    """Waits while the store builds the vector_store's coarse index and loads its vectors into
    memory in the background (at most `resident_timeout` for the latter: a store too large
    for its memory budget never loads them); returns the index it ends with and the seconds
    waited."""
    began = time.perf_counter()
    with grpc.insecure_channel(target) as channel:
        store = store_pb2_grpc.StoreStub(channel)
        while True:
            vector_store = store.GetVectorStore(
                store_pb2.GetVectorStoreRequest(id=store_id), timeout=60
            )
            index = index_kind(vector_store)
            waited = time.perf_counter() - began
            # A store too large for its memory budget stays out of memory: do not wait for it.
            loading = not getattr(vector_store, "in_memory", True) and waited < resident_timeout
            if (index is None or index.endswith("=coarse")) and not loading:
                return index, waited
            # "exact" a few seconds on: too small for a coarse index (the builder looks for
            # work every 2 s). A larger one is exact until the builder, which loads vectors
            # into memory first, starts its build: searched before it ends, the search would
            # share the cores with it (a core for minutes at 1M chunks).
            small = vector_store.chunk_count < IndexSettings().min_rows
            if index is not None and index.endswith("=exact") and small and waited > 5:
                return index, waited
            if waited > timeout:
                raise RuntimeError(f"the coarse index of {store_id} is still {index}")
            time.sleep(0.2)


def load(
    stack: RunningStack,
    data: DataSet,
    model: str,
    batch: int,
    text: Callable[[int, DataSet], str] = _chunk_text,
) -> tuple[str, float]:
    """A new vector store holding `data` (row i as chunk text "#i ..."), via AddChunks batches;
    returns its id and the load rate in vectors/s."""
    dims = int(data.vectors.shape[1])
    with grpc.insecure_channel(stack.store_target, options=_CHANNEL_OPTIONS) as channel:
        store = store_pb2_grpc.StoreStub(channel)
        vector_store = store.CreateVectorStore(
            store_pb2.CreateVectorStoreRequest(
                name=f"bench-{data.size}", model=model, dimensions=dims
            )
        )
        began = time.perf_counter()
        for start in range(0, data.size, batch):
            stop = min(start + batch, data.size)
            store.AddChunks(
                store_pb2.AddChunksRequest(
                    vector_store_id=vector_store.id,
                    file_id=f"file-bench-{start:08d}",
                    filename=f"rows-{start}-{stop - 1}.txt",
                    chunks=[
                        store_pb2.ChunkInput(text=text(row, data), token_count=0)
                        for row in range(start, stop)
                    ],
                    vectors=to_bytes(data.vectors[start:stop]),
                    dimensions=dims,
                    model=model,
                ),
                timeout=600,
            )
        return vector_store.id, data.size / (time.perf_counter() - began)


def via_rest(
    url: str, store_id: str, texts: Sequence[str], clients: int, k: int, mode: str | None = None
) -> Timings:
    """REST searches in the default mode (hybrid), or `mode`."""
    request: dict[str, Any] = {"max_num_results": k} | ({"mode": mode} if mode else {})

    def call(http: httpx.Client, text: str) -> list[int]:
        body = post_json(http, f"/v1/vector_stores/{store_id}/search", {**request, "query": text})
        data: Any = body["data"]
        return _rows_of([hit["content"][0]["text"] for hit in data])

    result: LoadResult[list[int]] = run_load(
        texts, clients, http_session(url), call, lambda http: http.close()
    )
    return Timings(result.latencies, result.results)


def via_grpc(
    target: str,
    store_id: str,
    model: str,
    queries: FloatMatrix,
    clients: int,
    k: int,
    exact: bool = False,
) -> Timings:
    """The store's own vector search, one query vector a call."""
    dims = int(queries.shape[1])

    def request(query: FloatMatrix) -> store_pb2.SearchRequest:
        return store_pb2.SearchRequest(
            vector_store_id=store_id,
            query_vector=to_bytes(query),
            dimensions=dims,
            k=k,
            model=model,
            exact=exact,
        )

    return _store_searches(target, [request(query) for query in queries], clients)


def via_grpc_lexical(
    target: str, store_id: str, texts: Sequence[str], clients: int, k: int, timeout: float = 60
) -> Timings:
    """The store's own lexical (bm25) search of each text."""
    requests = [
        store_pb2.SearchRequest(vector_store_id=store_id, mode="lexical", query_text=text, k=k)
        for text in texts
    ]
    return _store_searches(target, requests, clients, timeout)


def _store_searches(
    target: str, requests: Sequence[store_pb2.SearchRequest], clients: int, timeout: float = 60
) -> Timings:
    def session() -> tuple[grpc.Channel, store_pb2_grpc.StoreStub]:
        channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        return channel, store_pb2_grpc.StoreStub(channel)

    def call(
        own: tuple[grpc.Channel, store_pb2_grpc.StoreStub], request: store_pb2.SearchRequest
    ) -> list[int]:
        reply = own[1].Search(request, timeout=timeout)
        return _rows_of([hit.text for hit in reply.hits])

    result = run_load(requests, clients, session, call, lambda own: own[0].close())
    return Timings(result.latencies, result.results)


def gateway_split(
    stack: RunningStack,
    store_id: str,
    model: str,
    query_texts: Sequence[str],
    queries: FloatMatrix,
    k: int,
) -> dict[str, float]:
    """Per query, in turn: the query's Embed call alone (as a search's, on the interactive
    lane), the store's vector Search alone, and the REST vector search that does both.
    Interleaving keeps load drift out of the difference; the overhead is the median over
    queries of REST - Embed - Search, in ms."""
    dims = int(queries.shape[1])
    parts: dict[str, list[float]] = {"embed": [], "search": [], "rest": [], "overhead": []}
    with (
        grpc.insecure_channel(stack.embedder_target) as embedder_channel,
        grpc.insecure_channel(stack.store_target, options=_CHANNEL_OPTIONS) as store_channel,
        httpx.Client(base_url=stack.url, timeout=60.0) as http,
    ):
        embedder = embedder_pb2_grpc.EmbedderStub(embedder_channel)
        store = store_pb2_grpc.StoreStub(store_channel)
        for text, query in zip(query_texts, queries, strict=True):
            began = time.perf_counter()
            embedder.Embed(
                embedder_pb2.EmbedRequest(
                    texts=[text.encode()],
                    truncate=embedder_pb2.TRUNCATE_POLICY_TRUNCATE,
                    priority=embedder_pb2.PRIORITY_INTERACTIVE,
                ),
                timeout=60,
            )
            embedded = time.perf_counter()
            store.Search(
                store_pb2.SearchRequest(
                    vector_store_id=store_id,
                    query_vector=to_bytes(query),
                    dimensions=dims,
                    k=k,
                    model=model,
                ),
                timeout=60,
            )
            searched = time.perf_counter()
            post_json(
                http,
                f"/v1/vector_stores/{store_id}/search",
                {"query": text, "max_num_results": k, "mode": "vector"},
            )
            done = time.perf_counter()
            sample = (embedded - began, searched - embedded, done - searched)
            for name, seconds in zip(("embed", "search", "rest"), sample, strict=True):
                parts[name].append(1000 * seconds)
            parts["overhead"].append(1000 * (sample[2] - sample[0] - sample[1]))
    return {f"{name}_p50": median(values) for name, values in parts.items()}


def model_name(target: str) -> str:
    with grpc.insecure_channel(target) as channel:
        info = embedder_pb2_grpc.EmbedderStub(channel).Info(embedder_pb2.InfoRequest(), timeout=30)
    return str(info.model)


@dataclass(frozen=True)
class Material:
    """Real chunk texts with their vectors, and held-out query texts with theirs."""

    texts: list[str]
    vectors: FloatMatrix
    query_texts: list[str]
    queries: FloatMatrix


def material(ctx: Context, largest: int) -> Material:
    """Up to config.real_vectors man-page snippets embedded in process (cached), for data sets
    of up to `largest` vectors, and config.search_queries more as queries."""
    config = ctx.config
    real_count = min(config.real_vectors, largest)
    with timed(ctx, "snippets from man pages"):
        snippets = ctx.corpus.snippets(real_count + config.search_queries)
    model = ctx.model()
    # The last snippets are held out as queries: real text that is not in the data set.
    query_texts = snippets[real_count:]
    texts = snippets[:real_count]
    real = real_vectors(
        texts,
        lambda batch: model.embed(batch).vectors,
        config.cache_dir,
        model.info.digest,
        ctx.log,
    )
    queries = model.embed(query_texts, truncate=True).vectors
    return Material(texts, real, query_texts, queries)


def run(ctx: Context) -> None:
    config = ctx.config
    sizes = sorted(config.search_sizes)
    queries_count = config.search_queries
    found = material(ctx, max(sizes))
    texts, real, query_texts, queries = found.texts, found.vectors, found.query_texts, found.queries
    detail = ctx.detail(SCENARIO)
    detail.update(queries=queries_count, k=config.k, sizes={})
    with running_stack(ctx.run_dir / "search", config.threads) as stack:
        ctx.cold_starts.append(stack.cold_start)
        ctx.detail("4 footprint")["rss_at_rest_mb"] = stack.rss()
        name = model_name(stack.embedder_target)
        for size in sizes:
            data = data_set(real, texts, size)
            with timed(ctx, f"search: {size} vectors ({data.real} real)"):
                figures = _one_size(ctx, stack, data, name, query_texts, queries)
            detail["sizes"][str(size)] = figures


def _one_size(
    ctx: Context,
    stack: RunningStack,
    data: DataSet,
    model: str,
    query_texts: Sequence[str],
    queries: FloatMatrix,
) -> dict[str, Any]:
    config = ctx.config
    k = config.k
    store_id, load_rate = load(stack, data, model, config.load_batch)
    footprint = {
        "vectors": data.size,
        "dimensions": int(data.vectors.shape[1]),
        "rss_mb": stack.rss(),
        "db_bytes": stack.db_bytes(),
    }
    index, build_seconds = wait_for_index(stack.store_target, store_id)
    truth = exact(data.vectors, queries, k)
    raw = raw_sqlite_vec(ctx.run_dir / f"raw-{data.size}.db", data, queries, k)
    # Warm the store's and the gateway's paths before timing them.
    via_rest(stack.url, store_id, query_texts[:_WARM_UP_QUERIES], 1, k)
    via_grpc(stack.store_target, store_id, model, queries[:_WARM_UP_QUERIES], 1, k)
    timings: dict[str, Timings] = {"numpy exact": truth, "raw sqlite-vec": raw}
    with ctx.profiling("search", stack.pids()):
        timings["gRPC exact c1"] = via_grpc(
            stack.store_target, store_id, model, queries, 1, k, exact=True
        )
        for clients in config.search_clients:
            timings[f"gRPC c{clients}"] = via_grpc(
                stack.store_target, store_id, model, queries, clients, k
            )
            timings[f"REST c{clients}"] = via_rest(stack.url, store_id, query_texts, clients, k)
        # The vector ranking alone, for its recall against the exact scan (the default fuses
        # it with the words of the query: another ranking by design).
        timings["REST vector c1"] = via_rest(stack.url, store_id, query_texts, 1, k, mode="vector")
    split = gateway_split(stack, store_id, model, query_texts, queries, k)
    footprint["rss_after_queries_mb"] = stack.rss()
    ctx.detail("4 footprint").setdefault("after_load", []).append(footprint)
    recalls = {name: recall_at_k(t.found, truth.found, k) for name, t in timings.items() if t.found}
    _rows(ctx, data, timings, recalls, load_rate, index)
    _index_rows(ctx, data, timings, recalls, index, build_seconds)
    with grpc.insecure_channel(stack.store_target) as channel:
        store_pb2_grpc.StoreStub(channel).DeleteVectorStore(
            store_pb2.DeleteVectorStoreRequest(id=store_id), timeout=120
        )
    return {
        "index": index,
        "index_build_s": build_seconds,
        "real_vectors": data.real,
        "load_vectors_per_s": load_rate,
        "latency_ms": {n: {"p50": t.p50_ms, "p95": t.p95_ms} for n, t in timings.items()},
        "gateway_split_ms": split,
        f"recall_at_{k}": recalls,
    }


def _rows(
    ctx: Context,
    data: DataSet,
    timings: dict[str, Timings],
    recalls: dict[str, float],
    load_rate: float,
    index: str | None,
) -> None:
    size = data.size
    label = _label(data, index)
    raw = timings["raw sqlite-vec"]
    for clients in ctx.config.search_clients:
        for path in ("REST", "gRPC"):
            t = timings[f"{path} c{clients}"]
            gate = path == "REST" and clients == 1
            what = "REST default (hybrid)" if path == "REST" else "gRPC vector"
            ctx.add(
                Row(
                    SCENARIO,
                    f"{label}: {what} p50, {clients} client{'s' if clients > 1 else ''}",
                    t.p50_ms,
                    "ms",
                    baseline_name="raw sqlite-vec KNN in-process, 1 client",
                    baseline=raw.p50_ms,
                    direction="lower",
                    target=TARGET_P50_MS.get(size) if gate else None,
                    target_on_value=True,
                    note=f"p95 {t.p95_ms:.1f} ms",
                )
            )
    vector = timings["REST vector c1"]
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: REST vector p50, 1 client",
            vector.p50_ms,
            "ms",
            baseline_name="raw sqlite-vec KNN in-process, 1 client",
            baseline=raw.p50_ms,
            direction="lower",
            note=f"p95 {vector.p95_ms:.1f} ms",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: raw sqlite-vec KNN p50",
            raw.p50_ms,
            "ms",
            baseline_name="numpy exact scan",
            baseline=timings["numpy exact"].p50_ms,
            direction="lower",
            note=f"p95 {raw.p95_ms:.1f} ms",
        )
    )
    first = ctx.config.search_clients[0]
    for path, key in (("REST vector", "REST vector c1"), ("gRPC vector", f"gRPC c{first}")):
        ctx.add(
            Row(
                SCENARIO,
                f"{label}: {path} recall@{ctx.config.k}",
                recalls[key],
                "",
                target=TARGET_RECALL.get(size, TARGET_RECALL[TARGET_P50_SIZE]),
                note="vs exact numpy scan",
            )
        )
    ctx.add(Row(SCENARIO, f"{label}: load through gRPC AddChunks", load_rate, "vectors/s"))


def _label(data: DataSet, index: str | None) -> str:
    size = data.size
    derived = "" if data.real == size else f" ({data.real} real + {size - data.real} derived)"
    return f"{size // 1000}k{derived}" + (f" [{index}]" if index else "")


def _index_rows(
    ctx: Context,
    data: DataSet,
    timings: dict[str, Timings],
    recalls: dict[str, float],
    index: str | None,
    build_seconds: float,
) -> None:
    """The store's own search (gRPC, one client) with its index against the same store forced
    to scan (`exact`), and each one's recall."""
    label = _label(data, index)
    k = ctx.config.k
    indexed, scan = timings["gRPC c1"], timings["gRPC exact c1"]
    gate = data.size == TARGET_P50_SIZE
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: store search p50 (gRPC, 1 client)",
            indexed.p50_ms,
            "ms",
            baseline_name="same store, exact=true (exhaustive scan)",
            baseline=scan.p50_ms,
            direction="lower",
            target=TARGET_STORE_P50_MS if gate else None,
            target_on_value=True,
            note=f"p95 {indexed.p95_ms:.1f} ms; exact p50 {scan.p50_ms:.1f} p95 {scan.p95_ms:.1f}",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: store search recall@{k} exact=true",
            recalls["gRPC exact c1"],
            "",
            target=1.0,
            note="vs exact numpy scan",
        )
    )
    if index is not None and index.endswith("=coarse"):
        # The store builds it while the load goes on, so this is what is left after the load.
        ctx.add(
            Row(SCENARIO, f"{label}: wait for the coarse index after the load", build_seconds, "s")
        )
    else:
        ctx.add(
            not_available(
                SCENARIO,
                f"{label}: coarse + rescore index",
                f"not used at this size ({index}): the store scans every float vector",
            )
        )
