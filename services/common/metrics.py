"""Prometheus metrics shared by the services: the metrics port and the gRPC server's own
request counts and durations. Each service defines its domain metrics next to the code that
moves them; everything goes to prometheus-client's default registry."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import Counter, Histogram, start_http_server

from services.common.config import ConfigError
from services.common.grpc_server import Context
from services.common.security import Handler

# Buckets for request durations, in seconds: from a cached query (1 ms) to a long ingest call.
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

GRPC_REQUESTS = Counter(
    "ragd_grpc_requests",
    "gRPC calls this process answered, by method and status code.",
    ["service", "method", "code"],
)
GRPC_DURATION = Histogram(
    "ragd_grpc_request_duration_seconds",
    "Time to answer a unary gRPC call, by method.",
    ["service", "method"],
    buckets=DURATION_BUCKETS,
)


def serve_metrics(listen: str) -> int:
    """Serves /metrics on `listen` ("host:port"; port 0 picks one) in a thread of its own;
    returns the bound port."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"RAGD_METRICS_LISTEN must be host:port, got {listen!r}")
    server, _ = start_http_server(int(port), addr=host.strip("[]"))
    return int(server.server_port)


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every unary call; streaming calls pass through uncounted (the
    services' streams are long-lived ingests, measured by their own metrics)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        service, _, method = details.method.lstrip("/").rpartition("/")
        # Typed as a synchronous behaviour in grpc's stubs; on an aio server it is a coroutine.
        inner: Any = handler.unary_unary
        duration = GRPC_DURATION.labels(service, method)

        async def timed(request: Any, context: Context) -> Any:
            started = time.perf_counter()
            failed = True
            try:
                reply = await inner(request, context)
                failed = False
                return reply
            finally:
                duration.observe(time.perf_counter() - started)
                GRPC_REQUESTS.labels(service, method, _code(context, failed)).inc()

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _code(context: Context, failed: bool) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "UNKNOWN" if failed else "OK"
