"""The processes under test: the ragd stack and llama-cpp-python's own server, on free ports.

Both are timed from spawn to ready (cold start) and measured for resident memory.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from services.launcher import SERVICES, Child, Stack, wait_http_ok

ROOT = Path(__file__).resolve().parent.parent
MODEL_PATH = ROOT / "models" / "all-MiniLM-L6-v2.gguf"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mb(pid: int) -> float:
    """Resident set size of one process, in MiB."""
    return float(psutil.Process(pid).memory_info().rss) / (1 << 20)


def stack_env(data_dir: Path, threads: int) -> dict[str, str]:
    store, embedder = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    return {
        "RAGD_STORE_LISTEN": store,
        "RAGD_STORE_TARGET": store,
        "RAGD_EMBEDDER_LISTEN": embedder,
        "RAGD_EMBEDDER_TARGET": embedder,
        "RAGD_DB_PATH": str(data_dir / "ragd.db"),
        "RAGD_MODEL_PATH": str(MODEL_PATH),
        "RAGD_HOST": "127.0.0.1",
        "RAGD_PORT": str(free_port()),
        "RAGD_INGEST_LISTEN": f"127.0.0.1:{free_port()}",
        "RAGD_EMBEDDER_THREADS": str(threads),
        "RAGD_LOG_LEVEL": "WARNING",
    }


@dataclass
class RunningStack:
    stack: Stack
    # Seconds from spawn to SERVING (gRPC health) or to /health (gateway), per service.
    cold_start: dict[str, float]
    db_path: Path

    @property
    def url(self) -> str:
        return self.stack.gateway_url

    @property
    def embedder_target(self) -> str:
        return self.stack.env["RAGD_EMBEDDER_LISTEN"]

    @property
    def store_target(self) -> str:
        return self.stack.env["RAGD_STORE_LISTEN"]

    def pids(self) -> dict[str, int]:
        return {name: child.pid for name, child in self.stack.children.items()}

    def rss(self) -> dict[str, float]:
        return {name: rss_mb(pid) for name, pid in self.pids().items()}

    @property
    def directory(self) -> Path:
        return self.db_path.parent

    def db_bytes(self) -> int:
        """The database with its write-ahead log, as it stands on disk."""
        wal = self.db_path.with_name(self.db_path.name + "-wal")
        return sum(path.stat().st_size for path in (self.db_path, wal) if path.exists())


def _wait_ready(url: str, timeout: float) -> None:
    """GET /ready?require=embedder until 200: the gateway reaches both services."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/ready?require=embedder", timeout=2.0) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"the stack at {url} was not ready after {timeout}s")


@contextmanager
def running_stack(
    data_dir: Path,
    threads: int,
    replicas: dict[str, dict[str, str]] | None = None,
    models: dict[str, str] | None = None,
    **overrides: str,
) -> Iterator[RunningStack]:
    """The three services on free ports, started one after the other as `make run` does;
    `overrides` are RAGD_* settings, `replicas` more embedders (child name -> their own
    settings, e.g. another model), started before the gateway, and `models` the gateway's
    RAGD_EMBEDDERS as model name -> embedder child name."""
    data_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(
        {**stack_env(data_dir, threads), **overrides},
        log_dir=data_dir / "logs",
        replicas={name: f"127.0.0.1:{free_port()}" for name in replicas or {}},
        child_env=dict(replicas or {}),
    )
    if models:
        targets = stack.embedders
        pairs = " ".join(f"{model}={targets[child]}" for model, child in models.items())
        stack.child_env["gateway"] = {"RAGD_EMBEDDERS": pairs}
    cold: dict[str, float] = {}
    try:
        started = time.monotonic()
        for name in (*SERVICES[:-1], *stack.replicas, SERVICES[-1]):
            began = time.monotonic()
            stack.start_service(name)
            cold[name] = time.monotonic() - began
        _wait_ready(stack.gateway_url, 60.0)
        cold["stack"] = time.monotonic() - started
        yield RunningStack(stack, cold, data_dir / "ragd.db")
    finally:
        stack.stop()
        # The logs stay with the results; a database of 100k vectors need not (unless asked:
        # RAGD_BENCH_KEEP_DATA=1 keeps it for a later look).
        kept = os.environ.get("RAGD_BENCH_KEEP_DATA") == "1"
        for path in [] if kept else data_dir.glob("ragd.db*"):
            if path.is_dir():
                shutil.rmtree(path)  # the full-text indexes
            else:
                path.unlink()


@dataclass
class LlamaServer:
    """`python -m llama_cpp.server --embedding true`: what a user might run instead."""

    child: Child
    url: str
    cold_start: float
    command: list[str] = field(default_factory=list)

    def rss(self) -> float:
        return rss_mb(self.child.pid)


def llama_server_args(port: int, threads: int) -> list[str]:
    # Same model, thread budget, context and batch sizes, and flash attention as the embedder,
    # so the comparison is between servers rather than settings.
    return [
        "--model", str(MODEL_PATH), "--embedding", "true",
        "--n_ctx", "512", "--n_batch", "512", "--n_ubatch", "512",
        "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--flash_attn", "true", "--verbose", "false",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip


@contextmanager
def llama_server(log_dir: Path, threads: int) -> Iterator[LlamaServer]:
    port = free_port()
    args = llama_server_args(port, threads)
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with (log_dir / "llama_cpp_server.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", *args], stdout=log, stderr=subprocess.STDOUT
        )
    child = Child("llama_cpp.server", process, log_dir / "llama_cpp_server.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(child, url + "/v1/models", 120.0)
        yield LlamaServer(child, url, time.monotonic() - started, ["llama_cpp.server", *args])
    finally:
        child.stop()
