"""What the gateway's routes share for the life of the process (no durable state)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from services.gateway.audit import AuditLog
from services.gateway.clients import EmbedderClient
from services.gateway.config import GatewayConfig
from services.gateway.store_client import StoreClient
from services.gateway.worker import IngestWorkers


@dataclass
class Services:
    config: GatewayConfig
    embedder: EmbedderClient
    store: StoreClient
    workers: IngestWorkers
    audit: AuditLog


def services(request: Request) -> Services:
    result: Services = request.state.services
    return result
