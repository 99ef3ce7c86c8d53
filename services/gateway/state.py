"""What the gateway's routes and pipelines share for the life of the process (no durable
state): the configuration and the clients of the backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.gateway.attach import Attacher
from services.gateway.audit import AuditLog
from services.gateway.chat.background import BackgroundRuns
from services.gateway.chat.upstream import ChatUpstream
from services.gateway.clients import EmbedderClient, Store
from services.gateway.config import GatewayConfig
from services.gateway.embedders import Embedders
from services.gateway.history_index import HistoryIndexer
from services.gateway.keys import Keys, RateLimits, Usage
from services.gateway.worker import IngestWorkers

if TYPE_CHECKING:
    import grpc


@dataclass
class Services:
    config: GatewayConfig
    # The served models' embedders; `embedder` is the default one.
    embedders: Embedders
    # The store's typed stub; its channel for health checks.
    store: Store
    store_channel: grpc.aio.Channel
    workers: IngestWorkers
    audit: AuditLog
    # The one attach step every door uses.
    attacher: Attacher
    # API keys: who is calling, their per-minute limits, their usage.
    keys: Keys
    rate_limits: RateLimits
    key_usage: Usage
    # The chat model of /v1/responses and /v1/chat/completions; None when not configured.
    chat: ChatUpstream | None = None
    # Embeds conversation items in the background (gateways with ingest workers only).
    history: HistoryIndexer | None = None
    # Background responses this gateway runs; None without a chat model.
    background: BackgroundRuns | None = None

    @property
    def embedder(self) -> EmbedderClient:
        return self.embedders.default
