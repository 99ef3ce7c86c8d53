"""Starts the three services as child processes and waits for their readiness.

Used by `make run` (python -m services.run) and by the test suite, so both exercise the
same real processes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.ports_file import read_ports

SERVICES = ("store", "embedder", "gateway")
# Litestream beside the store when RAGD_REPLICA_URL is set (services/store/replicate.py).
REPLICATOR = "replicator"


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
        except urllib.error.HTTPError as error:
            # It holds the connection (a gateway shutting down answers 503): close it.
            error.close()
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{child.name} not ready at {url} after {timeout}s:\n{child.log_tail()}")


def wait_ports_file(child: Child, path: Path, timeout: float) -> dict[str, int]:
    """The ports a child reports in its ports file (services/common/ports_file.py)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ports = read_ports(path)
        if ports is not None:
            return ports
        if not child.alive():
            raise RuntimeError(
                f"{child.name} exited with {child.process.returncode}:\n{child.log_tail()}"
            )
        time.sleep(0.05)
    raise TimeoutError(f"{child.name} wrote no {path} after {timeout}s:\n{child.log_tail()}")


def _port(address: str) -> str:
    return address.rsplit(":", 1)[1]


def _with_port(address: str, port: int) -> str:
    return f"{address.rsplit(':', 1)[0]}:{port}"


@dataclass
class Stack:
    """The three services on the given addresses, sharing one environment.

    `replicas` adds embedder processes (child name -> listen address) started after the
    first one. A listen address on port 0 (RAGD_PORT=0 for the gateway's HTTP) lets the
    service pick a free port and report it in a ports file; the services started after it,
    and the properties below, use the port it got, and a restart asks for the same port
    again so that clients reconnect. The gateway's RAGD_STORE_TARGET and
    RAGD_EMBEDDER_TARGET default to the store's and every embedder's address.
    """

    env: dict[str, str]
    log_dir: Path | None = None
    children: dict[str, Child] = field(default_factory=dict)
    replicas: dict[str, str] = field(default_factory=dict)
    # Settings of one child only (child name -> variables), e.g. another model's embedder.
    child_env: dict[str, dict[str, str]] = field(default_factory=dict)
    # What each child reported when it was started on port 0: child name -> kind -> port.
    bound: dict[str, dict[str, int]] = field(default_factory=dict)
    # Where the children write their ports files; made when first needed, removed by stop().
    _ports_dir: Path | None = field(default=None, init=False, repr=False)

    def _asked(self, name: str) -> dict[str, str]:
        """The addresses a child is configured to listen on, by kind."""
        asked = self._asked_services(name)
        metrics = {**self.env, **self.child_env.get(name, {})}.get("RAGD_METRICS_LISTEN")
        if metrics:
            asked["metrics"] = metrics
        return asked

    def _asked_services(self, name: str) -> dict[str, str]:
        if name == "gateway":
            host = self.env.get("RAGD_HOST", "127.0.0.1")
            asked = {"http": f"{host}:{self.env.get('RAGD_PORT', '8000')}"}
            ingest = self.env.get("RAGD_INGEST_LISTEN", "127.0.0.1:50053")
            if ingest.lower() != "off":
                asked["ingest"] = ingest
            return asked
        if name in self.replicas:
            return {"grpc": self.replicas[name]}
        return {"grpc": self.env[f"RAGD_{name.upper()}_LISTEN"]}

    def _addresses(self, name: str) -> dict[str, str]:
        """A child's addresses with the ports it reported: where it listens."""
        bound = self.bound.get(name, {})
        return {
            kind: _with_port(address, bound[kind]) if kind in bound else address
            for kind, address in self._asked(name).items()
        }

    @property
    def store_target(self) -> str:
        return self._addresses("store")["grpc"]

    @property
    def embedders(self) -> dict[str, str]:
        """Every embedder's child name and address."""
        return {name: self._addresses(name)["grpc"] for name in ("embedder", *self.replicas)}

    @property
    def gateway_url(self) -> str:
        return f"http://{self._addresses('gateway')['http']}"

    @property
    def ingest_target(self) -> str:
        """The gateway's gRPC bulk-ingest address ("off" when RAGD_INGEST_LISTEN is)."""
        return self._addresses("gateway").get("ingest", "off")

    def metrics_url(self, name: str) -> str:
        """A child's /metrics endpoint of its own (RAGD_METRICS_LISTEN)."""
        return f"http://{self._addresses(name)['metrics']}/metrics"

    def _log(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir else None

    def _ports_file(self, name: str) -> Path:
        if self._ports_dir is None:
            self._ports_dir = Path(tempfile.mkdtemp(prefix="ragd-ports-"))
        return self._ports_dir / f"{name}.json"

    def _child_env(self, name: str) -> dict[str, str]:
        addresses = self._addresses(name)
        if "metrics" in addresses:
            return {**self._service_env(name), "RAGD_METRICS_LISTEN": addresses["metrics"]}
        return self._service_env(name)

    def _service_env(self, name: str) -> dict[str, str]:
        addresses = self._addresses(name)
        if name == "gateway":
            env = {**self.env, "RAGD_PORT": _port(addresses["http"])}
            if "ingest" in addresses:
                env["RAGD_INGEST_LISTEN"] = addresses["ingest"]
            env.setdefault("RAGD_STORE_TARGET", self.store_target)
            env.setdefault("RAGD_EMBEDDER_TARGET", ",".join(self.embedders.values()))
            return {**env, **self.child_env.get(name, {})}
        variable = (
            "RAGD_EMBEDDER_LISTEN" if name in self.replicas else f"RAGD_{name.upper()}_LISTEN"
        )
        return {**self.env, **self.child_env.get(name, {}), variable: addresses["grpc"]}

    def start_service(self, name: str, timeout: float = 120.0) -> Child:
        """Starts (or restarts, on the same ports) a service or an embedder replica by its
        child name."""
        deadline = time.monotonic() + timeout
        env = self._child_env(name)
        unknown = [kind for kind, address in self._addresses(name).items() if _port(address) == "0"]
        ports_file = None
        if unknown:
            ports_file = self._ports_file(name)
            # A file left by an earlier run of this child must not pass for this one's.
            ports_file.unlink(missing_ok=True)
            env["RAGD_PORTS_FILE"] = str(ports_file)
        module = "embedder" if name in self.replicas else None
        child = spawn(name, env, self._log(name), module=module)
        self.children[name] = child
        if ports_file is not None:
            ports = wait_ports_file(child, ports_file, timeout)
            missing = [kind for kind in unknown if kind not in ports]
            if missing:
                raise RuntimeError(f"{name} reported {ports} in {ports_file}, without {missing}")
            self.bound[name] = {kind: ports[kind] for kind in unknown}
        remaining = max(deadline - time.monotonic(), 1.0)
        if name == "gateway":
            wait_http_ok(child, self.gateway_url + "/health", remaining)
        else:
            wait_grpc_serving(child, self._addresses(name)["grpc"], remaining)
        return child

    def start_replicator(self) -> Child:
        """Starts Litestream on the store's database. Call it once the store serves: a store
        that lost its database restores it from the replica before it serves, and Litestream
        must find the restored one, not an absent file."""
        env = {**self.env, **self.child_env.get(REPLICATOR, {})}
        child = spawn(REPLICATOR, env, self._log(REPLICATOR), module="store.replicate")
        self.children[REPLICATOR] = child
        return child

    def start(self, timeout: float = 120.0) -> None:
        try:
            for name in SERVICES:
                if name == "gateway":
                    for replica in self.replicas:
                        self.start_service(replica, timeout)
                self.start_service(name, timeout)
                if name == "store" and self.env.get("RAGD_REPLICA_URL"):
                    self.start_replicator()
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
        if self._ports_dir is not None:
            shutil.rmtree(self._ports_dir, ignore_errors=True)
            self._ports_dir = None
