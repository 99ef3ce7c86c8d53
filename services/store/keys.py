"""API keys as records: a name, a scope, optionally the vector stores it may reach, limits,
and usage counters. The key itself is shown once, when made, and never stored: the store keeps
its sha256 and finds a presented key by that (a key is 256 random bits, so an unsalted digest
is as good as a slow hash here and costs microseconds per request)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Sequence
from typing import Any

from services.common.vocabulary import SCOPES
from services.store import projects
from services.store.db import atomic
from services.store.errors import InvalidArgument, KeyExists, KeyNotFound, VectorStoreNotFound
from services.store.records import DEFAULT_PROJECT, ApiKey, KeyState, KeyUsage
from services.store.sql import Connection, dialect

PREFIX = "rk-"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DAY_SECONDS = 86400

_COLUMNS = (
    "k.name, k.scope, k.vector_stores, k.requests_per_minute, k.tokens_per_day, k.created_at,"
    " k.last_used_at, k.revoked_at, k.requests, k.searches, k.embedded_tokens, k.bytes_stored,"
    " coalesce(d.embedded_tokens, 0), p.public_id, k.project_conversations"
)
_FROM = (
    "FROM api_keys k JOIN projects p ON p.id = k.project_id"
    " LEFT JOIN api_key_days d ON d.key_id = k.id AND d.day = ?"
)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def day_of(now: float) -> int:
    return int(now) // _DAY_SECONDS


def _row(row: Sequence[Any]) -> ApiKey:
    (name, scope, stores, rpm, tpd, created, used, revoked, requests, searches, tokens, stored,
     today, project, project_conversations) = row  # fmt: skip
    return ApiKey(
        name=str(name),
        scope=str(scope),
        vector_stores=tuple(json.loads(str(stores))),
        requests_per_minute=int(rpm),
        tokens_per_day=int(tpd),
        created_at=int(created),
        last_used_at=int(used),
        revoked_at=int(revoked),
        requests=int(requests),
        searches=int(searches),
        embedded_tokens=int(tokens),
        bytes_stored=int(stored),
        embedded_tokens_today=int(today),
        project=str(project),
        project_conversations=bool(project_conversations),
    )


def create(
    conn: Connection,
    *,
    name: str,
    scope: str,
    vector_stores: Sequence[str] = (),
    requests_per_minute: int = 0,
    tokens_per_day: int = 0,
    now: float,
    project: str = DEFAULT_PROJECT,
    project_conversations: bool = False,
) -> tuple[ApiKey, str]:
    """A new key of `project` (its id or name) and its secret (the only time the secret exists
    outside the caller). Admin keys manage every project: they belong to the default one."""
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"a key's name is 1-64 letters, digits, '.', '_' and '-', got {name[:80]!r}"
        )
    if scope not in SCOPES:
        raise InvalidArgument(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if requests_per_minute < 0 or tokens_per_day < 0:
        raise InvalidArgument("limits are counts: 0 (no limit) or more")
    secret = PREFIX + secrets.token_urlsafe(32)
    stores = sorted(set(vector_stores))
    if project_conversations and not stores:
        raise InvalidArgument(
            "project_conversations is for keys limited to some vector stores; a key without "
            "that limit reaches its project's conversations anyway"
        )
    with atomic(conn):
        project_key = projects.key_of(conn, project)
        if scope == "admin" and project_key != projects.DEFAULT_KEY:
            raise InvalidArgument(
                "admin keys manage every project and belong to the default one; make a "
                "write or read key for this project"
            )
        for vector_store_id in stores:
            if (
                conn.execute(
                    "SELECT 1 FROM vector_stores WHERE public_id = ? AND project_id = ?"
                    " AND shadow_of IS NULL",
                    (vector_store_id, project_key),
                ).get
                is None
            ):
                raise VectorStoreNotFound(vector_store_id)
        if conn.execute("SELECT 1 FROM api_keys WHERE name = ?", (name,)).get is not None:
            raise KeyExists(f"a key named {name!r} exists; revoke it or pick another name")
        conn.execute(
            "INSERT INTO api_keys (name, digest, scope, vector_stores, requests_per_minute,"
            " tokens_per_day, created_at, project_id, project_conversations)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (name, digest(secret), scope, json.dumps(stores), requests_per_minute,
             tokens_per_day, int(now), project_key, int(project_conversations)),
        )  # fmt: skip
        return _one(conn, "k.name = ?", (name,), now), secret


def _one(conn: Connection, where: str, args: tuple[object, ...], now: float) -> ApiKey:
    row = conn.execute(f"SELECT {_COLUMNS} {_FROM} WHERE {where}", (day_of(now), *args)).fetchone()
    if row is None:
        raise KeyNotFound(str(args[0]))
    return _row(row)


def authenticate(conn: Connection, secret: str, now: float) -> ApiKey | None:
    """The live (not revoked) key with this secret, or None."""
    try:
        with atomic(conn, write=False):
            return _one(conn, "k.digest = ? AND k.revoked_at = 0", (digest(secret),), now)
    except KeyNotFound:
        return None


def list_keys(conn: Connection, now: float, *, revoked: bool = False) -> list[ApiKey]:
    where = "" if revoked else "WHERE k.revoked_at = 0"
    with atomic(conn, write=False):
        rows = conn.execute(
            f"SELECT {_COLUMNS} {_FROM} {where} ORDER BY k.id", (day_of(now),)
        ).fetchall()
    return [_row(row) for row in rows]


def state(conn: Connection) -> KeyState:
    """What gateways poll to learn, within a second, that keys exist or one was revoked."""
    with atomic(conn, write=False):
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE revoked_at <> 0) FROM api_keys"
        ).fetchone()
    return KeyState(keys=int(row[0]), revoked=int(row[1])) if row else KeyState(0, 0)


def revoke(conn: Connection, name: str, now: float) -> ApiKey:
    """Revokes the key for good (its usage stays listed with --revoked)."""
    with atomic(conn):
        found = _one(conn, "k.name = ? AND k.revoked_at = 0", (name,), now)
        conn.execute("UPDATE api_keys SET revoked_at = ? WHERE name = ?", (int(now), name))
    return found


def record_usage(conn: Connection, usages: Sequence[KeyUsage], now: float) -> None:
    """Adds what gateways counted since their last report; unknown names are skipped."""
    day = day_of(now)
    with atomic(conn):
        for usage in usages:
            key = conn.execute("SELECT id FROM api_keys WHERE name = ?", (usage.name,)).get
            if key is None:
                continue
            conn.execute(
                "UPDATE api_keys SET requests = requests + ?, searches = searches + ?,"
                " embedded_tokens = embedded_tokens + ?, bytes_stored = bytes_stored + ?,"
                f" last_used_at = {dialect(conn).greatest}(last_used_at, ?) WHERE id = ?",
                (usage.requests, usage.searches, usage.embedded_tokens, usage.bytes_stored,
                 int(usage.last_used_at), key),
            )  # fmt: skip
            conn.execute(
                "INSERT INTO api_key_days (key_id, day, requests, embedded_tokens)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (key_id, day) DO UPDATE SET"
                " requests = api_key_days.requests + excluded.requests,"
                " embedded_tokens = api_key_days.embedded_tokens + excluded.embedded_tokens",
                (key, day, usage.requests, usage.embedded_tokens),
            )


def carry_revocations(live: Connection, restored: Connection) -> int:
    """Revokes in `restored`, a database about to replace `live`, the keys revoked in `live`
    (matched by digest: a key is its secret); returns how many it revoked."""
    revoked = live.execute("SELECT revoked_at, digest FROM api_keys WHERE revoked_at > 0")
    rows = [(int(at), bytes(found)) for at, found in revoked]
    with atomic(restored):
        before = restored.total_changes()
        restored.executemany(
            "UPDATE api_keys SET revoked_at = ? WHERE digest = ? AND revoked_at = 0", rows
        )
        return int(restored.total_changes() - before)
