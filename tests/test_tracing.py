"""OpenTelemetry tracing through the real stack: with an OTLP endpoint set, one REST search is
one trace across the gateway, the embedder and the store, received here by a real OTLP/HTTP
receiver (the test's own HTTP server decoding the exporters' protobuf requests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from services.launcher import Stack
from tests.harness import document, started_stack


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Receiver:
    """Collects every span POSTed to /v1/traces."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.spans.extend(_spans(request))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


def _spans(request: ExportTraceServiceRequest) -> Iterator[Span]:
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield Span(
                    service=str(resource.get("service.name")),
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    attributes={a.key: _value(a.value) for a in span.attributes},
                )


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("tracing"),
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
        # Export within a tenth of a second rather than five.
        OTEL_BSP_SCHEDULE_DELAY="100",
    )


def test_one_search_is_one_trace_across_the_services(own_stack: Stack, receiver: Receiver) -> None:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=60) as api:
        file_id = api.post(
            "/v1/files",
            files={"file": ("t.txt", document(1).encode())},
            data={"purpose": "assistants"},
        ).json()["id"]
        store_id = api.post("/v1/vector_stores", json={"file_ids": [file_id]}).json()["id"]
        deadline = time.monotonic() + 60
        while api.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]["completed"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # The caller's own trace is continued (W3C trace context).
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        reply = api.post(
            f"/v1/vector_stores/{store_id}/search",
            json={"query": "which record", "mode": "hybrid"},
            headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
        )
        assert reply.status_code == 200, reply.text

    def complete(spans: list[Span]) -> bool:
        # The request's own span ends (and is exported) last, after the response's body.
        services = {span.service for span in spans}
        served = any(span.parent_id == "00f067aa0ba902b7" for span in spans)
        return served and {"ragd-gateway", "ragd-embedder", "ragd-store"} <= services

    deadline = time.monotonic() + 15
    while not complete(spans := receiver.trace(trace_id)):
        assert time.monotonic() < deadline, spans
        time.sleep(0.1)
    by_id = {span.span_id: span for span in spans}
    (root,) = [span for span in spans if span.parent_id == "00f067aa0ba902b7"]
    assert root.service == "ragd-gateway"
    assert root.name == "POST /v1/vector_stores/{vector_store_id}/search"
    assert root.attributes["http.route"] == "/v1/vector_stores/{vector_store_id}/search"
    assert root.attributes["gen_ai.operation.name"] == "retrieval"
    assert root.attributes["gen_ai.data_source.id"] == store_id

    def served(service: str, method: str) -> Span:
        (span,) = [s for s in spans if s.service == service and s.name.endswith("/" + method)]
        return span

    embed = served("ragd-embedder", "Embed")
    search = served("ragd-store", "Search")
    for server_span in (embed, search):
        # Each service's span is a child of the request's span (no client span between).
        assert server_span.parent_id == root.span_id
    # Nothing else: the whole trace hangs under the request's span.
    for span in spans:
        while span is not root:
            span = by_id[span.parent_id]
    assert embed.attributes["gen_ai.operation.name"] == "embeddings"
    assert embed.attributes["gen_ai.request.model"] == "all-MiniLM-L6-v2"
    assert embed.attributes["gen_ai.usage.input_tokens"] >= 4
