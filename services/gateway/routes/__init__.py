"""HTTP routes: thin adapters from JSON to the core pipeline and the gRPC clients."""

from __future__ import annotations

from starlette.requests import Request

from services.gateway.state import Services


def services(request: Request) -> Services:
    """The clients and settings the lifespan put in the request's state."""
    result: Services = request.state.services
    return result
