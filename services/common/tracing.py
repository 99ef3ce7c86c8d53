"""Optional OpenTelemetry tracing: off unless an OTLP endpoint is configured with the
standard variables (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTLP
over HTTP). Then each service exports its spans, and the trace context travels as W3C
`traceparent` in HTTP headers and gRPC metadata, so one REST call is one trace across the
gateway, the embedder and the store. Off, nothing here costs more than a function call."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

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
    """A gRPC server's span per call, continuing the caller's trace."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    # Health checks are not traced: besides being noise, grpc.health's Watch is a coroutine
    # that writes its stream, which the interceptor's stream wrapper cannot iterate.
    skip_health = filters.negate(filters.service_prefix(_HEALTH))
    return [aio_server_interceptor(filter_=skip_health)]  # type: ignore[no-untyped-call]


def client_interceptors() -> list[Any]:
    """A client span per gRPC call, its context sent along in the metadata."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters

    skip_health = filters.negate(filters.service_prefix(_HEALTH))
    return list(aio_client_interceptors(filter_=skip_health))  # type: ignore[no-untyped-call]


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
