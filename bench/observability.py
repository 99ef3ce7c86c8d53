"""Scenario 10, the cost of watching: search latency and embedding throughput with tracing on
(every span exported to a local OTLP receiver) and every service's /metrics scraped once a
second, against the same stack unwatched, both up at once and measured in turn, request by
request. Metrics are always collected, so their per-request cost is also timed in process:
the HTTP middleware around a trivial ASGI app, and one gRPC call's counter and histogram.

Target (issue 17): at most 3% slower.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from bench.context import Context, timed
from bench.ingest import create_store
from bench.load import post_json
from bench.processes import RunningStack, running_stack
from bench.stats import Row, percentile
from services.common.metrics import GRPC_DURATION, GRPC_REQUESTS
from services.gateway.metrics import HttpMetrics

SCENARIO = "10 observability"
TARGET = 1.03
SCRAPE_SECONDS = 1.0


@contextmanager
def otlp_sink() -> Iterator[tuple[str, list[int]]]:
    """An OTLP/HTTP endpoint that takes every export (and counts the bytes)."""
    received: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(len(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def scraping(urls: list[str]) -> Iterator[list[int]]:
    """Scrapes every URL once a second, as a busy Prometheus would; yields the scrape count."""
    done = threading.Event()
    scrapes = [0]

    def loop() -> None:
        with httpx.Client(timeout=10) as http:
            while not done.wait(SCRAPE_SECONDS):
                for url in urls:
                    http.get(url).raise_for_status()
                    scrapes[0] += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield scrapes
    finally:
        done.set()
        thread.join()


def _seed(stack: RunningStack, texts: list[str]) -> str:
    with httpx.Client(base_url=stack.url, timeout=120) as http:
        store_id = create_store(http, "watched")
        for index, text in enumerate(texts):
            post_json(
                http,
                f"/v1/vector_stores/{store_id}/files",
                {"text": text, "filename": f"doc{index}.txt"},
            )
        while http.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]["in_progress"]:
            time.sleep(0.2)
    return store_id


def run(ctx: Context) -> None:
    config = ctx.config
    texts = [doc.text for doc in ctx.corpus.documents(40, 500, 2000)]
    queries = ctx.corpus.snippets(config.search_queries * 2)
    batch = ctx.corpus.snippets(32, min_chars=200, max_chars=600)
    with ExitStack() as stacks:
        sink, exported = stacks.enter_context(otlp_sink())
        with timed(ctx, "observability: two stacks, one watched"):
            plain = stacks.enter_context(running_stack(ctx.run_dir / "unwatched", config.threads))
            watched = stacks.enter_context(
                running_stack(
                    ctx.run_dir / "watched",
                    config.threads,
                    RAGD_METRICS_LISTEN="127.0.0.1:0",
                    OTEL_EXPORTER_OTLP_ENDPOINT=sink,
                )
            )
            stores = {id(plain): _seed(plain, texts), id(watched): _seed(watched, texts)}
        metrics_urls = [
            watched.stack.metrics_url(name) for name in ("gateway", "embedder", "store")
        ]
        scrapes = stacks.enter_context(scraping(metrics_urls))
        latencies: dict[int, list[float]] = {id(plain): [], id(watched): []}
        rates: dict[int, list[float]] = {id(plain): [], id(watched): []}
        with timed(ctx, "observability: searches and embeddings, in turn"):
            clients = {
                id(s): stacks.enter_context(httpx.Client(base_url=s.url, timeout=60))
                for s in (plain, watched)
            }
            for round_index, query in enumerate(queries):
                # Which stack goes first alternates, so neither always follows the other.
                order = (plain, watched) if round_index % 2 == 0 else (watched, plain)
                for stack in order:
                    http = clients[id(stack)]
                    began = time.perf_counter()
                    post_json(
                        http, f"/v1/vector_stores/{stores[id(stack)]}/search", {"query": query}
                    )
                    latencies[id(stack)].append((time.perf_counter() - began) * 1000)
            for round_index in range(max(4, config.search_queries // 10)):
                order = (plain, watched) if round_index % 2 == 0 else (watched, plain)
                for stack in order:
                    began = time.perf_counter()
                    post_json(
                        clients[id(stack)],
                        "/v1/embeddings",
                        {"model": "all-MiniLM-L6-v2", "input": batch, "encoding_format": "base64"},
                    )
                    rates[id(stack)].append(len(batch) / (time.perf_counter() - began))
    ctx.detail(SCENARIO).update(
        {
            "latencies_ms": {"plain": latencies[id(plain)], "watched": latencies[id(watched)]},
            "texts_per_s": {"plain": rates[id(plain)], "watched": rates[id(watched)]},
            "scrapes": scrapes[0],
            "otlp_exports": len(exported),
            "otlp_bytes": sum(exported),
        }
    )
    plain_p50, watched_p50 = (percentile(latencies[id(s)], 50) for s in (plain, watched))
    ctx.add(
        Row(
            SCENARIO,
            "search p50, traced and scraped every second",
            watched_p50,
            "ms",
            baseline_name="the same searches on an unwatched stack",
            baseline=plain_p50,
            target=TARGET,
            direction="lower",
            note=f"{len(queries)} searches each, in turn; {len(exported)} OTLP exports",
        )
    )
    plain_rate, watched_rate = (statistics.median(rates[id(s)]) for s in (plain, watched))
    ctx.add(
        Row(
            SCENARIO,
            "embedding throughput (32 texts a request), traced and scraped",
            watched_rate,
            "texts/s",
            baseline_name="the same requests on an unwatched stack",
            baseline=plain_rate,
            target=round(2 - TARGET, 2),
            note=f"{scrapes[0]} scrapes",
        )
    )
    for name, micros in _always_on_costs().items():
        ctx.add(
            Row(
                SCENARIO,
                name,
                micros,
                "us",
                note=f"{100 * micros / 1000 / plain_p50:.2f}% of the search p50",
            )
        )


def _always_on_costs(calls: int = 20000) -> dict[str, float]:
    """Microseconds the always-on metrics add: per HTTP request, per gRPC call."""
    import asyncio

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def sent(message: Any) -> None:
        pass

    async def received() -> Any:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "POST", "path": "/x", "route_template": "/x"}
    wrapped = HttpMetrics(app)

    async def per_call(target: Any) -> float:
        began = time.perf_counter()
        for _ in range(calls):
            await target(dict(scope), received, sent)
        return (time.perf_counter() - began) / calls * 1e6

    async def measure() -> float:
        raw = min([await per_call(app) for _ in range(3)])
        with_metrics = min([await per_call(wrapped) for _ in range(3)])
        return with_metrics - raw

    http = asyncio.run(measure())
    duration = GRPC_DURATION.labels("bench", "Call")
    requests = GRPC_REQUESTS.labels("bench", "Call", "OK")
    began = time.perf_counter()
    for _ in range(calls):
        duration.observe(0.001)
        requests.inc()
    grpc_call = (time.perf_counter() - began) / calls * 1e6
    return {
        "always-on metrics: per HTTP request": http,
        "always-on metrics: per gRPC call (counter and histogram)": grpc_call,
    }
