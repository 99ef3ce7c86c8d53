"""Bearer API keys for /v1 and /admin routes; health and readiness stay open."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway.errors import Unauthenticated
from services.gateway.http_errors import response

# /metrics too: its figures name vector stores' activity and the load on the service.
PROTECTED = ("/v1", "/admin", "/metrics")


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or not scope["path"].startswith(PROTECTED):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        supplied = headers.get(b"authorization", b"")
        scheme, _, token = supplied.partition(b" ")
        if scheme.lower() == b"bearer" and any(
            hmac.compare_digest(token.strip(), key) for key in self.keys
        ):
            await self.app(scope, receive, send)
            return
        message = (
            "missing API key: send 'Authorization: Bearer <key>'"
            if not supplied
            else "invalid API key"
        )
        await response(Unauthenticated(message))(scope, receive, send)
