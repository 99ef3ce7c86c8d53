"""Who is calling and what they may do: API keys from RAGD_API_KEYS (admin, the bootstrap) and
from the store (scoped, optionally limited to vector stores and rate-limited).

Plain logic, no HTTP: the middleware (auth.py) asks `Keys.identify` for a bearer token's
principal, `required_scope` for what a request needs, `admit` whether the key may go on.
Lookups in the store are cached, and every gateway polls the store's key state (GetKeyState)
at most STATE_SECONDS apart while it serves requests: a revoked key stops working within that
on every gateway (at once on the one that revoked it). A key belongs to a project and reaches
only its objects; the store enforces that for every call made on its behalf (`act_for`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from services.common import tenancy
from services.common.vocabulary import SCOPES
from services.gateway.errors import (
    ApiError,
    NotFound,
    Overloaded,
    PermissionDenied,
    is_transient,
)
from services.gateway.flusher import Flusher
from services.pb import store_pb2

log = logging.getLogger(__name__)

# A looked-up key (and its tokens used today) is trusted this long unless the key state
# changes meanwhile.
CACHE_SECONDS = 10.0
# How stale the key state may be when a request is checked: the most a revocation takes to
# reach every gateway (auth also turns on within this once the store holds a key).
STATE_SECONDS = 0.5
# The deadline of one poll: a stalled store must not hold every request for long.
STATE_TIMEOUT = 0.5
BOOTSTRAP = "bootstrap"
DEFAULT_PROJECT = "proj_default"

# Requests that only read, though they are POSTs.
_SEARCHES = re.compile(r"/v1/vector_stores/[^/]+/search|/v1/conversations(/[^/]+)?/search")
_STORE_PATH = re.compile(r"/v1/vector_stores/(?P<id>[^/]+)")


@dataclass(frozen=True)
class Principal:
    name: str
    scope: str
    # Empty: every vector store of its project.
    vector_stores: frozenset[str] = frozenset()
    requests_per_minute: int = 0
    tokens_per_day: int = 0
    embedded_tokens_today: int = 0
    project: str = DEFAULT_PROJECT
    # A key limited to some vector stores reaches its project's conversations, not only its own.
    project_conversations: bool = False

    def allows(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def reaches(self, vector_store_id: str) -> bool:
        return not self.vector_stores or vector_store_id in self.vector_stores

    def caller(self) -> tenancy.Caller:
        return tenancy.Caller(
            self.project, self.name, self.vector_stores, self.project_conversations
        )


ADMIN = Principal(BOOTSTRAP, "admin")

# The key a request (or an ingest stream's document) is served for; the store calls made
# meanwhile carry it (clients.py), and the store reaches only what it may (access.py). Unset
# for the gateway's own work (ingest workers, the history indexer) and with an open API.
_ACTING: ContextVar[tenancy.Caller | None] = ContextVar("ragd_acting_for", default=None)


def act_for(who: Principal | None, project: str = "") -> None:
    """From here on in this task (and tasks it starts), store calls are made for `who`, in
    `project` if given (an admin key's choice of project)."""
    caller = who.caller() if who is not None else None
    if caller is not None and project:
        caller = dataclasses.replace(caller, project=project)
    _ACTING.set(caller)


def acting_metadata() -> tuple[tuple[str, str], ...]:
    caller = _ACTING.get()
    return tenancy.to_metadata(caller) if caller is not None else ()


def project_for(who: Principal, requested: str) -> tuple[str, PermissionDenied | None]:
    """The project a request acts in: the key's, or for an admin key the one it names
    (OpenAI's `OpenAI-Project` header, as the SDKs send with `project=`)."""
    if not requested or requested == who.project:
        return who.project, None
    if who.scope == "admin":
        return requested, None
    return who.project, PermissionDenied(
        f"the API key {who.name!r} belongs to project {who.project!r}, not {requested[:80]!r}"
    )


def required_scope(method: str, path: str) -> str:
    if path.startswith(("/admin", "/metrics")):
        return "admin"
    if method in ("GET", "HEAD") or is_search(method, path):
        return "read"
    return "write"


def is_search(method: str, path: str) -> bool:
    return method == "POST" and _SEARCHES.fullmatch(path) is not None


def vector_store_in_path(path: str) -> str | None:
    """The vector store a /v1/vector_stores/<id>... path names."""
    found = _STORE_PATH.match(path)
    return found.group("id") if found else None


def principal_of(key: store_pb2.ApiKey) -> Principal:
    return Principal(
        key.name,
        key.scope,
        frozenset(key.vector_stores),
        key.requests_per_minute,
        key.tokens_per_day,
        key.embedded_tokens_today,
        key.project or DEFAULT_PROJECT,
        key.project_conversations,
    )


Lookup = Callable[[str], Awaitable[store_pb2.ApiKey]]
State = Callable[[], Awaitable[store_pb2.KeyState]]


class Keys:
    def __init__(
        self, bootstrap: tuple[str, ...], lookup: Lookup, state: State, clock: Callable[[], float]
    ) -> None:
        self._bootstrap = [key.encode() for key in bootstrap]
        self._lookup = lookup
        self._state = state
        self._clock = clock
        self._cache: dict[bytes, tuple[float, Principal | None]] = {}
        # (when polled, (keys, revoked)); unknown until the store first answers (requests get
        # its error meanwhile).
        self._known: tuple[float, tuple[int, int] | None] = (-1e18, None)
        self._polling = asyncio.Lock()

    async def _refresh(self) -> tuple[int, int] | None:
        """The store's key state, polled at most every STATE_SECONDS by one request at a time
        (the others meanwhile go on with the last state); a change (a key made or revoked on
        any gateway) empties the cache. Raises the store's error while it was never heard
        from; keeps the last state while it is away or slow (`state` has a short deadline)."""
        at, known = self._known
        if known is not None and (self._clock() - at < STATE_SECONDS or self._polling.locked()):
            return known
        async with self._polling:
            at, known = self._known
            if known is not None and self._clock() - at < STATE_SECONDS:
                return known
            try:
                reply = await self._state()
            except ApiError as error:
                if known is None or not is_transient(error):
                    raise
                # Asked again at the next request after STATE_SECONDS.
                self._known = (self._clock(), known)
                return known
            state = (reply.keys, reply.revoked)
            if state != known:
                self._cache.clear()
            self._known = (self._clock(), state)
            return state

    async def required(self) -> bool:
        """Whether requests need a key: bootstrap keys are set, or the store holds keys
        (revoked ones too: revoking the last key leaves the API closed; RAGD_API_KEYS then
        lets an operator in)."""
        if self._bootstrap:
            # Still polled, for revocations of the store's keys; the bootstrap keys work
            # without the store.
            with contextlib.suppress(ApiError):
                await self._refresh()
            return True
        state = await self._refresh()
        return state is not None and state[0] > 0

    def created(self) -> None:
        """A key was just made here: authentication is on from now."""
        self._known = (-1e18, self._known[1])

    def forget(self) -> None:
        """A key was revoked here: look keys up again."""
        self._cache.clear()
        self._known = (-1e18, self._known[1])

    async def identify(self, token: str) -> Principal | None:
        encoded = token.encode()
        if any(hmac.compare_digest(encoded, key) for key in self._bootstrap):
            return ADMIN
        await self._refresh()
        digest = hashlib.sha256(encoded).digest()
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        try:
            found: Principal | None = principal_of(await self._lookup(token))
        except NotFound:
            found = None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (now, found)
        return found


def admit(
    who: Principal, need: str, rate_limits: RateLimits, usage: Usage
) -> PermissionDenied | Overloaded | None:
    """Why `who` may not go on with a request that needs the scope `need` (its scope, its
    requests per minute, its tokens per day), or None; counts the request against the
    per-minute limit when it may. The REST middleware and the gRPC ingest door both ask."""
    if not who.allows(need):
        return PermissionDenied(
            f"the API key {who.name!r} has the {who.scope} scope; this request needs {need}"
        )
    wait = rate_limits.check(who)
    if wait is not None:
        return Overloaded(
            f"the API key {who.name!r} is limited to {who.requests_per_minute} requests per "
            f"minute; retry in {wait} s",
            code="rate_limit_exceeded",
            retry_after=wait,
        )
    if (
        who.tokens_per_day
        and who.embedded_tokens_today + usage.tokens(who.name) >= who.tokens_per_day
    ):
        midnight = (int(time.time()) // 86400 + 1) * 86400
        return Overloaded(
            f"the API key {who.name!r} has embedded its {who.tokens_per_day} tokens for "
            "today (UTC)",
            code="rate_limit_exceeded",
            retry_after=max(1, midnight - int(time.time())),
        )
    return None


class RateLimits:
    """Requests per minute per key, over a sliding minute (per gateway process)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}

    def check(self, principal: Principal) -> int | None:
        """None if the request may go on (and counts it), else seconds to wait."""
        limit = principal.requests_per_minute
        if limit <= 0:
            return None
        now = self._clock()
        seen = self._seen.setdefault(principal.name, deque())
        while seen and now - seen[0] >= 60.0:
            seen.popleft()
        if len(seen) >= limit:
            return max(1, int(60.0 - (now - seen[0])) + 1)
        seen.append(now)
        return None


@dataclass
class _Counts:
    requests: int = 0
    searches: int = 0
    embedded_tokens: int = 0
    bytes_stored: int = 0
    last_used_at: float = 0.0


class Usage(Flusher):
    """Per-key counts, sent to the store about once a second (RecordKeyUsage)."""

    def __init__(
        self, send: Callable[[store_pb2.RecordKeyUsageRequest], Awaitable[object]]
    ) -> None:
        super().__init__()
        self._send = send
        self._counts: dict[str, _Counts] = {}

    def count(self, name: str, *, searches: int = 0) -> None:
        counts = self._counts.setdefault(name, _Counts())
        counts.requests += 1
        counts.searches += searches
        counts.last_used_at = time.time()

    def add(self, name: str, *, tokens: int = 0, stored: int = 0) -> None:
        """Tokens embedded and bytes of new files stored for the key."""
        counts = self._counts.setdefault(name, _Counts())
        counts.embedded_tokens += tokens
        counts.bytes_stored += stored

    def tokens(self, name: str) -> int:
        """Tokens counted here and not yet sent."""
        counts = self._counts.get(name)
        return counts.embedded_tokens if counts else 0

    async def flush(self, final: bool = False) -> None:
        if not self._counts:
            return
        counts, self._counts = self._counts, {}
        request = store_pb2.RecordKeyUsageRequest(
            usages=[
                store_pb2.KeyUsage(
                    name=name,
                    requests=c.requests,
                    searches=c.searches,
                    embedded_tokens=c.embedded_tokens,
                    bytes_stored=c.bytes_stored,
                    last_used_at=c.last_used_at,
                )
                for name, c in counts.items()
                if name != BOOTSTRAP
            ]
        )
        if not request.usages:
            return  # the bootstrap keys' only: they have no record to count on
        try:
            await self._send(request)
        except ApiError as error:
            log.warning("cannot record key usage yet: %s", error.message)
            for name, c in counts.items():
                mine = self._counts.setdefault(name, _Counts())
                mine.requests += c.requests
                mine.searches += c.searches
                mine.embedded_tokens += c.embedded_tokens
                mine.bytes_stored += c.bytes_stored
                mine.last_used_at = max(mine.last_used_at, c.last_used_at)
