"""Runs the gateway under uvicorn."""

from __future__ import annotations

import logging

import uvicorn

from services.common.grpc_server import setup_logging
from services.gateway.app import create_app
from services.gateway.config import GatewayConfig

log = logging.getLogger(__name__)


def main() -> None:
    config = GatewayConfig.from_env()
    setup_logging(config.log_level)
    log.info(
        "gateway on http://%s:%d (embedder %s, store %s)",
        config.host,
        config.port,
        config.embedder_target,
        config.store_target,
    )
    uvicorn.run(
        create_app(config),
        host=config.host,
        port=config.port,
        log_level=config.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
