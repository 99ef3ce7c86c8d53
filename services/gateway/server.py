"""Runs the gateway under uvicorn."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette
from uvicorn.config import STARTUP_FAILURE

from services.common.logs import setup_logging
from services.common.metrics import serve_metrics
from services.common.ports_file import ports_file_from_env, write_ports
from services.common.tracing import setup_tracing
from services.gateway.app import create_app
from services.gateway.config import GatewayConfig

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn's server, calling `on_started` with the bound HTTP port once the app has
    started and the socket serves."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[int], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn binds the socket itself: a socket bound here and handed over would reach
        # uvloop without TCP_NODELAY, and every keep-alive request would wait ~40 ms for a
        # delayed ACK.
        await super().startup(sockets)
        if self.started:
            self._on_started(self.servers[0].sockets[0].getsockname()[1])


def _bound_ports(app: Starlette, http_port: int) -> dict[str, int]:
    ports = {"http": http_port}
    # The lifespan sets it once the gRPC ingest server listens (never when RAGD_INGEST_LISTEN
    # is "off").
    ingest_port: int | None = getattr(app.state, "ingest_port", None)
    if ingest_port is not None:
        ports["ingest"] = ingest_port
    metrics_port: int | None = getattr(app.state, "metrics_port", None)
    if metrics_port is not None:
        ports["metrics"] = metrics_port
    return ports


def main() -> None:
    # Ingest workers chunk text on threads of this process: a short GIL switch interval keeps
    # them from holding up the event loop (a search's handling) for Python's default 5 ms at
    # a time.
    sys.setswitchinterval(0.0005)
    config = GatewayConfig.from_env()
    ports_file = ports_file_from_env()
    setup_logging(config.log_level, "gateway")
    setup_tracing("gateway")
    app = create_app(config)
    server_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level.lower(),
        # uvicorn's records go to the root handler setup_logging made (text or JSON).
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )

    def started(port: int) -> None:
        if config.metrics_listen is not None:
            app.state.metrics_port = serve_metrics(config.metrics_listen)
        log.info(
            "gateway on http://%s:%d (embedder %s, store %s)",
            config.host,
            port,
            " ".join(
                f"{spec.name or ''}{'=' if spec.name else ''}{spec.target}"
                for spec in config.embedder_specs
            ),
            config.store_target,
        )
        if ports_file is not None:
            write_ports(ports_file, _bound_ports(app, port))

    server = _Server(server_config, started)
    # uvicorn raises the SIGINT it handled again once it has shut down; as uvicorn.run does,
    # that is a clean exit.
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        # As uvicorn.run does: a process whose server never started has failed.
        raise SystemExit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
