"""Responses: a model turn and its items, recorded in one transaction, and the history a next
turn reads (a conversation's items, or a chain of previous responses).

The gateway names a response before it is recorded (it streams the id to the client first),
and records it once the turn has ended, completed or not: the user's input, every output item
and the response's status land together, so a turn is never half written. A retried record of
the same id is refused (ResponseExists) and changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

import apsw

from services.store import access, conversations
from services.store.conversations import ITEM_COLUMNS, ITEM_FROM, item_record
from services.store.db import atomic
from services.store.errors import InvalidArgument, ResponseExists, ResponseNotFound
from services.store.paging import fetch_page, unknown_cursor
from services.store.records import EVERYTHING, Access, Item, NewResponse, Page, ResponseRecord

STATUSES = ("completed", "incomplete", "failed", "cancelled")
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


def _lookup(conn: apsw.Connection, response_id: str) -> tuple[int, tuple[Any, ...]]:
    row = conn.execute(f"{_RESPONSE} WHERE r.public_id = ?", (response_id,)).fetchone()
    if row is None:
        raise ResponseNotFound(response_id)
    return int(row[0]), tuple(row[1:])


def _record(conn: apsw.Connection, key: int, row: tuple[Any, ...]) -> ResponseRecord:
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
    conn: apsw.Connection, response: NewResponse, *, now: int, caller: Access = EVERYTHING
) -> ResponseRecord:
    """Writes the response, its input and output items and, with a conversation, appends them
    to it, all in one transaction."""
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
        conversation = None
        if response.conversation_id:
            conversation = conversations.lookup(conn, response.conversation_id)[0]
        if response.previous_response_id:
            _lookup(conn, response.previous_response_id)
        project, created_by = access.owner(conn, caller)
        conn.execute(
            "INSERT INTO responses (public_id, conversation_id, previous_response_id, created_at,"
            " completed_at, status, model, settings, usage, error, project_id, created_by)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        )
        key = conn.last_insert_rowid()
        for role, items in (("input", response.inputs), ("output", response.outputs)):
            conversations.insert_items(
                conn, items, now=now, conversation=conversation, response=key, response_role=role
            )
        return _record(conn, key, _lookup(conn, response.id)[1])


def get(conn: apsw.Connection, response_id: str) -> ResponseRecord:
    with atomic(conn, write=False):
        key, row = _lookup(conn, response_id)
        return _record(conn, key, row)


def delete(conn: apsw.Connection, response_id: str) -> None:
    """The response and its items, except those a conversation holds (they stay there)."""
    with atomic(conn):
        key, _ = _lookup(conn, response_id)
        remove(conn, key)


def remove(conn: apsw.Connection, key: int) -> None:
    """delete() inside the caller's transaction, by row key (the retention sweep's too)."""
    conn.execute("DELETE FROM items WHERE response_id = ? AND conversation_id IS NULL", (key,))
    conn.execute(
        "UPDATE items SET response_id = NULL, response_role = '' WHERE response_id = ?", (key,)
    )
    conn.execute("DELETE FROM responses WHERE id = ?", (key,))


def input_items(
    conn: apsw.Connection, response_id: str, *, limit: int, order: str, after: str | None
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
    conn: apsw.Connection,
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
