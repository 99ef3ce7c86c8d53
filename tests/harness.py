"""Starting real stacks for tests: free loopback ports, a temp data dir, the real model."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.launcher import Stack

ROOT = Path(__file__).resolve().parent.parent
MODEL_PATH = ROOT / "models" / "all-MiniLM-L6-v2.gguf"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stack_env(data_dir: Path, **overrides: str) -> dict[str, str]:
    if not MODEL_PATH.exists():
        pytest.fail(f"{MODEL_PATH} is missing: run `make model` (or `make test`, which does it)")
    store, embedder = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = {
        "RAGD_STORE_LISTEN": store,
        "RAGD_STORE_TARGET": store,
        "RAGD_EMBEDDER_LISTEN": embedder,
        "RAGD_EMBEDDER_TARGET": embedder,
        "RAGD_DB_PATH": str(data_dir / "ragd.db"),
        "RAGD_MODEL_PATH": str(MODEL_PATH),
        "RAGD_HOST": "127.0.0.1",
        "RAGD_PORT": str(free_port()),
        "RAGD_INGEST_LISTEN": f"127.0.0.1:{free_port()}",
        # Two services share the machine's two cores with the test process.
        "RAGD_EMBEDDER_THREADS": "2",
    }
    env.update(overrides)
    return env


def started_stack(tmp: Path, embedders: int = 1, **overrides: str) -> Iterator[Stack]:
    """A running stack; `embedders` > 1 starts replicas, all in RAGD_EMBEDDER_TARGET."""
    env = stack_env(tmp, **overrides)
    replicas = {f"embedder-{n}": f"127.0.0.1:{free_port()}" for n in range(2, embedders + 1)}
    if replicas and "RAGD_EMBEDDER_TARGET" not in overrides:
        env["RAGD_EMBEDDER_TARGET"] = ",".join([env["RAGD_EMBEDDER_LISTEN"], *replicas.values()])
    stack = Stack(env, log_dir=tmp / "logs", replicas=replicas)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def wait_ready(client: httpx.Client, timeout: float = 30.0) -> None:
    """Waits for the gateway's /ready: it reconnects to a restarted service within its
    reconnect backoff."""
    deadline = time.monotonic() + timeout
    while client.get("/ready").status_code != 200:
        assert time.monotonic() < deadline, client.get("/ready").text
        time.sleep(0.1)
