"""Retention of chat history: conversations and stored responses older than their time to live
(RAGD_CONVERSATIONS_TTL_DAYS, RAGD_RESPONSES_TTL_DAYS; 0, the default, keeps them forever)
are deleted by a background sweep, with everything they hold.

A conversation's age counts from its last activity, so one still in use is kept; a response's
from its creation, as OpenAI's 30 days for stored responses do. Deleting goes the API's own
way (conversations.remove, responses.remove): items with their full-text rows (trigger) and
vectors (cascade); a response's items held by a conversation stay with the conversation.
Each deletion is recorded in the audit log (operation "expire", naming the object and the
setting) in the same transaction, so the log never misses one and never names one kept.

Files uploaded with OpenAI's expires_after go the same way once their expires_at passes,
whatever the settings: as a DELETE /v1/files/{id} would (files.remove), out of every vector
store with their chunks, vectors and full text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

from services.store import audit, conversations, files, responses
from services.store.db import atomic
from services.store.records import AuditEntry
from services.store.sql import Connection

DAY_SECONDS = 86400
# Objects deleted per transaction: the write lock is held for one batch at a time.
BATCH = 200
EXPIRE = "expire"


@dataclass(frozen=True)
class RetentionSettings:
    # Days (fractions allowed); 0: kept forever.
    conversations_days: float = 0.0
    responses_days: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.conversations_days > 0 or self.responses_days > 0

    @property
    def sweep_seconds(self) -> float:
        """Between sweeps: a tenth of the shortest time to live, within 1 s..5 min, so nothing
        outlives its time by more than a tenth of it (or 5 minutes)."""
        ttls = [d * DAY_SECONDS for d in (self.conversations_days, self.responses_days) if d > 0]
        return min(300.0, max(1.0, min(ttls) / 10)) if ttls else 300.0


@dataclass(frozen=True)
class Swept:
    conversations: int = 0
    responses: int = 0
    files: int = 0

    @property
    def full(self) -> bool:
        """A whole batch went: more may be due right away."""
        return max(self.conversations, self.responses, self.files) >= BATCH


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def sweep(conn: Connection, settings: RetentionSettings, *, now: float) -> Swept:
    """Deletes up to BATCH expired conversations, responses and files, each kind in one
    transaction with its audit entries."""
    deleted_conversations = deleted_responses = 0
    if settings.conversations_days > 0:
        cutoff = now - settings.conversations_days * DAY_SECONDS
        with atomic(conn):
            rows = cast(
                list[tuple[int, str, int, int, str]],
                conn.execute(
                    "SELECT c.id, c.public_id, c.item_count, c.last_active_at, p.public_id"
                    " FROM conversations AS c JOIN projects AS p ON p.id = c.project_id"
                    " WHERE c.last_active_at < ? ORDER BY c.last_active_at LIMIT ?",
                    (cutoff, BATCH),
                ).fetchall(),
            )
            entries = []
            for key, public_id, items, active, project in rows:
                conversations.remove(conn, key)
                entries.append(
                    AuditEntry(
                        at=now,
                        operation=EXPIRE,
                        result_count=items,
                        detail=f"conversation {public_id} ({items} items, last active "
                        f"{_iso(active)}): RAGD_CONVERSATIONS_TTL_DAYS="
                        f"{settings.conversations_days:g}",
                        project=project,
                    )
                )
            audit.insert(conn, entries)
            deleted_conversations = len(rows)
    if settings.responses_days > 0:
        cutoff = now - settings.responses_days * DAY_SECONDS
        with atomic(conn):
            expired = cast(
                list[tuple[int, str, float, str]],
                conn.execute(
                    "SELECT r.id, r.public_id, r.created_at, p.public_id FROM responses AS r"
                    " JOIN projects AS p ON p.id = r.project_id WHERE r.created_at < ?"
                    " ORDER BY r.created_at LIMIT ?",
                    (cutoff, BATCH),
                ).fetchall(),
            )
            entries = []
            for key, public_id, created, project in expired:
                responses.remove(conn, key)
                entries.append(
                    AuditEntry(
                        at=now,
                        operation=EXPIRE,
                        detail=f"response {public_id} (created {_iso(created)}): "
                        f"RAGD_RESPONSES_TTL_DAYS={settings.responses_days:g}",
                        project=project,
                    )
                )
            audit.insert(conn, entries)
            deleted_responses = len(expired)
    return Swept(
        conversations=deleted_conversations,
        responses=deleted_responses,
        files=_sweep_files(conn, now),
    )


def _sweep_files(conn: Connection, now: float) -> int:
    """Deletes up to BATCH files whose expires_at has passed; how many."""
    with atomic(conn):
        expired = cast(
            list[tuple[str, str, int, str]],
            conn.execute(
                "SELECT f.id, f.filename, f.expires_at, p.public_id FROM files AS f"
                " JOIN projects AS p ON p.id = f.project_id"
                " WHERE f.expires_at > 0 AND f.expires_at <= ? ORDER BY f.expires_at LIMIT ?",
                (now, BATCH),
            ).fetchall(),
        )
        entries = []
        for file_id, filename, expires_at, project in expired:
            files.remove(conn, file_id, int(now))
            entries.append(
                AuditEntry(
                    at=now,
                    operation=EXPIRE,
                    detail=f"file {file_id} ({filename}, expires_at {_iso(expires_at)}): "
                    "its expires_after",
                    project=project,
                )
            )
        audit.insert(conn, entries)
    return len(expired)
