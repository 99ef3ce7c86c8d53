"""Server plumbing shared by the gRPC services: health and graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

# A servicer method's context; its request and response types are the method's own.
Context = grpc.aio.ServicerContext[Any, Any]

# Generous message limits: a batch of vectors or chunk texts easily passes gRPC's 4 MB default.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


def add_health(server: grpc.aio.Server) -> health.aio.HealthServicer:
    """Registers grpc.health.v1; callers mark services SERVING once they are ready."""
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer


async def set_serving(
    servicer: health.aio.HealthServicer, service_names: list[str], serving: bool
) -> None:
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ["", *service_names]:
        await servicer.set(name, status)


async def serve_until_signalled(
    server: grpc.aio.Server,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    grace: float = 5.0,
) -> None:
    """Runs a started server until SIGINT/SIGTERM, then stops it gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down (grace %.1fs)", grace)
    if on_stop is not None:
        await on_stop()
    await server.stop(grace)
