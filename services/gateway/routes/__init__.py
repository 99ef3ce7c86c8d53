"""HTTP routes: thin adapters from JSON to the core pipeline and the gRPC clients."""

from __future__ import annotations

from starlette.requests import Request

from services.gateway.state import Services


def services(request: Request) -> Services:
    """The clients and settings the lifespan put in the request's state."""
    result: Services = request.state.services
    return result


# The OpenAI SDK's poll helpers (vector_stores.files.poll, file_batches.poll) wait this many
# milliseconds between retrievals when the response names it.
POLL_AFTER_HEADER = "openai-poll-after-ms"


def poll_headers(request: Request) -> dict[str, str]:
    """The headers of an object a client polls until it finishes."""
    return {POLL_AFTER_HEADER: str(services(request).config.poll_after_ms)}
