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
            self.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def terminate(self) -> None:
        """Asks the process to stop (SIGTERM) without waiting for it."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def spawn(
    name: str, env: Mapping[str, str], log_path: Path | None = None, module: str | None = None
) -> Child:
    """Starts `python -m services.<module or name>`; output goes to log_path or is inherited."""
    out: IO[bytes] | None = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(log_path, "ab")  # noqa: SIM115 - the child owns it for its lifetime
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{module or name}"],
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
    """The three services on the given ports, sharing one environment.

    `replicas` adds embedder processes (child name -> listen address) started after the
    first one; RAGD_EMBEDDER_TARGET should then list them all.
    """

    env: dict[str, str]
    log_dir: Path | None = None
    children: dict[str, Child] = field(default_factory=dict)
    replicas: dict[str, str] = field(default_factory=dict)

    @property
    def embedders(self) -> dict[str, str]:
        """Every embedder's child name and listen address."""
        return {"embedder": self.env["RAGD_EMBEDDER_LISTEN"], **self.replicas}

    @property
    def gateway_url(self) -> str:
        host = self.env.get("RAGD_HOST", "127.0.0.1")
        return f"http://{host}:{self.env.get('RAGD_PORT', '8000')}"

    @property
    def ingest_target(self) -> str:
        """The gateway's gRPC bulk-ingest address (RAGD_INGEST_LISTEN)."""
        return self.env.get("RAGD_INGEST_LISTEN", "127.0.0.1:50053")

    def _log(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir else None

    def start_service(self, name: str, timeout: float = 120.0) -> Child:
        """Starts (or restarts) a service or an embedder replica by its child name."""
        if name in self.replicas:
            listen = self.replicas[name]
            env = {**self.env, "RAGD_EMBEDDER_LISTEN": listen}
            child = spawn(name, env, self._log(name), module="embedder")
        else:
            child = spawn(name, self.env, self._log(name))
        self.children[name] = child
        if name == "gateway":
            wait_http_ok(child, self.gateway_url + "/health", timeout)
        else:
            listen = self.replicas.get(name) or self.env[f"RAGD_{name.upper()}_LISTEN"]
            wait_grpc_serving(child, listen, timeout)
        return child

    def start(self, timeout: float = 120.0) -> None:
        try:
            for name in SERVICES:
                if name == "gateway":
                    for replica in self.replicas:
                        self.start_service(replica, timeout)
                self.start_service(name, timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        # The gateway first, so that it never sees its backends vanish while still serving;
        # then the rest together, since each may spend a while draining.
        gateway = self.children.get("gateway")
        if gateway is not None:
            gateway.stop()
        rest = [child for name, child in self.children.items() if name != "gateway"]
        for child in rest:
            child.terminate()
        for child in rest:
            child.stop()
