"""Scenario 11, the limits of one store (issue 19): what a single store sustains by size, each
size on a fresh stack and database.

Chunks carry realistic texts (bench/vectors.py's chunk_texts: ~180 words of man pages, a
derived row the halves of its parents'), so the full-text index holds what a store of real
chunks would. Per size: the load rate through the store's own write path (AddChunks with
pre-computed vectors: the embedder is out of the equation) and the time its full-text index
then needs to catch up, the default (hybrid) REST search's p50 and p95 with the store's own
gRPC searches beside it, the lexical search against FTS5's bm25 top k on the same texts in
this process (the store's method before issue 33: the baseline), the vector search's
recall@10 against an exact scan, the store's memory after loading and after the
searches (vectors resident), disk bytes per chunk, and the maintenance an operator runs: a
backup, a restore of it (and the first search after, which loads the vectors again), a
restart (its first search, and when its vectors are in memory again), then a vacuum after a
tenth of the files were deleted. Not in the default run: `--only limits`
(100k, ~10 minutes on 2 cores) or `--limits-sizes 100000,1000000` (~1 hour).
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import httpx

from bench.context import Context, timed
from bench.fts5 import Fts5
from bench.load import post_json
from bench.processes import RunningStack, running_stack
from bench.search import (
    Timings,
    exact,
    load,
    material,
    model_name,
    via_grpc,
    via_grpc_lexical,
    via_rest,
    wait_for_index,
)
from bench.stats import Row, median, recall_at_k
from bench.vectors import DataSet, chunk_texts, data_set, long_text
from services.common.vectors import FloatMatrix, to_bytes
from services.pb import embedder_pb2, embedder_pb2_grpc, store_pb2, store_pb2_grpc

SCENARIO = "11 limits"
# The vacuum under load: clients adding files of WRITE_CHUNKS chunks, and searching.
VACUUM_WRITERS, VACUUM_SEARCHERS, WRITE_CHUNKS = 2, 4, 10
VACUUM_MARGIN_S = 10.0
# Issue 33: the vector half's recall@10 against an exact scan, at every size.
TARGET_RECALL = 0.98
# Issue 33: REST p50 (one client) by store size, default (hybrid) and lexical mode.
TARGET_REST_P50_MS: dict[int, dict[str, float]] = {
    100_000: {"rest": 20.0},
    1_000_000: {"rest": 40.0, "lexical": 30.0},
}
# Files deleted before the vacuum, as a share of the store's files.
DELETED_SHARE = 0.1
_MAINTENANCE_TIMEOUT = 3600.0


def run(ctx: Context) -> None:
    config = ctx.config
    found = material(ctx, max(config.limits_sizes))
    real, query_texts, queries = found.vectors, found.query_texts, found.queries
    texts = chunk_texts(found.texts)
    detail = ctx.detail(SCENARIO)
    for size in sorted(config.limits_sizes):
        data = data_set(real, texts, size)
        directory = ctx.run_dir / f"limits-{size}"
        with (
            timed(ctx, f"limits: {size} chunks"),
            # Measured, however slow: the default 3 s deadline would answer 503 instead.
            running_stack(directory, config.threads, RAGD_SEARCH_STORE_TIMEOUT="60") as stack,
        ):
            figures = _one_size(ctx, stack, data, query_texts, queries)
        detail[str(size)] = figures
        _rows(ctx, size, figures)
        # The next size needs the disk more than this one's leftovers do.
        shutil.rmtree(directory, ignore_errors=True)


def _one_size(
    ctx: Context,
    stack: RunningStack,
    data: DataSet,
    query_texts: Sequence[str],
    queries: FloatMatrix,
) -> dict[str, Any]:
    k = ctx.config.k
    model = model_name(stack.embedder_target)
    rss_empty = stack.rss()["store"]
    store_id, load_rate = load(stack, data, model, ctx.config.load_batch, long_text)
    # Searched once its vectors are in memory and its full text caught up with the load, as a
    # store that has been up a while is.
    _, index_seconds = wait_for_index(stack.store_target, store_id, resident_timeout=900)
    began = time.perf_counter()
    via_grpc_lexical(stack.store_target, store_id, query_texts[:1], 1, k, timeout=3600)
    fulltext_seconds = time.perf_counter() - began
    figures: dict[str, Any] = {
        "chunks": data.size,
        "load_chunks_per_s": load_rate,
        "index_build_s": index_seconds,
        "fulltext_catch_up_s": fulltext_seconds,
        "rss_empty_mb": rss_empty,
        "rss_loaded_mb": stack.rss()["store"],
        "db_bytes": stack.db_bytes(),
        "text_bytes": sum(len(long_text(row, data).encode()) for row in range(data.size)),
        "text_words": sum(len(long_text(row, data).split()) for row in range(data.size)),
        "fulltext_bytes": _folder_bytes(stack.directory / "ragd.db-fulltext"),
    }
    via_rest(stack.url, store_id, query_texts[:5], 1, k)
    rest = via_rest(stack.url, store_id, query_texts, 1, k)
    lexical = via_rest(stack.url, store_id, query_texts, 1, k, mode="lexical")
    grpc_search = via_grpc(stack.store_target, store_id, model, queries, 1, k)
    grpc_lexical = via_grpc_lexical(stack.store_target, store_id, query_texts, 1, k)
    split = _default_split(stack, store_id, model, query_texts, queries, k)
    truth = exact(data.vectors, queries, k)
    fts5, fts5_build = _fts5_baseline(stack.directory / "fts5-baseline.db", data, query_texts, k)
    figures.update(
        recall_10=recall_at_k(grpc_search.found, truth.found, k),
        **split,
        fts5_p50_ms=fts5.p50_ms,
        fts5_p95_ms=fts5.p95_ms,
        fts5_build_s=fts5_build,
        lexical_top10_agreement=recall_at_k(grpc_lexical.found, fts5.found, k),
        store_lexical_p50_ms=grpc_lexical.p50_ms,
        store_lexical_p95_ms=grpc_lexical.p95_ms,
        lexical_p50_ms=lexical.p50_ms,
        lexical_p95_ms=lexical.p95_ms,
        rest_p50_ms=rest.p50_ms,
        rest_p95_ms=rest.p95_ms,
        store_p50_ms=grpc_search.p50_ms,
        store_p95_ms=grpc_search.p95_ms,
        rss_searched_mb=stack.rss()["store"],
    )
    with httpx.Client(base_url=stack.url, timeout=_MAINTENANCE_TIMEOUT) as http:
        backup: Any = post_json(http, "/admin/backup", {})
        figures.update(backup_s=backup["seconds"], backup_bytes=backup["bytes"])
        name = str(backup["path"]).rsplit("/", 1)[-1]
        restored: Any = post_json(http, "/admin/restore", {"path": name})
        figures["restore_s"] = restored["seconds"]
        began = time.perf_counter()
        post_json(http, f"/v1/vector_stores/{store_id}/search", {"query": query_texts[0]})
        figures["first_search_after_restore_s"] = time.perf_counter() - began
        # A restored database's full-text indexes are built again from its chunks.
        figures["fulltext_rebuilt_after_restore_s"] = _lexical_ready(http, store_id, query_texts)
        figures.update(_restart(stack, http, store_id, query_texts[1]))
        # The vacuum is measured on a store whose vectors are back in memory, as the searches
        # above were: until then searches scan SQLite, which costs writes more than any vacuum.
        _, warming = wait_for_index(stack.store_target, store_id, resident_timeout=900)
        figures["resident_after_restart_s"] = (
            figures["first_search_after_restart_s"] + warming
            if _in_memory(stack.store_target, store_id)
            else math.nan  # over the memory budget, or still loading after the wait
        )
        figures.update(_vacuum(stack, http, store_id, data, model, query_texts))
    return figures


def _lexical_ready(http: httpx.Client, store_id: str, query_texts: Sequence[str]) -> float:
    """Seconds until a lexical search answers (503 while the full-text index is rebuilt)."""
    began = time.perf_counter()
    while True:
        reply = http.post(
            f"/v1/vector_stores/{store_id}/search",
            json={"query": query_texts[0], "mode": "lexical"},
        )
        if reply.status_code == 200:
            return time.perf_counter() - began
        if reply.status_code != 503 or time.perf_counter() - began > _MAINTENANCE_TIMEOUT:
            raise RuntimeError(
                f"lexical search after the restore: {reply.status_code} {reply.text}"
            )
        time.sleep(1.0)


def _in_memory(target: str, store_id: str) -> bool:
    with grpc.insecure_channel(target) as channel:
        found = store_pb2_grpc.StoreStub(channel).GetVectorStore(
            store_pb2.GetVectorStoreRequest(id=store_id), timeout=60
        )
    return bool(found.in_memory)


def _restart(stack: RunningStack, http: httpx.Client, store_id: str, text: str) -> dict[str, float]:
    """The store stopped and started again: seconds to its first default search's answer
    (vectors load in the background; searches meanwhile go to SQLite)."""
    stack.stack.children["store"].stop()
    began = time.perf_counter()
    stack.stack.start_service("store")
    started = time.perf_counter() - began
    while True:
        reply = http.post(f"/v1/vector_stores/{store_id}/search", json={"query": text})
        if reply.status_code == 200:
            break
        if time.perf_counter() - began > 600:
            raise RuntimeError(f"no search after the restart: {reply.status_code} {reply.text}")
        time.sleep(0.05)
    return {"restart_s": started, "first_search_after_restart_s": time.perf_counter() - began}


def _default_split(
    stack: RunningStack,
    store_id: str,
    model: str,
    query_texts: Sequence[str],
    queries: FloatMatrix,
    k: int,
) -> dict[str, float]:
    """Where a default REST search's time goes, per query in turn (load drift stays out of
    the differences): the query's Embed call alone (interactive lane), the store's own
    hybrid Search with that vector and text, and the REST search that does both; p50s in ms,
    the gateway's part the median of REST - Embed - Search."""
    dims = int(queries.shape[1])
    parts: dict[str, list[float]] = {"embed": [], "store_hybrid": [], "gateway": []}
    with (
        grpc.insecure_channel(stack.embedder_target) as embedder_channel,
        grpc.insecure_channel(stack.store_target) as store_channel,
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
                    mode="hybrid",
                    query_text=text,
                ),
                timeout=60,
            )
            searched = time.perf_counter()
            post_json(
                http,
                f"/v1/vector_stores/{store_id}/search",
                {"query": text, "max_num_results": k},
            )
            done = time.perf_counter()
            parts["embed"].append(1000 * (embedded - began))
            parts["store_hybrid"].append(1000 * (searched - embedded))
            parts["gateway"].append(1000 * ((done - searched) - (searched - began)))
    return {f"split_{name}_p50_ms": median(values) for name, values in parts.items()}


def _fts5_baseline(
    path: Path, data: DataSet, query_texts: Sequence[str], k: int
) -> tuple[Timings, float]:
    """The store's lexical search before issue 33 (bench/fts5.py) on the same texts, in this
    process: its latencies and rows, and the seconds its index took to build."""
    index = Fts5(path)
    try:
        built = index.add((row + 1, long_text(row, data)) for row in range(data.size))
        for text in query_texts[:5]:
            index.ranked(text, k)
        latencies, found = [], []
        for text in query_texts:
            began = time.perf_counter()
            rows = index.ranked(text, k)
            latencies.append(time.perf_counter() - began)
            found.append([chunk - 1 for chunk, _ in rows])
        return Timings(latencies, found), built
    finally:
        index.close()


def _folder_bytes(folder: Path) -> int:
    return sum(entry.stat().st_size for entry in folder.rglob("*") if entry.is_file())


def _vacuum(
    stack: RunningStack,
    http: httpx.Client,
    store_id: str,
    data: DataSet,
    model: str,
    query_texts: Sequence[str],
) -> dict[str, Any]:
    """Deletes a tenth of the store's files, then vacuums while VACUUM_WRITERS clients add
    files (AddChunks of WRITE_CHUNKS chunks with vectors, one after the other) and
    VACUUM_SEARCHERS clients search (REST, default mode): every write's time and every
    search's outcome while the vacuum runs."""
    files: list[str] = []
    after = ""
    while True:
        page = http.get(
            f"/v1/vector_stores/{store_id}/files",
            params={"limit": 100, **({"after": after} if after else {})},
        ).json()
        files += [item["id"] for item in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    doomed = files[:: max(1, round(1 / DELETED_SHARE))]
    began = time.perf_counter()
    for file_id in doomed:
        http.delete(f"/v1/vector_stores/{store_id}/files/{file_id}").raise_for_status()
    deleted = time.perf_counter() - began
    done = threading.Event()
    # (start, seconds) of each write; the vacuum's window splits them.
    writes: list[tuple[float, float]] = []
    searches: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def writer(number: int) -> None:
        dims = int(data.vectors.shape[1])
        with grpc.insecure_channel(stack.store_target) as channel:
            store = store_pb2_grpc.StoreStub(channel)
            sent = 0
            while not done.is_set():
                rows = [
                    (number * 7919 + sent * WRITE_CHUNKS + i) % data.size
                    for i in range(WRITE_CHUNKS)
                ]
                began = time.perf_counter()
                try:
                    store.AddChunks(
                        store_pb2.AddChunksRequest(
                            vector_store_id=store_id,
                            file_id=f"file-vacuum-{number}-{sent:06d}",
                            filename=f"vacuum-{number}-{sent}.txt",
                            chunks=[
                                store_pb2.ChunkInput(text=long_text(row, data), token_count=0)
                                for row in rows
                            ],
                            vectors=to_bytes(data.vectors[rows]),
                            dimensions=dims,
                            model=model,
                        ),
                        timeout=600,
                    )
                except grpc.RpcError as error:
                    with lock:
                        failures.append(f"write: {error.code()}")
                with lock:
                    writes.append((began, time.perf_counter() - began))
                sent += 1

    def searcher(number: int) -> None:
        with httpx.Client(base_url=stack.url, timeout=600) as own:
            sent = 0
            while not done.is_set():
                text = query_texts[(number * 31 + sent) % len(query_texts)]
                began = time.perf_counter()
                reply = own.post(f"/v1/vector_stores/{store_id}/search", json={"query": text})
                with lock:
                    searches.append(time.perf_counter() - began)
                    if reply.status_code != 200:
                        failures.append(f"search: {reply.status_code}")
                sent += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(VACUUM_WRITERS)]
    threads += [threading.Thread(target=searcher, args=(n,)) for n in range(VACUUM_SEARCHERS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(VACUUM_MARGIN_S)  # the same load runs before the vacuum and after it
        vacuum_began = time.perf_counter()
        vacuum: Any = post_json(http, "/admin/vacuum", {})
        vacuum_ended = time.perf_counter()
        time.sleep(VACUUM_MARGIN_S)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    # A write that overlapped the vacuum counts as during it.
    during = [
        seconds
        for began, seconds in writes
        if began + seconds >= vacuum_began and began <= vacuum_ended
    ]
    outside = [
        seconds
        for began, seconds in writes
        if not (began + seconds >= vacuum_began and began <= vacuum_ended)
    ]
    return {
        "deleted_files": len(doomed),
        "delete_s": deleted,
        "vacuum_s": vacuum["seconds"],
        "vacuum_bytes_before": vacuum["bytes_before"],
        "vacuum_bytes_after": vacuum["bytes_after"],
        "vacuum_writes": len(during),
        "vacuum_write_max_s": max(during, default=math.nan),
        "vacuum_write_p50_ms": 1000 * median(during) if during else math.nan,
        "outside_write_max_s": max(outside, default=math.nan),
        "outside_writes": len(outside),
        "vacuum_searches": len(searches),
        "vacuum_search_p50_ms": 1000 * median(searches) if searches else math.nan,
        "vacuum_failures": failures[:20],
        "vacuum_failure_count": len(failures),
    }


def _rows(ctx: Context, size: int, f: dict[str, Any]) -> None:
    label = f"{size:,} chunks"

    def add(name: str, value: float, unit: str, note: str = "") -> None:
        ctx.add(Row(SCENARIO, f"{label}: {name}", value, unit, note=note))

    add("load through AddChunks (no embedder)", f["load_chunks_per_s"], "chunks/s")
    add(
        "full text caught up after the load",
        f["fulltext_catch_up_s"],
        "s",
        f"Tantivy index {f['fulltext_bytes'] / 2**20:,.0f} MiB; FTS5 built in "
        f"{f['fts5_build_s']:.0f} s in process",
    )
    targets = TARGET_REST_P50_MS.get(f["chunks"], {})
    for name, key, note in (
        (
            "default REST search p50",
            "rest",
            f"the query's embedding included; per query in turn: Embed alone "
            f"{f['split_embed_p50_ms']:.1f} ms, the store's hybrid Search "
            f"{f['split_store_hybrid_p50_ms']:.1f} ms, the gateway "
            f"{f['split_gateway_p50_ms']:.1f} ms",
        ),
        ("lexical REST search p50", "lexical", "bm25 (Tantivy), no embedding"),
    ):
        ctx.add(
            Row(
                SCENARIO,
                f"{label}: {name}",
                f[f"{key}_p50_ms"],
                "ms",
                target=targets.get(key),
                direction="lower",
                note=f"p95 {f[f'{key}_p95_ms']:.1f} ms; {note}",
            )
        )
    add("store gRPC vector search p50", f["store_p50_ms"], "ms", f"p95 {f['store_p95_ms']:.1f} ms")
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: store vector search recall@10",
            f["recall_10"],
            "",
            target=TARGET_RECALL,
            note="vs exact numpy scan",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: store gRPC lexical search p50",
            f["store_lexical_p50_ms"],
            "ms",
            baseline_name=f"FTS5 bm25 top {ctx.config.k} in process (the method before)",
            baseline=f["fts5_p50_ms"],
            direction="lower",
            note=f"p95 {f['store_lexical_p95_ms']:.1f} ms (FTS5 {f['fts5_p95_ms']:.1f}); "
            f"top 10 shared with FTS5's {f['lexical_top10_agreement']:.2f}",
        )
    )
    add(
        "store RSS, vectors resident",
        f["rss_searched_mb"],
        "MiB",
        f"{f['rss_loaded_mb']:.0f} MiB after the load, {f['rss_empty_mb']:.0f} empty",
    )
    add(
        "disk per chunk",
        f["db_bytes"] / f["chunks"],
        "B",
        f"database and WAL; chunk text ~{f['text_bytes'] / f['chunks']:.0f} B",
    )
    add("backup", f["backup_s"], "s", f"{f['backup_bytes'] / 2**20:,.0f} MiB")
    add(
        "restore",
        f["restore_s"],
        "s",
        f"first search after it {f['first_search_after_restore_s']:.1f} s",
    )
    add(
        "vacuum",
        f["vacuum_s"],
        "s",
        f"after deleting {f['deleted_files']} of the files ({f['delete_s']:.1f} s); "
        f"{f['vacuum_bytes_before'] / 2**20:,.0f} -> {f['vacuum_bytes_after'] / 2**20:,.0f} MiB",
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: longest write during the vacuum",
            f["vacuum_write_max_s"],
            "s",
            target=1.0,
            direction="lower",
            note=f"{f['vacuum_writes']} writes of {WRITE_CHUNKS} chunks from {VACUUM_WRITERS} "
            f"clients, p50 {f['vacuum_write_p50_ms']:.0f} ms (the {f['outside_writes']} in the "
            f"{VACUUM_MARGIN_S:.0f} s before and after it: longest {f['outside_write_max_s']:.2f} "
            f"s); {f['vacuum_searches']} searches from {VACUUM_SEARCHERS} clients, p50 "
            f"{f['vacuum_search_p50_ms']:.0f} ms",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            f"{label}: failed writes and searches during the vacuum",
            f["vacuum_failure_count"],
            "",
            target=0,
            direction="lower",
            note="; ".join(f["vacuum_failures"][:3]),
        )
    )
    add(
        "first search after a restart",
        f["first_search_after_restart_s"],
        "s",
        f"store up again in {f['restart_s']:.1f} s, its vectors in memory again "
        + (
            f"after {f['resident_after_restart_s']:.0f} s"
            if math.isfinite(f["resident_after_restart_s"])
            else "never while measured"
        )
        + "; its full text rebuilt "
        f"{f['fulltext_rebuilt_after_restore_s']:.0f} s after a restore",
    )
