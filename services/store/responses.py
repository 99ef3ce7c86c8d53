"""Responses: a model turn and its items, recorded in one transaction, and the history a next
turn reads (a conversation's items, or a chain of previous responses).

The gateway names a response before it is recorded (it streams the id to the client first),
and records it once the turn has ended, completed or not: the user's input, every output item
and the response's status land together, so a turn is never half written. A retried record of
the same id is refused (ResponseExists) and changes nothing.

A background response, or a streamed one, is started before its turn runs (`start`): a
pending row stands for it (GET shows it queued or in progress) with its input, under a lease
the gateway running it renews (`renew`). Its record replaces the pending row in the same
transaction (none left: it was deleted meanwhile, and is not recorded). A cancel ends it at
once as cancelled (the gateway learns it at its next renewal and stops); a lease that runs
out (the gateway died mid-turn) ends it as failed, when it is next read or at the store's
start (`expire`), so no response stays in progress forever.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from services.common.vocabulary import ENDED_RESPONSE_STATUSES, PENDING_RESPONSE_STATUSES
from services.store import access, conversations
from services.store.conversations import ITEM_COLUMNS, ITEM_FROM, item_record
from services.store.db import atomic
from services.store.errors import (
    ConversationNotFound,
    InvalidArgument,
    ResponseExists,
    ResponseNotFound,
)
from services.store.paging import fetch_page, unknown_cursor
from services.store.records import (
    EVERYTHING,
    Access,
    Item,
    NewItem,
    NewResponse,
    Page,
    ResponseRecord,
)
from services.store.sql import Connection

STATUSES = ENDED_RESPONSE_STATUSES
PENDING_STATUSES = PENDING_RESPONSE_STATUSES
# A lease of a background response at most, in seconds.
MAX_LEASE = 3600.0
LEASE_LOST = {
    "code": "server_error",
    "message": "the gateway running this background response stopped before it ended (its "
    "lease ran out); send the request again",
}
_ID = re.compile(r"resp_[A-Za-z0-9]{8,64}")
# Items a next turn reads at most: the gateway fits them to the model's context anyway.
MAX_HISTORY = 500
MAX_LIST_LIMIT = 100

_RESPONSE = """
SELECT r.id, r.public_id, r.created_at, r.completed_at, r.status, r.model, r.settings, r.usage,
       r.error, coalesce(c.public_id, ''), r.previous_response_id
FROM responses AS r LEFT JOIN conversations AS c ON c.id = r.conversation_id
"""


def _json_object(text: str, name: str) -> str:
    value = conversations.json_value(text or "{}", name)
    if not isinstance(value, dict):
        raise InvalidArgument(f"{name} must be a JSON object")
    return text or "{}"


def _lookup(conn: Connection, response_id: str) -> tuple[int, tuple[Any, ...]]:
    row = conn.execute(f"{_RESPONSE} WHERE r.public_id = ?", (response_id,)).fetchone()
    if row is None:
        raise ResponseNotFound(response_id)
    return int(row[0]), tuple(row[1:])


def _record(conn: Connection, key: int, row: tuple[Any, ...]) -> ResponseRecord:
    public_id, created, completed, status, model, settings, usage, error, conv, previous = row
    outputs = conn.execute(
        f"SELECT {ITEM_COLUMNS} {ITEM_FROM} WHERE i.response_id = ? AND i.response_role = 'output'"
        " ORDER BY i.response_position",
        (key,),
    ).fetchall()
    return ResponseRecord(
        id=public_id,
        created_at=created,
        completed_at=completed,
        status=status,
        model=model,
        settings=settings,
        usage=usage,
        error=error,
        conversation_id=conv,
        previous_response_id=previous,
        outputs=[item_record(output) for output in outputs],
    )


def record(
    conn: Connection,
    response: NewResponse,
    *,
    now: int,
    caller: Access = EVERYTHING,
    owner: tuple[int, str] | None = None,
) -> ResponseRecord:
    """Writes the response, its input and output items and, with a conversation, appends them
    to it unless the turn failed, all in one transaction."""
    if not _ID.fullmatch(response.id):
        raise InvalidArgument(f"response id {response.id!r} is not resp_ and 8-64 letters/digits")
    if response.status not in STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}")
    for name in ("settings", "usage", "error"):
        _json_object(getattr(response, name), name)
    conversations.check_items(response.inputs, limit=None)
    conversations.check_items(response.outputs, limit=None)
    with atomic(conn):
        if conn.execute("SELECT 1 FROM responses WHERE public_id = ?", (response.id,)).fetchone():
            raise ResponseExists(f"response {response.id!r} is recorded already")
        # A started response's record replaces its pending row; with no row left, it was
        # deleted while its turn ran, and stays deleted.
        conn.execute("DELETE FROM pending_responses WHERE public_id = ?", (response.id,))
        if response.started and not conn.changes():
            raise ResponseNotFound(response.id)
        conversation = None
        if response.conversation_id:
            conversation = conversations.lookup(conn, response.conversation_id)[0]
        if response.previous_response_id:
            _lookup(conn, response.previous_response_id)
        project, created_by = owner or access.owner(conn, caller)
        key = conn.execute(
            "INSERT INTO responses (public_id, conversation_id, previous_response_id, created_at,"
            " completed_at, status, model, settings, usage, error, project_id, created_by)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                response.id,
                conversation,
                response.previous_response_id,
                response.created_at,
                response.completed_at,
                response.status,
                response.model,
                response.settings or "{}",
                response.usage or "{}",
                response.error or "{}",
                project,
                created_by,
            ),
        ).get
        # A failed turn stays out of its conversation (the response keeps its input): the
        # client sends it again, the SDK's retries do, and the conversation holds it once.
        joins = conversation if response.status != "failed" else None
        for role, items in (("input", response.inputs), ("output", response.outputs)):
            conversations.insert_items(
                conn, items, now=now, conversation=joins, response=key, response_role=role
            )
        return _record(conn, key, _lookup(conn, response.id)[1])


def get(conn: Connection, response_id: str, *, now: float = 0.0) -> ResponseRecord:
    """A recorded response, or a background one under way (without outputs); one whose
    lease ran out is ended as failed first."""
    with atomic(conn, write=False):
        if conn.execute("SELECT 1 FROM responses WHERE public_id = ?", (response_id,)).fetchone():
            key, row = _lookup(conn, response_id)
            return _record(conn, key, row)
        pending = _pending(conn, response_id)
    if pending is None:
        raise ResponseNotFound(response_id)
    if now and pending[-1] < now:
        expire(conn, now=now, response_id=response_id)
        return get(conn, response_id)
    return _pending_record(pending)


_PENDING = (
    "SELECT public_id, created_at, status, model, settings, conversation_id,"
    " previous_response_id, inputs, lease_expires_at FROM pending_responses"
)


def _pending(conn: Connection, response_id: str) -> tuple[Any, ...] | None:
    row = conn.execute(f"{_PENDING} WHERE public_id = ?", (response_id,)).fetchone()
    return tuple(row) if row is not None else None


def _pending_record(row: tuple[Any, ...]) -> ResponseRecord:
    public_id, created, status, model, settings, conversation, previous, _, _ = row
    return ResponseRecord(
        id=public_id,
        created_at=created,
        completed_at=0.0,
        status=status,
        model=model,
        settings=settings,
        usage="{}",
        error="{}",
        conversation_id=conversation,
        previous_response_id=previous,
        outputs=[],
    )


def start(
    conn: Connection,
    response: NewResponse,
    *,
    lease: float,
    now: float,
    caller: Access = EVERYTHING,
) -> ResponseRecord:
    """A background response before its turn runs: queued or in progress, with its input,
    held for `lease` seconds."""
    if not _ID.fullmatch(response.id):
        raise InvalidArgument(f"response id {response.id!r} is not resp_ and 8-64 letters/digits")
    if response.status not in PENDING_STATUSES:
        raise InvalidArgument(f"a started response is {' or '.join(PENDING_STATUSES)}")
    if not 0 < lease <= MAX_LEASE:
        raise InvalidArgument(f"lease must be in (0, {MAX_LEASE:g}] seconds")
    _json_object(response.settings, "settings")
    conversations.check_items(response.inputs, limit=None)
    inputs = json.dumps([dataclasses.asdict(item) for item in response.inputs])
    with atomic(conn):
        taken = conn.execute(
            "SELECT 1 FROM responses WHERE public_id = ?"
            " UNION ALL SELECT 1 FROM pending_responses WHERE public_id = ?",
            (response.id, response.id),
        ).fetchone()
        if taken:
            raise ResponseExists(f"response {response.id!r} exists already")
        if response.conversation_id:
            conversations.lookup(conn, response.conversation_id)
        if response.previous_response_id:
            _lookup(conn, response.previous_response_id)
        project, created_by = access.owner(conn, caller)
        conn.execute(
            "INSERT INTO pending_responses (public_id, created_at, status, model, settings,"
            " conversation_id, previous_response_id, inputs, lease_expires_at, project_id,"
            " created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                response.id,
                response.created_at,
                response.status,
                response.model,
                response.settings or "{}",
                response.conversation_id,
                response.previous_response_id,
                inputs,
                now + lease,
                project,
                created_by,
            ),
        )
        row = _pending(conn, response.id)
        assert row is not None
        return _pending_record(row)


def renew(
    conn: Connection, response_id: str, *, status: str, lease: float, now: float
) -> ResponseRecord:
    """The lease of a background response under way extended (and its status set: queued
    becomes in_progress); a response that ended meanwhile (cancelled) comes back as it is,
    which tells its gateway to stop."""
    if not 0 < lease <= MAX_LEASE:
        raise InvalidArgument(f"lease must be in (0, {MAX_LEASE:g}] seconds")
    if status and status not in PENDING_STATUSES:
        raise InvalidArgument(f"status must be {' or '.join(PENDING_STATUSES)}")
    with atomic(conn):
        conn.execute(
            "UPDATE pending_responses SET lease_expires_at = ?, status = coalesce(nullif(?, ''),"
            " status) WHERE public_id = ?",
            (now + lease, status, response_id),
        )
    return get(conn, response_id, now=now)


def cancel(conn: Connection, response_id: str, *, now: float) -> ResponseRecord:
    """A background response under way ended as cancelled, with its input; one that ended
    already comes back as it is."""
    _finish_pending(conn, response_id, "cancelled", {}, now)
    return get(conn, response_id)


def expire(conn: Connection, *, now: float, response_id: str = "") -> int:
    """Background responses whose lease ran out ended as failed; how many."""
    rows = conn.execute(
        "SELECT public_id FROM pending_responses WHERE lease_expires_at < ?"
        + (" AND public_id = ?" if response_id else ""),
        (now, response_id) if response_id else (now,),
    ).fetchall()
    for (public_id,) in rows:
        _finish_pending(conn, str(public_id), "failed", LEASE_LOST, now)
    return len(rows)


def _finish_pending(
    conn: Connection, response_id: str, status: str, error: dict[str, Any], now: float
) -> None:
    with atomic(conn, write=False):
        row = _pending(conn, response_id)
        owner = conn.execute(
            "SELECT project_id, created_by FROM pending_responses WHERE public_id = ?",
            (response_id,),
        ).fetchone()
    if row is None or owner is None:
        return
    public_id, created, _, model, settings, conversation, previous, inputs, _ = row
    response = NewResponse(
        id=public_id,
        created_at=created,
        completed_at=now,
        status=status,
        model=model,
        settings=settings,
        error=json.dumps(error),
        conversation_id=conversation,
        previous_response_id=previous,
        inputs=tuple(NewItem(**item) for item in json.loads(inputs)),
    )
    try:
        # Recorded as its owner's, whoever ends it (a cancel, the lease running out).
        record(conn, response, now=int(now), owner=(int(owner[0]), str(owner[1])))
    except (ResponseExists, ConversationNotFound, ResponseNotFound):
        # Recorded meanwhile; or what it would join is gone: it goes without it.
        with atomic(conn):
            conn.execute("DELETE FROM pending_responses WHERE public_id = ?", (response_id,))


def delete(conn: Connection, response_id: str) -> None:
    """The response and its items, except those a conversation holds (they stay there); a
    background response under way is dropped (its gateway stops at its next renewal)."""
    with atomic(conn):
        conn.execute("DELETE FROM pending_responses WHERE public_id = ?", (response_id,))
        if conn.changes():
            return
        key, _ = _lookup(conn, response_id)
        remove(conn, key)


def remove(conn: Connection, key: int) -> None:
    """delete() inside the caller's transaction, by row key (the retention sweep's too)."""
    conn.execute("DELETE FROM items WHERE response_id = ? AND conversation_id IS NULL", (key,))
    conn.execute(
        "UPDATE items SET response_id = NULL, response_role = '' WHERE response_id = ?", (key,)
    )
    conn.execute("DELETE FROM responses WHERE id = ?", (key,))


def input_items(
    conn: Connection, response_id: str, *, limit: int, order: str, after: str | None
) -> Page[Item]:
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be 1..{MAX_LIST_LIMIT}, got {limit}")
    with atomic(conn, write=False):
        key, _ = _lookup(conn, response_id)
        cursor = None
        if after:
            row = conn.execute(
                "SELECT response_position FROM items WHERE response_id = ? AND public_id = ?",
                (key, after),
            ).fetchone()
            if row is None:
                raise unknown_cursor("after", after, "input item id of this response")
            cursor = tuple(row)
        rows, has_more = fetch_page(
            conn,
            select=f"SELECT {ITEM_COLUMNS} {ITEM_FROM}",
            conditions=["i.response_id = ?", "i.response_role = 'input'"],
            params=[key],
            sort_columns=("i.response_position",),
            limit=limit,
            order=order,
            after=cursor,
            before=None,
        )
    return Page(items=[item_record(row) for row in rows], has_more=has_more)


def history(
    conn: Connection,
    *,
    conversation_id: str = "",
    previous_response_id: str = "",
    limit: int = MAX_HISTORY,
) -> list[Item]:
    """What a next turn reads, oldest first, at most `limit` items: the conversation's items,
    or the inputs and outputs of the previous response and of every one before it."""
    if bool(conversation_id) == bool(previous_response_id):
        raise InvalidArgument("name a conversation or a previous response, not both or neither")
    with atomic(conn, write=False):
        if conversation_id:
            key, _ = conversations.lookup(conn, conversation_id)
            return conversations.recent_items(conn, key, limit)
        key, _ = _lookup(conn, previous_response_id)
        rows = conn.execute(
            f"""
            WITH RECURSIVE chain (id, previous, depth) AS (
                SELECT id, previous_response_id, 0 FROM responses WHERE id = ?
                UNION ALL
                SELECT r.id, r.previous_response_id, chain.depth + 1
                FROM responses AS r JOIN chain ON r.public_id = chain.previous
                WHERE chain.depth < ?
            )
            SELECT {ITEM_COLUMNS} {ITEM_FROM} JOIN chain ON chain.id = i.response_id
            ORDER BY chain.depth DESC, i.response_role = 'output', i.response_position
            """,
            (key, limit),
        ).fetchall()
        return [item_record(row) for row in rows[-limit:]]
