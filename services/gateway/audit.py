"""The audit trail of ingest and search calls, sent to the store in the background.

`record()` only appends to a bounded in-memory queue, so it costs a search nothing; a
background task sends the queue to the store in batches (RecordAudit) about once a second.
If the store is unreachable, entries wait (up to the bound, the oldest dropped first) and go
with the next batch; a gateway that is killed loses at most the last second's entries.

Requests without a valid key cost nothing durable one by one: they are counted (the metric
ragd_http_refused_total) and written as one "refused" entry per REFUSALS_SECONDS with the
counts, however many arrive.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter, deque
from typing import Any

from prometheus_client import Counter as MetricCounter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gateway.auth import principal, project
from services.gateway.clients import Store
from services.gateway.errors import ApiError, is_transient
from services.gateway.flusher import Flusher
from services.gateway.keys import is_search, vector_store_in_path
from services.pb import store_pb2

log = logging.getLogger(__name__)

MAX_PENDING = 10_000
# The store's limit per RecordAudit call.
MAX_BATCH = 1000
REFUSALS_SECONDS = 60.0
REFUSED = MetricCounter(
    "ragd_http_refused",
    "Requests refused before any key was known, by reason (missing_key, invalid_key).",
    ["reason"],
)


class AuditLog(Flusher):
    def __init__(
        self, store: Store, flush_seconds: float = 1.0, max_pending: int = MAX_PENDING
    ) -> None:
        super().__init__(flush_seconds)
        self._store = store
        self._pending: deque[store_pb2.AuditEntry] = deque(maxlen=max_pending)
        self.dropped = 0
        self._refusals: Counter[str] = Counter()
        self._refusals_since = 0.0

    def refused(self, reason: str) -> None:
        """A request turned away without a valid key: counted, written with the others of its
        minute in one entry."""
        REFUSED.labels(reason).inc()
        if not self._refusals:
            self._refusals_since = time.time()
        self._refusals[reason] += 1

    def _gather_refusals(self, final: bool) -> None:
        now = time.time()
        if not self._refusals or (not final and now - self._refusals_since < REFUSALS_SECONDS):
            return
        counts = ", ".join(f"{reason} {count}" for reason, count in sorted(self._refusals.items()))
        total = sum(self._refusals.values())
        self.record(
            "refused",
            "",
            latency_ms=0.0,
            result_count=total,
            detail=f"{total} requests without a valid key in {now - self._refusals_since:.0f} s"
            f" ({counts})",
            at=self._refusals_since,
            error_code="invalid_api_key",
        )
        self._refusals.clear()

    def record(
        self,
        operation: str,
        vector_store_id: str,
        *,
        latency_ms: float,
        k: int = 0,
        result_count: int = 0,
        degraded: bool = False,
        detail: str = "",
        at: float | None = None,
        key_name: str = "",
        embedded_tokens: int = 0,
        error_code: str = "",
        project: str = "",
    ) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(
            store_pb2.AuditEntry(
                at=time.time() if at is None else at,
                operation=operation,
                vector_store_id=vector_store_id,
                k=k,
                latency_ms=latency_ms,
                result_count=result_count,
                degraded=degraded,
                detail=detail,
                key_name=key_name,
                embedded_tokens=embedded_tokens,
                error_code=error_code,
                project=project,
            )
        )

    async def flush(self, final: bool = False) -> bool:
        """Sends everything queued; False (entries kept) if the store is down."""
        self._gather_refusals(final)
        while self._pending:
            batch = [self._pending.popleft() for _ in range(min(MAX_BATCH, len(self._pending)))]
            try:
                await self._store.RecordAudit(store_pb2.RecordAuditRequest(entries=batch))
            except ApiError as error:
                if not is_transient(error):
                    # The store will never take these (a bug, not an outage): do not retry.
                    log.error("the store refused %d audit entries: %s", len(batch), error.message)
                    continue
                log.warning("cannot record audit entries yet: %s", error.message)
                # Back in front, in order; if the queue filled meanwhile, the newest give way.
                self._pending.extendleft(reversed(batch))
                return False
        return True


# What a route adds to its request's audit entry (operation, k, result_count, degraded,
# detail, embedded_tokens, vector_store_id), and a failed request's error code.
AUDIT_INFO = "ragd.audit"
ERROR_CODE = "ragd.error_code"
_AUDITED = ("/v1", "/admin")


class AuditMiddleware:
    """One audit entry per /v1 and /admin request: who (the key's name), what (the route's
    operation, or read/write by method), on which vector store, how it went (status, OpenAI's
    error code), how long it took. Routes with more to say (searches, embeddings) put it in
    the scope under AUDIT_INFO. Outside the key check, so refusals are recorded too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(_AUDITED) or path == "/admin/audit":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        at = time.time()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif status >= 400 and message["type"] == "http.response.body":
                # An error's body is one small JSON object in OpenAI's shape: its code.
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    scope[ERROR_CODE] = str(json.loads(message["body"])["error"]["code"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _record(scope, status, at, (time.perf_counter() - started) * 1000)


def _operation(method: str, path: str) -> str:
    """What a request was, when its route did not say (it was refused before reaching it)."""
    if is_search(method, path):
        return "search"
    if path == "/v1/embeddings":
        return "embeddings"
    if method == "DELETE":
        return "delete"
    return "read" if method in ("GET", "HEAD") else "write"


def _record(scope: Scope, status: int, at: float, latency_ms: float) -> None:
    deps: Any = scope.get("state", {}).get("services")
    if deps is None:
        return
    info: dict[str, Any] = scope.get(AUDIT_INFO, {})
    method, route = scope["method"], scope.get("route_template", scope["path"])
    if method == "DELETE":
        # Who deleted what: the ids themselves, not the route's template.
        route = scope["path"]
    who = principal(scope)
    if who is None and status == 401:
        # No key known: counted, not stored one by one (see the module's docstring).
        supplied = any(name == b"authorization" for name, _ in scope["headers"])
        deps.audit.refused("invalid_key" if supplied else "missing_key")
        return
    error_code = scope.get(ERROR_CODE) or (f"http_{status}" if status >= 400 else "")
    deps.audit.record(
        info.get("operation") or _operation(method, scope["path"]),
        info.get("vector_store_id") or vector_store_in_path(scope["path"]) or "",
        latency_ms=latency_ms,
        k=info.get("k", 0),
        result_count=info.get("result_count", 0),
        degraded=info.get("degraded", False),
        detail=info.get("detail") or f"{method} {route} {status}",
        at=at,
        key_name=who.name if who is not None else "",
        embedded_tokens=info.get("embedded_tokens", 0),
        error_code=error_code if status >= 400 else "",
        project=project(scope),
    )
