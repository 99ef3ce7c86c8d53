"""Who is calling and what they may do: API keys from RAGD_API_KEYS (admin, the bootstrap) and
from the store (scoped, optionally limited to vector stores and rate-limited).

Plain logic, no HTTP: the middleware (auth.py) asks `Keys.identify` for a bearer token's
principal, `required_scope` for what a request needs, `RateLimits.check` whether the key may
go on. Lookups in the store are cached for CACHE_SECONDS, so a revoked key stops working
within that time on every gateway (at once on the gateway that revoked it).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.gateway.errors import ApiError, NotFound, is_transient
from services.gateway.flusher import Flusher
from services.pb import store_pb2

log = logging.getLogger(__name__)

SCOPES = ("read", "write", "admin")
CACHE_SECONDS = 10.0
# How often the gateway asks whether the store holds any key (auth turns on when it does).
PRESENCE_SECONDS = 5.0
BOOTSTRAP = "bootstrap"

# Requests that only read, though they are POSTs.
_SEARCHES = re.compile(r"/v1/vector_stores/[^/]+/search|/v1/conversations(/[^/]+)?/search")
_STORE_PATH = re.compile(r"/v1/vector_stores/(?P<id>[^/]+)")


@dataclass(frozen=True)
class Principal:
    name: str
    scope: str
    # Empty: every vector store.
    vector_stores: frozenset[str] = frozenset()
    requests_per_minute: int = 0
    tokens_per_day: int = 0
    tokens_today: int = 0

    def allows(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def reaches(self, store_id: str) -> bool:
        return not self.vector_stores or store_id in self.vector_stores


ADMIN = Principal(BOOTSTRAP, "admin")


def required_scope(method: str, path: str) -> str:
    if path.startswith(("/admin", "/metrics")):
        return "admin"
    if method in ("GET", "HEAD") or is_search(method, path):
        return "read"
    return "write"


def is_search(method: str, path: str) -> bool:
    return method == "POST" and _SEARCHES.fullmatch(path) is not None


def store_in_path(path: str) -> str | None:
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
        key.tokens_today,
    )


Lookup = Callable[[str], Awaitable[store_pb2.ApiKey]]
Count = Callable[[], Awaitable[int]]


class Keys:
    def __init__(
        self, bootstrap: tuple[str, ...], lookup: Lookup, count: Count, clock: Callable[[], float]
    ) -> None:
        self._bootstrap = [key.encode() for key in bootstrap]
        self._lookup = lookup
        self._count = count
        self._clock = clock
        self._cache: dict[bytes, tuple[float, Principal | None]] = {}
        # Unknown until the store first answers (requests get its error meanwhile).
        self._present: tuple[float, bool | None] = (-1e18, None)

    async def required(self) -> bool:
        """Whether requests need a key: bootstrap keys are set, or the store holds keys
        (revoked ones too: revoking the last key leaves the API closed; RAGD_API_KEYS then
        lets an operator in)."""
        if self._bootstrap:
            return True
        at, present = self._present
        if present is not None and self._clock() - at < PRESENCE_SECONDS:
            return present
        try:
            present = await self._count() > 0
        except ApiError as error:
            if present is None or not is_transient(error):
                # Never heard from the store: it cannot be known whether a key is needed.
                raise
            # The store is away: keep the last answer.
            return present
        self._present = (self._clock(), present)
        return present

    def created(self) -> None:
        """A key was just made here: authentication is on from now."""
        self._present = (self._clock(), True)

    def forget(self) -> None:
        """A key was revoked here: look keys up again."""
        self._cache.clear()

    async def identify(self, token: str) -> Principal | None:
        encoded = token.encode()
        if any(hmac.compare_digest(encoded, key) for key in self._bootstrap):
            return ADMIN
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

    async def flush(self) -> None:
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
