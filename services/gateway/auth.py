"""Bearer API keys for /v1, /admin and /metrics; health, readiness and /version stay open.

Keys are the bootstrap ones (RAGD_API_KEYS, admin) and the store's (scoped: read < write <
admin; optionally limited to vector stores, to requests per minute and to embedded tokens per
day). Without either, the API is open, as before keys existed.
"""

from __future__ import annotations

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
from services.gateway.keys import (
    Principal,
    act_for,
    admit,
    project_for,
    required_scope,
    vector_store_in_path,
)

# /metrics too: its figures name vector stores' activity and the load on the service.
PROTECTED = ("/v1", "/admin", "/metrics")
# Where a request's principal is left for the routes (None: the API is open), and the project
# it acts in.
PRINCIPAL = "ragd.principal"
PROJECT = "ragd.project"
# OpenAI's SDKs send the client's `project` in this header; an admin key acts in the project
# it names, any other key must name its own.
PROJECT_HEADER = b"openai-project"


def principal(scope: Scope) -> Principal | None:
    found: Principal | None = scope.get(PRINCIPAL)
    return found


def project(scope: Scope) -> str:
    """The project a request acts in; "" when the API is open."""
    found: str = scope.get(PROJECT, "")
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
        requested = headers.get(PROJECT_HEADER, b"").decode("latin-1").strip()
        acting, mismatch = project_for(who, requested)
        scope[PROJECT] = acting
        refusal = mismatch or refuse(who, scope["method"], scope["path"], deps)
        if refusal is not None:
            await response(refusal)(scope, receive, send)
            return
        path = scope["path"]
        deps.key_usage.count(who.name, searches=int(path.endswith("/search")))
        # Every store call of this request is made for the key, in its project.
        act_for(who, acting)
        await self.app(scope, receive, send)


def refuse(
    who: Principal, method: str, path: str, deps: Any
) -> PermissionDenied | NotFound | Overloaded | None:
    """Why `who` may not make this request, or None (then it counts against its limits)."""
    need = required_scope(method, path)
    vector_store_id = vector_store_in_path(path)
    if who.allows(need) and vector_store_id is not None and not who.reaches(vector_store_id):
        # As for an id that does not exist: a limited key learns nothing of other stores.
        return NotFound(f"no vector store with id {vector_store_id!r}")
    if who.allows(need) and who.vector_stores and method == "POST" and path == "/v1/vector_stores":
        return PermissionDenied(
            f"the API key {who.name!r} is limited to some vector stores and cannot create one"
        )
    return admit(who, need, deps.rate_limits, deps.key_usage)
