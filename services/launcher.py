"""Starts the three services as child processes and waits for their readiness.

Used by `make run` (python -m services.run) and by the test suite, so both exercise the
same real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVICES = ("store", "embedder", "gateway")


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def spawn(name: str, env: Mapping[str, str], log_path: Path | None = None) -> Child:
    """Starts `python -m services.<name>`; output goes to log_path or is inherited."""
    out: IO[bytes] | None = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(log_path, "ab")  # noqa: SIM115 - the child owns it for its lifetime
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}"],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
        )
    finally:
        if out is not None:
            out.close()
    return Child(name, process, log_path)


def wait_grpc_serving(child: Child, target: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if not child.alive():
                raise RuntimeError(
                    f"{child.name} exited with {child.process.returncode}:\n{child.log_tail()}"
                )
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise TimeoutError(
        f"{child.name} not SERVING at {target} after {timeout}s:\n{child.log_tail()}"
    )


def wait_http_ok(child: Child, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise RuntimeError(
                f"{child.name} exited with {child.process.returncode}:\n{child.log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2.0) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{child.name} not ready at {url} after {timeout}s:\n{child.log_tail()}")


@dataclass
class Stack:
    """The three services on the given ports, sharing one environment."""

    env: dict[str, str]
    log_dir: Path | None = None
    children: dict[str, Child] = field(default_factory=dict)

    @property
    def gateway_url(self) -> str:
        host = self.env.get("RAGD_HOST", "127.0.0.1")
        return f"http://{host}:{self.env.get('RAGD_PORT', '8000')}"

    def _log(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir else None

    def start_service(self, name: str, timeout: float = 120.0) -> Child:
        child = spawn(name, self.env, self._log(name))
        self.children[name] = child
        if name == "gateway":
            wait_http_ok(child, self.gateway_url + "/health", timeout)
        else:
            listen = self.env[f"RAGD_{name.upper()}_LISTEN"]
            wait_grpc_serving(child, listen, timeout)
        return child

    def start(self, timeout: float = 120.0) -> None:
        try:
            for name in SERVICES:
                self.start_service(name, timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for name in reversed(SERVICES):
            child = self.children.get(name)
            if child is not None:
                child.stop()
