"""The gateway's Prometheus figures: every HTTP request by route template (never by id, so the
label set stays bounded), searches by the mode that ranked them, and ingested files by outcome.
Served at /metrics on the REST port (behind the API keys when they are set) and, with
RAGD_METRICS_LISTEN, on a port of its own."""

from __future__ import annotations

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.common import tracing
from services.common.metrics import DURATION_BUCKETS
from services.gateway.operations import operation

HTTP_REQUESTS = Counter(
    "ragd_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "ragd_http_request_duration_seconds",
    "Time to answer an HTTP request (to the end of its body), by route template.",
    ["route", "method"],
    buckets=DURATION_BUCKETS,
)
SEARCH_DURATION = Histogram(
    "ragd_search_duration_seconds",
    "Time of a vector store search, embedding included, by the mode that ranked it.",
    ["mode"],
    buckets=DURATION_BUCKETS,
)
DEGRADED_SEARCHES = Counter(
    "ragd_degraded_searches",
    "Searches answered lexically because the embedder was unavailable.",
)
INGEST_FILES = Counter(
    "ragd_ingest_files",
    "Files the ingest workers took up, by outcome.",
    ["status"],
)
INGEST_CHUNKS = Counter("ragd_ingest_chunks", "Chunks the ingest workers indexed.")
INGEST_DURATION = Histogram(
    "ragd_ingest_file_duration_seconds",
    "Time to parse, chunk, embed and write one file.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)

DEPENDENCY_UP = Gauge(
    "ragd_dependency_up",
    "1 when the dependency answered the last readiness check (/ready), else 0: store, "
    "embedder (the default model's), chat (when configured), embedder:<model> with several.",
    ["dependency"],
)

# Requests no route matched share one label value.
UNMATCHED = "unmatched"


class TemplatedRoute(Route):
    """A Route that leaves its path template in the scope for the metrics middleware."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route_template"] = self.path
        return match, child


class HttpMetrics:
    """Counts and times every HTTP request; the route label is the matched template."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                # Now, before the tracing middleware ends the request's span with the body.
                route = scope.get("route_template", UNMATCHED)
                tracing.name_current_span(f"{scope['method']} {route}", {"http.route": route})
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route_template", UNMATCHED)
            method = scope["method"]
            HTTP_DURATION.labels(route, method).observe(time.perf_counter() - started)
            HTTP_REQUESTS.labels(route, method, str(status)).inc()


def searched(mode: str, seconds: float, degraded: bool) -> None:
    SEARCH_DURATION.labels(mode).observe(seconds)
    if degraded:
        DEGRADED_SEARCHES.inc()


def dependencies(states: dict[str, bool]) -> None:
    for name, up in states.items():
        DEPENDENCY_UP.labels(name).set(1 if up else 0)


def ingested(outcome: str, seconds: float, chunks: int) -> None:
    INGEST_FILES.labels(outcome).inc()
    INGEST_DURATION.observe(seconds)
    INGEST_CHUNKS.inc(chunks)


@operation("Prometheus metrics (text exposition format)", media="text/plain")
async def metrics(request: Request) -> Response:
    """GET /metrics: Prometheus text exposition."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
