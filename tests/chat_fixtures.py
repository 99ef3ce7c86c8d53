"""A real chat upstream for tests and benchmarks: services/local_chat.py's llama_cpp.server
on the packaged SmolLM2-135M-Instruct, on a free loopback port, logging to a file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services import local_chat
from tests.harness import free_port

CHAT_CONTEXT = local_chat.CONTEXT_TOKENS


@contextmanager
def chat_upstream(log_dir: Path, port: int | None = None) -> Iterator[str]:
    """Yields the server's base URL (…/v1)."""
    port = port or free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    threads = int(os.environ.get("RAGD_TEST_CHAT_THREADS", "2"))
    with (
        open(log_dir / f"chat-{port}.log", "ab") as log,
        local_chat.running(port, log, threads) as url,
    ):
        yield url
