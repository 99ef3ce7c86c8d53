"""Bearer API keys for /v1, /admin and /metrics; health, readiness and /version stay open.

Keys are the bootstrap ones (RAGD_API_KEYS, admin) and the store's (scoped: read < write <
admin; optionally limited to vector stores, to requests per minute and to embedded tokens per
day). Without either, the API is open, as before keys existed.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway.errors import (
    ApiError,
    NotFound,
    Overloaded,
    PermissionDenied,
    Unauthenticated,
)
from services.gateway.http_errors import response
from services.gateway.keys import Principal, required_scope, store_in_path

# /metrics too: its figures name vector stores' activity and the load on the service.
PROTECTED = ("/v1", "/admin", "/metrics")
# Where a request's principal is left for the routes (None: the API is open).
PRINCIPAL = "ragd.principal"


def principal(scope: Scope) -> Principal | None:
    found: Principal | None = scope.get(PRINCIPAL)
    return found


def key_name(scope: Scope) -> str:
    """The name of the request's API key; "" when the API is open."""
    who = principal(scope)
    return who.name if who is not None else ""


def charge(scope: Scope, *, tokens: int = 0, stored: int = 0) -> None:
    """Counts what a request cost against its key: tokens embedded (the key's daily limit
    counts them), bytes of new files stored."""
    who = principal(scope)
    if who is not None and (tokens or stored):
        scope["state"]["services"].key_usage.add(who.name, tokens=tokens, stored=stored)


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED):
            await self.app(scope, receive, send)
            return
        deps: Any = scope["state"]["services"]
        headers = dict(scope["headers"])
        supplied = headers.get(b"authorization", b"")
        scheme, _, token = supplied.partition(b" ")
        who = None
        try:
            required = await deps.keys.required()
            if required and scheme.lower() == b"bearer" and token.strip():
                who = await deps.keys.identify(token.strip().decode("latin-1"))
        except ApiError as error:
            # The store cannot say who this is (it is away): refuse, in OpenAI's shape.
            await response(error)(scope, receive, send)
            return
        if not required:
            await self.app(scope, receive, send)
            return
        if who is None:
            message = (
                "missing API key: send 'Authorization: Bearer <key>'"
                if not supplied
                else "invalid API key"
            )
            await response(Unauthenticated(message))(scope, receive, send)
            return
        # Known from here on, refused or not: the audit log names the key.
        scope[PRINCIPAL] = who
        refusal = refuse(who, scope["method"], scope["path"], deps)
        if refusal is not None:
            await response(refusal)(scope, receive, send)
            return
        path = scope["path"]
        deps.key_usage.count(who.name, searches=int(path.endswith("/search")))
        await self.app(scope, receive, send)


def refuse(
    who: Principal, method: str, path: str, deps: Any
) -> PermissionDenied | NotFound | Overloaded | None:
    """Why `who` may not make this request, or None."""
    need = required_scope(method, path)
    if not who.allows(need):
        return PermissionDenied(
            f"the API key {who.name!r} has the {who.scope} scope; this request needs {need}"
        )
    store_id = store_in_path(path)
    if store_id is not None and not who.reaches(store_id):
        # As for an id that does not exist: a limited key learns nothing of other stores.
        return NotFound(f"no vector store with id {store_id!r}")
    if who.vector_stores and method == "POST" and path == "/v1/vector_stores":
        return PermissionDenied(
            f"the API key {who.name!r} is limited to some vector stores and cannot create one"
        )
    wait = deps.rate_limits.check(who)
    if wait is not None:
        return Overloaded(
            f"the API key {who.name!r} is limited to {who.requests_per_minute} requests per "
            f"minute; retry in {wait} s",
            code="rate_limit_exceeded",
            retry_after=wait,
        )
    if who.tokens_per_day:
        used = who.tokens_today + deps.key_usage.tokens(who.name)
        if used >= who.tokens_per_day:
            midnight = (int(time.time()) // 86400 + 1) * 86400
            return Overloaded(
                f"the API key {who.name!r} has embedded its {who.tokens_per_day} tokens for "
                "today (UTC)",
                code="rate_limit_exceeded",
                retry_after=max(1, midnight - int(time.time())),
            )
    return None
