"""Container healthchecks: `python -m services.healthcheck grpc HOST:PORT | http URL`.

Exits 0 when the service reports SERVING (gRPC health) or answers 200 (HTTP), else 1.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import Env
from services.common.security import TlsFiles


def _channel(target: str) -> grpc.Channel:
    # A service that serves TLS is probed over TLS with its own certificate (which must name
    # the address probed, e.g. 127.0.0.1, among its subject alternative names).
    tls = TlsFiles.from_env(Env())
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, tls.channel_credentials())


def grpc_serving(target: str, timeout: float = 3.0) -> bool:
    with _channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def http_ok(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"grpc", "http"}:
        print("usage: python -m services.healthcheck grpc HOST:PORT | http URL", file=sys.stderr)
        return 2
    kind, target = argv
    ok = grpc_serving(target) if kind == "grpc" else http_ok(target)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
