"""Scenario 6, searches while ingest runs: does a person searching wait behind the ingest?

One stack, one vector store seeded with documents. Four phases, in one run:
- idle: searches alone (one client, sequential): the latency baseline;
- ingest alone: uploaders attach new documents until all are indexed: the throughput baseline;
- ingest + searches: the same ingest again, with a client searching at a steady rate
  meanwhile; the searches' p50/p99 against idle, the ingest's throughput against alone;
- the same with the embedder's interactive lane off (RAGD_EMBEDDER_INTERACTIVE_THREADS=0),
  in its own stack: what searches cost without the lane.

Targets (issue 13): search p99 under ingest at most 50 ms on 2 cores, ingest keeping at least
80% of its throughput.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from bench.context import Context, timed
from bench.corpus import Document
from bench.ingest import create_store
from bench.load import post_json, run_load
from bench.processes import RunningStack, running_stack
from bench.stats import Row, percentile

SCENARIO = "6 search under ingest"
TARGET_P99_MS = 50.0
TARGET_INGEST_KEPT = 0.8
# A person searching now and then, not a load test.
SEARCHES_PER_SECOND = 5.0
_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Phase:
    latencies_ms: list[float]
    ingest_docs_per_s: float = 0.0

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 99)


def _search(http: httpx.Client, store_id: str, query: str) -> float:
    began = time.perf_counter()
    reply = http.post(
        f"/v1/vector_stores/{store_id}/search", json={"query": query, "max_num_results": 5}
    )
    elapsed = (time.perf_counter() - began) * 1000
    if reply.status_code != 200 or reply.json().get("degraded"):
        raise RuntimeError(f"search failed: {reply.status_code} {reply.text[:200]}")
    return elapsed


def _ingest(stack: RunningStack, store_id: str, docs: Sequence[Document], uploaders: int) -> float:
    """Documents attached as text by `uploaders` clients, until all are indexed: docs/s."""

    def attach(http: httpx.Client, doc: Document) -> str:
        body = {"text": doc.text, "filename": doc.name}
        return str(post_json(http, f"/v1/vector_stores/{store_id}/files", body)["id"])

    began = time.perf_counter()
    run_load(
        docs,
        uploaders,
        lambda: httpx.Client(base_url=stack.url, timeout=120),
        attach,
        lambda c: c.close(),
    )
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        while True:
            counts = http.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]
            if counts["in_progress"] == 0:
                break
            time.sleep(_POLL_SECONDS)
        if counts["failed"]:
            raise RuntimeError(f"ingest failed for some files: {counts}")
    return len(docs) / (time.perf_counter() - began)


def _searching(
    stack: RunningStack, store_id: str, queries: Sequence[str], stop: threading.Event
) -> list[float]:
    latencies: list[float] = []
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        index = 0
        while not stop.is_set():
            started = time.perf_counter()
            latencies.append(_search(http, store_id, queries[index % len(queries)]))
            index += 1
            rest = 1 / SEARCHES_PER_SECOND - (time.perf_counter() - started)
            if rest > 0:
                stop.wait(rest)
    return latencies


def _measure(
    stack: RunningStack, docs: Sequence[Document], queries: Sequence[str], uploaders: int, seed: int
) -> tuple[Phase, Phase, Phase]:
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        store_id = create_store(http, "contention")
    _ingest(stack, store_id, docs[:seed], uploaders)
    with httpx.Client(base_url=stack.url, timeout=60) as http:
        for query in queries[:5]:
            _search(http, store_id, query)  # warm-up
        idle = Phase([_search(http, store_id, query) for query in queries])
    half = (len(docs) - seed) // 2
    alone = Phase([], _ingest(stack, store_id, docs[seed : seed + half], uploaders))
    stop = threading.Event()
    found: list[list[float]] = []
    searcher = threading.Thread(
        target=lambda: found.append(_searching(stack, store_id, queries, stop)), daemon=True
    )
    searcher.start()
    try:
        rate = _ingest(stack, store_id, docs[seed + half : seed + 2 * half], uploaders)
    finally:
        stop.set()
        searcher.join()
    return idle, alone, Phase(found[0] if found else [], rate)


def run(ctx: Context) -> None:
    config = ctx.config
    seed = max(8, config.ingest_docs // 10)
    docs = ctx.corpus.documents(seed + 2 * max(8, config.ingest_docs // 4), 500, 2000)
    queries = ctx.corpus.snippets(max(20, config.search_queries), 20, 120)
    uploaders = 2
    results: dict[str, tuple[Phase, Phase, Phase]] = {}
    for lane, threads in (("interactive lane", str(config.threads)), ("no lane", "0")):
        directory = ctx.run_dir / f"contention-{threads}"
        with (
            timed(ctx, f"contention, {lane}"),
            running_stack(
                directory, config.threads, RAGD_EMBEDDER_INTERACTIVE_THREADS=threads
            ) as stack,
        ):
            results[lane] = _measure(stack, docs, queries, uploaders, seed)
    idle, alone, loaded = results["interactive lane"]
    _, _, unlaned = results["no lane"]
    ctx.detail(SCENARIO).update(
        {
            lane: {
                "idle_ms": phases[0].latencies_ms,
                "under_ingest_ms": phases[2].latencies_ms,
                "ingest_alone_docs_per_s": phases[1].ingest_docs_per_s,
                "ingest_with_searches_docs_per_s": phases[2].ingest_docs_per_s,
            }
            for lane, phases in results.items()
        }
    )
    rate_note = f"{SEARCHES_PER_SECOND:g} searches/s against {uploaders} uploaders"
    ctx.add(
        Row(
            SCENARIO,
            "search p50, idle",
            idle.p50,
            "ms",
            direction="lower",
            note=f"p99 {idle.p99:.1f} ms",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            "search p99 during ingest",
            loaded.p99,
            "ms",
            baseline_name="same, idle",
            baseline=idle.p99,
            direction="lower",
            target=TARGET_P99_MS,
            target_on_value=True,
            note=f"p50 {loaded.p50:.1f} ms; {rate_note}",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            "search p99 during ingest, no interactive lane",
            unlaned.p99,
            "ms",
            baseline_name="with the lane",
            baseline=loaded.p99,
            direction="lower",
            note=f"p50 {unlaned.p50:.1f} ms",
        )
    )
    ctx.add(
        Row(
            SCENARIO,
            "ingest while searched",
            loaded.ingest_docs_per_s,
            "docs/s",
            baseline_name="ingest alone",
            baseline=alone.ingest_docs_per_s,
            target=TARGET_INGEST_KEPT,
            note=rate_note,
        )
    )
