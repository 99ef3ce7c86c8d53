"""Optional OpenTelemetry tracing: off unless an OTLP endpoint is configured with the
standard variables (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTLP
over HTTP). Then each service exports its spans, and the trace context travels as W3C
`traceparent` in HTTP headers and gRPC metadata, so one REST call is one trace across the
gateway, the embedder and the store: the request's span with the embedder's and the store's
server spans under it. Off, nothing here costs more than a function call."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

import grpc
from opentelemetry import propagate, trace

from services.common.versions import ragd_version

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_HEALTH = "grpc.health"
_state = {"on": False}


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in _ENDPOINTS)


def setup_tracing(service: str) -> bool:
    """Installs the exporting tracer provider when wanted(); whether tracing is on."""
    if not wanted():
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or f"ragd-{service}",
            "service.version": ragd_version(),
        }
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state["on"] = True
    return True


def enabled() -> bool:
    return _state["on"]


def server_interceptors() -> list[Any]:
    """A gRPC server's span per unary call, continuing the caller's trace."""
    return [_ServerSpans()] if enabled() else []


def outgoing() -> tuple[tuple[str, str], ...]:
    """The current trace context as gRPC metadata (W3C traceparent), () when tracing is off.

    No client span per call: the callee's server span, parented to the caller's span, covers
    the hop, and on 2 cores each span cost ~0.2 ms of the gateway's CPU (created, ended and
    encoded), which made a traced search 1.05x slower with them (bench scenario 10)."""
    if not enabled():
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())


@functools.cache
def _tracer() -> trace.Tracer:
    return trace.get_tracer("ragd", ragd_version())


def _rpc_attributes(full_method: str) -> dict[str, str]:
    service, _, method = full_method.lstrip("/").rpartition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


def _grpc_code(code: Any) -> int:
    return int(code.value[0]) if isinstance(code, grpc.StatusCode) else 2


class _ServerSpans(grpc.aio.ServerInterceptor):
    """Written here rather than taken from opentelemetry-instrumentation-grpc, whose aio
    wrappers cannot wrap grpc.health's coroutine Watch; these cost a span and a propagation
    per call (bench scenario 10)."""

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if (
            handler is None
            or handler.unary_unary is None
            or details.method.startswith("/" + _HEALTH)
        ):
            return handler
        inner: Any = handler.unary_unary
        name = details.method
        attributes = _rpc_attributes(name)

        async def traced(request: Any, context: Any) -> Any:
            carrier = {key: value for key, value in context.invocation_metadata() or ()}
            with _tracer().start_as_current_span(
                name,
                context=propagate.extract(carrier),
                kind=trace.SpanKind.SERVER,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                failed = True
                try:
                    reply = await inner(request, context)
                    failed = False
                    return reply
                finally:
                    code = context.code()
                    span.set_attribute(
                        "rpc.grpc.status_code", _grpc_code(code) if code or failed else 0
                    )
                    if failed or (code and code != grpc.StatusCode.OK):
                        span.set_status(trace.StatusCode.ERROR)

        return grpc.unary_unary_rpc_method_handler(
            traced,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class HttpSpans:
    """A server span per HTTP request, continuing a caller's W3C traceparent; named for the
    method until the app names it for its route (services/gateway/metrics.py)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {
            key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
        }
        method = scope["method"]
        with _tracer().start_as_current_span(
            method,
            context=propagate.extract(carrier),
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"]},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:

            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(trace.StatusCode.ERROR)
                await send(message)

            await self.app(scope, receive, sending)


def annotate(attributes: Mapping[str, Any]) -> None:
    """Sets attributes (OpenTelemetry's gen_ai.* where they fit) on the current span."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(dict(attributes))


def name_current_span(name: str, attributes: Mapping[str, Any]) -> None:
    span = trace.get_current_span()
    if span.is_recording():
        span.update_name(name)
        span.set_attributes(dict(attributes))


def trace_id() -> str:
    """The current trace's id in hex, or "" outside a sampled span (for log lines)."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""
