"""What the gateway's routes share for the life of the process (no durable state)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from services.gateway.clients import EmbedderClient, StoreClient
from services.gateway.config import GatewayConfig


@dataclass
class Services:
    config: GatewayConfig
    embedder: EmbedderClient
    store: StoreClient


def services(request: Request) -> Services:
    result: Services = request.state.services
    return result
