"""Scenario 11, the limits of one store (issue 19): what a single store sustains by size, each
size on a fresh stack and database.

Per size: the load rate through the store's own write path (AddChunks with pre-computed
vectors: the embedder is out of the equation), the default (hybrid) REST search's p50 and p95
with the store's own gRPC search beside it, the store's memory after loading and after the
searches (vectors resident), disk bytes per chunk, and the maintenance an operator runs: a
backup, a restore of it (and the first search after, which loads the vectors again), and a
vacuum after a tenth of the files were deleted. Not in the default run: `--only limits`
(100k, ~10 minutes on 2 cores) or `--limits-sizes 100000,1000000` (~1 hour).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from typing import Any

import httpx

from bench.context import Context, timed
from bench.load import post_json
from bench.processes import RunningStack, running_stack
from bench.search import (
    full_text,
    load,
    material,
    model_name,
    via_grpc,
    via_grpc_lexical,
    via_rest,
    wait_for_index,
)
from bench.stats import Row
from bench.vectors import DataSet, data_set
from services.common.vectors import FloatMatrix

SCENARIO = "11 limits"
# Files deleted before the vacuum, as a share of the store's files.
DELETED_SHARE = 0.1
_MAINTENANCE_TIMEOUT = 3600.0


def run(ctx: Context) -> None:
    config = ctx.config
    found = material(ctx, max(config.limits_sizes))
    texts, real, query_texts, queries = found.texts, found.vectors, found.query_texts, found.queries
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
    store_id, load_rate = load(stack, data, model, ctx.config.load_batch, full_text)
    # Searched once its vectors are in memory, as a store that has been up a while is.
    _, index_seconds = wait_for_index(stack.store_target, store_id, resident_timeout=900)
    figures: dict[str, Any] = {
        "chunks": data.size,
        "load_chunks_per_s": load_rate,
        "index_build_s": index_seconds,
        "rss_empty_mb": rss_empty,
        "rss_loaded_mb": stack.rss()["store"],
        "db_bytes": stack.db_bytes(),
        "text_bytes": sum(len(full_text(row, data).encode()) for row in range(data.size)),
    }
    via_rest(stack.url, store_id, query_texts[:5], 1, k)
    rest = via_rest(stack.url, store_id, query_texts, 1, k)
    lexical = via_rest(stack.url, store_id, query_texts, 1, k, mode="lexical")
    grpc_search = via_grpc(stack.store_target, store_id, model, queries, 1, k)
    grpc_lexical = via_grpc_lexical(stack.store_target, store_id, query_texts, 1, k)
    figures.update(
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
        figures.update(_vacuum(http, store_id))
    return figures


def _vacuum(http: httpx.Client, store_id: str) -> dict[str, float]:
    """Deletes a tenth of the store's files, then vacuums: an operator's clean-up."""
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
    vacuum: Any = post_json(http, "/admin/vacuum", {})
    return {
        "deleted_files": len(doomed),
        "delete_s": deleted,
        "vacuum_s": vacuum["seconds"],
        "vacuum_bytes_before": vacuum["bytes_before"],
        "vacuum_bytes_after": vacuum["bytes_after"],
    }


def _rows(ctx: Context, size: int, f: dict[str, Any]) -> None:
    label = f"{size:,} chunks"

    def add(name: str, value: float, unit: str, note: str = "") -> None:
        ctx.add(Row(SCENARIO, f"{label}: {name}", value, unit, note=note))

    add("load through AddChunks (no embedder)", f["load_chunks_per_s"], "chunks/s")
    add(
        "default REST search p50",
        f["rest_p50_ms"],
        "ms",
        f"p95 {f['rest_p95_ms']:.1f} ms; the query's embedding included",
    )
    add(
        "lexical REST search p50",
        f["lexical_p50_ms"],
        "ms",
        f"p95 {f['lexical_p95_ms']:.1f} ms; bm25 over FTS5, no embedding",
    )
    add("store gRPC vector search p50", f["store_p50_ms"], "ms", f"p95 {f['store_p95_ms']:.1f} ms")
    add(
        "store gRPC lexical search p50",
        f["store_lexical_p50_ms"],
        "ms",
        f"p95 {f['store_lexical_p95_ms']:.1f} ms",
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
