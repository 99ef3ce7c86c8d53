"""Who may call a gRPC service: bearer tokens checked by a server interceptor, and optional
mutual TLS with grpc's SSL credentials.

The store and the embedder take a shared service token (RAGD_SERVICE_TOKEN, or a file named by
RAGD_SERVICE_TOKEN_FILE) that the gateway sends on every call; when it is set, a call without
it is refused (UNAUTHENTICATED), whatever it asks. The gateway's public ingest port checks the
API keys the same way. Health checks stay open: probes see only SERVING or not.

With RAGD_TLS_CERT and RAGD_TLS_KEY (PEM files) a service listens with TLS, and with
RAGD_TLS_CA as well it requires client certificates signed by that CA; the gateway presents
its own certificate and checks the services' against the CA (see README, Security).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import grpc

from services.common.config import ConfigError, Env
from services.common.grpc_server import Context

AUTHORIZATION = "authorization"
_HEALTH_PREFIX = "/grpc.health."

# Generic only in grpc's type stubs.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def bearer_metadata(token: str) -> tuple[str, str]:
    return (AUTHORIZATION, f"Bearer {token}")


class BearerAuth(grpc.aio.ServerInterceptor):
    """Lets a call through only with `authorization: Bearer <one of tokens>`; health is open.

    With no tokens every call goes through (authentication is off). `what` names the secret
    in messages ("API key", "service token") and `hint` says where it comes from.
    """

    def __init__(self, tokens: Sequence[str], what: str, hint: str) -> None:
        self._tokens = [token.encode() for token in tokens]
        self._what = what
        self._hint = hint

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if (
            not self._tokens
            or handler is None
            or handler_call_details.method.startswith(_HEALTH_PREFIX)
        ):
            return handler
        supplied = ""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == AUTHORIZATION:
                supplied = value if isinstance(value, str) else value.decode()
        scheme, _, token = supplied.partition(" ")
        if scheme.lower() == "bearer" and any(
            hmac.compare_digest(token.strip().encode(), known) for known in self._tokens
        ):
            return handler
        message = (
            f"missing {self._what}: send the metadata 'authorization: Bearer <{self._hint}>'"
            if not supplied
            else f"invalid {self._what}"
        )
        return _refusal(handler, message)


def _refusal(handler: Handler, message: str) -> Handler:
    async def refuse(request: Any, context: Context) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


def service_token(env: Env) -> str | None:
    """RAGD_SERVICE_TOKEN, or the content of the file RAGD_SERVICE_TOKEN_FILE names."""
    return env.secret("SERVICE_TOKEN")


def service_auth(token: str | None) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors of a service that takes the service token (none when it is unset)."""
    if not token:
        return []
    return [BearerAuth([token], "service token", "RAGD_SERVICE_TOKEN")]


@dataclass(frozen=True)
class TlsFiles:
    """This process's certificate and key, and the CA its peers' certificates must chain to."""

    cert: bytes
    key: bytes
    ca: bytes | None

    @classmethod
    def from_env(cls, env: Env) -> TlsFiles | None:
        cert, key, ca = env.optional("TLS_CERT"), env.optional("TLS_KEY"), env.optional("TLS_CA")
        if not cert and not key:
            if ca:
                raise ConfigError("RAGD_TLS_CA needs RAGD_TLS_CERT and RAGD_TLS_KEY as well")
            return None
        if not cert or not key:
            raise ConfigError("set both RAGD_TLS_CERT and RAGD_TLS_KEY (PEM files), or neither")
        return cls(
            _read(cert, "TLS_CERT"), _read(key, "TLS_KEY"), _read(ca, "TLS_CA") if ca else None
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        # With a CA, clients must present a certificate it signed: mutual TLS.
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=bool(self.ca)
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


def _read(path: str, name: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"RAGD_{name}={path}: {error.strerror}") from None


def listen(server: grpc.aio.Server, address: str, tls: TlsFiles | None) -> int:
    """Binds `address`, with TLS when configured; the bound port (0 if it failed)."""
    if tls is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, tls.server_credentials())
