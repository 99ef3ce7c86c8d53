"""Starting real stacks for tests: every service on a port of its own choosing, a temp data
dir, the real model."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from services.launcher import Stack
from tests.embedder_fixtures import require_model

ROOT = Path(__file__).resolve().parent.parent
# Readiness with every dependency of the tests' stacks up (a chat upstream is not one).
READY_STRICT = "/ready?require=embedder"


def free_port() -> int:
    """A loopback port nothing listens on, for tests of unreachable addresses.

    Only that: by the time a process binds it, another may have taken it, so the services the
    tests start bind port 0 instead.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stack_env(data_dir: Path, **overrides: str) -> dict[str, str]:
    # Port 0 everywhere: each service reports the port it got (see services/launcher.py),
    # and the gateway's targets default to them.
    env = {
        "RAGD_STORE_LISTEN": "127.0.0.1:0",
        "RAGD_EMBEDDER_LISTEN": "127.0.0.1:0",
        "RAGD_DB_PATH": str(data_dir / "ragd.db"),
        "RAGD_MODEL_PATH": str(require_model()),
        "RAGD_HOST": "127.0.0.1",
        "RAGD_PORT": "0",
        "RAGD_INGEST_LISTEN": "127.0.0.1:0",
        # Two services share the machine's two cores with the test process.
        "RAGD_EMBEDDER_THREADS": "2",
    }
    env.update(overrides)
    return env


def started_stack(tmp: Path, embedders: int = 1, **overrides: str) -> Iterator[Stack]:
    """A running stack; `embedders` > 1 starts replicas, all in the gateway's target."""
    env = stack_env(tmp, **overrides)
    replicas = {f"embedder-{n}": "127.0.0.1:0" for n in range(2, embedders + 1)}
    stack = Stack(env, log_dir=tmp / "logs", replicas=replicas)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def ok(response: httpx.Response) -> Any:
    """The JSON of a response that must be a 200."""
    assert response.status_code == 200, response.text
    return response.json()


def wait_ready(client: httpx.Client, timeout: float = 30.0) -> None:
    """Waits until the gateway reaches the store and the embedder again (/ready with the
    embedder required: plain /ready is 200 without it): it reconnects to a restarted service
    within its reconnect backoff."""
    deadline = time.monotonic() + timeout
    while client.get(READY_STRICT).status_code != 200:
        assert time.monotonic() < deadline, client.get(READY_STRICT).text
        time.sleep(0.1)


def document(index: int) -> str:
    """A text of several chunks, different for each index."""
    paragraphs = [
        f"Document {index}, part {part}: the {index}th record describes item {index * 7 + part} "
        "with several plain sentences so that it spans more than one chunk. " * 4
        for part in range(3)
    ]
    return "\n\n".join(paragraphs)
