"""Conversations and their items: create, read, update, delete, list with cursors.

A conversation's items are ordered by `position` (assigned from the conversation's counter,
so it only ever grows); an item may also belong to a response (responses.py). Deleting a
conversation removes its items (and their full-text rows, by trigger) and its responses.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from services.common import json_text
from services.common.vocabulary import (
    MAX_ITEM_BYTES,
    MAX_METADATA,
    MAX_NEW_ITEMS,
    MAX_TITLE_CHARS,
)
from services.store import access
from services.store.db import atomic
from services.store.errors import ConversationNotFound, InvalidArgument, ItemNotFound
from services.store.paging import fetch_page, unknown_cursor
from services.store.records import EVERYTHING, Access, Conversation, Item, NewItem, Page
from services.store.sql import Connection, dialect

ID_PREFIX = "conv_"
# Nesting of JSON kept in items and responses: twice a gateway's request body's, and far below
# the 1000 levels past which SQLite's json_valid (the columns' CHECK) refuses it.
MAX_JSON_DEPTH = 64
MAX_LIST_LIMIT = 100
_TITLE_CHARS = 80
# An item's id tells its type, as OpenAI's do.
_ITEM_PREFIXES = {
    "message": "msg_",
    "file_search_call": "fs_",
    "function_call": "fc_",
    "function_call_output": "fco_",
    "reasoning": "rs_",
}

# An id a caller may give an item: a prefix and 8-64 letters or digits.
_ITEM_ID = re.compile(r"[a-z]{2,8}_[A-Za-z0-9]{8,64}")

# A turn is a user message: what a list of conversations shows besides the items.
_CONVERSATION = (
    "id, public_id, created_at, last_active_at, metadata, title, item_count,"
    " (SELECT count(*) FROM items AS t WHERE t.conversation_id = conversations.id"
    " AND t.type = 'message' AND t.role = 'user')"
    " FROM conversations"
)
ITEM_COLUMNS = """
i.public_id, i.type, i.role, i.status, i.body, i.text, i.created_at,
coalesce(c.public_id, ''), coalesce(r.public_id, ''), coalesce(i.position, 0)
"""
ITEM_FROM = """
FROM items AS i
LEFT JOIN conversations AS c ON c.id = i.conversation_id
LEFT JOIN responses AS r ON r.id = i.response_id
"""


def _conversation(row: Sequence[Any]) -> tuple[int, Conversation]:
    key, public_id, created_at, active, metadata, title, count, turns = row
    return key, Conversation(
        id=public_id,
        created_at=created_at,
        last_active_at=active,
        metadata=json.loads(metadata),
        title=title,
        item_count=count,
        turn_count=turns,
    )


def item_record(row: Sequence[Any]) -> Item:
    public_id, kind, role, status, body, text, created_at, conversation, response, position = row
    return Item(
        id=public_id,
        type=kind,
        role=role,
        status=status,
        body=body,
        text=text,
        created_at=created_at,
        conversation_id=conversation,
        response_id=response,
        position=position,
    )


def lookup(conn: Connection, conversation_id: str) -> tuple[int, Conversation]:
    row = conn.execute(f"SELECT {_CONVERSATION} WHERE public_id = ?", (conversation_id,)).fetchone()
    if row is None:
        raise ConversationNotFound(conversation_id)
    return _conversation(row)


def _check_metadata(metadata: Mapping[str, str]) -> str:
    if len(metadata) > MAX_METADATA:
        raise InvalidArgument(f"metadata can have at most {MAX_METADATA} keys")
    return json.dumps(dict(metadata))


def _check_title(title: str) -> str:
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidArgument(f"title is longer than {MAX_TITLE_CHARS} characters")
    return title


def json_value(text: str, what: str) -> Any:
    """The JSON `text` a client sent for keeping (InvalidArgument if SQLite's json_valid, the
    columns' CHECK, would refuse it: NaN or Infinity, nesting past MAX_JSON_DEPTH)."""
    try:
        return json_text.loads(text, max_depth=MAX_JSON_DEPTH)
    except json_text.JsonRefused as refused:
        raise InvalidArgument(f"{what} {refused.problem}") from None


def check_items(items: Sequence[NewItem], limit: int | None = MAX_NEW_ITEMS) -> None:
    if limit is not None and len(items) > limit:
        raise InvalidArgument(f"at most {limit} items at a time, got {len(items)}")
    for index, item in enumerate(items):
        if not item.type:
            raise InvalidArgument(f"item {index} has no type")
        if len(item.body) > MAX_ITEM_BYTES:
            raise InvalidArgument(f"item {index} is larger than {MAX_ITEM_BYTES} bytes")
        body = json_value(item.body, f"item {index}'s body")
        if not isinstance(body, dict):
            raise InvalidArgument(f"item {index}'s body must be a JSON object")


def _title_from(items: Sequence[NewItem]) -> str:
    for item in items:
        if item.type == "message" and item.role == "user" and item.text.strip():
            line = item.text.strip().splitlines()[0].strip()
            return line if len(line) <= _TITLE_CHARS else line[: _TITLE_CHARS - 1] + "…"
    return ""


def insert_items(
    conn: Connection,
    items: Sequence[NewItem],
    *,
    now: int,
    conversation: int | None = None,
    response: int | None = None,
    response_role: str = "",
) -> list[int]:
    """Writes items (inside a transaction), appended to `conversation` and/or as `response`'s
    inputs or outputs; returns their row keys in order. Sets the conversation's title from its
    first user message if it has none."""
    position = 0
    if conversation is not None:
        row = conn.execute(
            "SELECT next_position, title FROM conversations WHERE id = ?", (conversation,)
        ).fetchone()
        assert row is not None, "the caller looked the conversation up"
        position, title = int(row[0]), str(row[1])
        if not title and (title := _title_from(items)):
            conn.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation))
    start = 0
    if response is not None:
        row = conn.execute(
            "SELECT count(*) FROM items WHERE response_id = ? AND response_role = ?",
            (response, response_role),
        ).fetchone()
        start = int(row[0]) if row else 0
    keys = []
    for offset, item in enumerate(items):
        prefix = _ITEM_PREFIXES.get(item.type, "item_")
        public_id = item.id if _ITEM_ID.fullmatch(item.id) else ""
        if (
            public_id
            and conn.execute("SELECT 1 FROM items WHERE public_id = ?", (public_id,)).fetchone()
        ):
            public_id = ""
        key = conn.execute(
            "INSERT INTO items (public_id, conversation_id, position, response_id, response_role,"
            " response_position, type, role, status, body, text, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                public_id or prefix + secrets.token_hex(16),
                conversation,
                position + offset if conversation is not None else None,
                response,
                response_role,
                start + offset,
                item.type,
                item.role,
                item.status,
                item.body,
                item.text,
                now,
            ),
        ).get
        keys.append(key)
    if conversation is not None and items:
        conn.execute(
            "UPDATE conversations SET next_position = next_position + ?,"
            " item_count = item_count + ?,"
            f" last_active_at = {dialect(conn).greatest}(last_active_at, ?) WHERE id = ?",
            (len(items), len(items), now, conversation),
        )
    return keys


def items_by_key(conn: Connection, keys: Sequence[int]) -> list[Item]:
    if not keys:
        return []
    rows = conn.execute(
        f"SELECT i.id, {ITEM_COLUMNS} {ITEM_FROM} WHERE i.id IN {dialect(conn).int_list}",
        (json.dumps(list(keys)),),
    ).fetchall()
    by_key = {row[0]: item_record(row[1:]) for row in rows}
    return [by_key[key] for key in keys]


def create(
    conn: Connection,
    *,
    metadata: Mapping[str, str],
    title: str,
    items: Sequence[NewItem],
    now: int,
    caller: Access = EVERYTHING,
) -> tuple[Conversation, list[Item]]:
    metadata_json = _check_metadata(metadata)
    check_items(items)
    public_id = ID_PREFIX + secrets.token_hex(24)
    with atomic(conn):
        project, created_by = access.owner(conn, caller)
        key = conn.execute(
            "INSERT INTO conversations (public_id, created_at, last_active_at, metadata, title,"
            " project_id, created_by) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (public_id, now, now, metadata_json, _check_title(title), project, created_by),
        ).get
        keys = insert_items(conn, items, now=now, conversation=key)
        return lookup(conn, public_id)[1], items_by_key(conn, keys)


def get(conn: Connection, conversation_id: str) -> Conversation:
    with atomic(conn, write=False):
        return lookup(conn, conversation_id)[1]


def update(
    conn: Connection,
    conversation_id: str,
    *,
    metadata: Mapping[str, str] | None,
    title: str | None,
) -> Conversation:
    with atomic(conn):
        key, _ = lookup(conn, conversation_id)
        if metadata is not None:
            conn.execute(
                "UPDATE conversations SET metadata = ? WHERE id = ?",
                (_check_metadata(metadata), key),
            )
        if title is not None:
            conn.execute(
                "UPDATE conversations SET title = ? WHERE id = ?", (_check_title(title), key)
            )
        return lookup(conn, conversation_id)[1]


def delete(conn: Connection, conversation_id: str) -> None:
    """The conversation, its items (their full-text rows go by trigger) and its responses."""
    with atomic(conn):
        key, _ = lookup(conn, conversation_id)
        remove(conn, key)


def remove(conn: Connection, key: int) -> None:
    """delete() inside the caller's transaction, by row key (the retention sweep's too): the
    items' full-text rows go by trigger, their vectors by cascade."""
    responses = [row[0] for row in conn.execute(
        "SELECT id FROM responses WHERE conversation_id = ?", (key,)
    )]  # fmt: skip
    conn.execute("DELETE FROM items WHERE conversation_id = ?", (key,))
    for response in responses:
        conn.execute("DELETE FROM items WHERE response_id = ?", (response,))
    conn.execute("DELETE FROM responses WHERE conversation_id = ?", (key,))
    conn.execute("DELETE FROM conversations WHERE id = ?", (key,))


def list_page(
    conn: Connection,
    *,
    limit: int,
    order: str,
    after: str | None,
    before: str | None,
    caller: Access = EVERYTHING,
) -> Page[Conversation]:
    """Most recently active first ("desc") or least ("asc")."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be 1..{MAX_LIST_LIMIT}, got {limit}")
    with atomic(conn, write=False):
        visible = access.conversations_visible(conn, caller, "conversations")
        rows, has_more = fetch_page(
            conn,
            select=f"SELECT {_CONVERSATION}",
            conditions=visible[0],
            params=visible[1],
            sort_columns=("last_active_at", "id"),
            limit=limit,
            order=order,
            after=_cursor(conn, after, "after", visible),
            before=_cursor(conn, before, "before", visible),
        )
    return Page(items=[_conversation(row)[1] for row in rows], has_more=has_more)


def _cursor(
    conn: Connection, public_id: str | None, name: str, visible: access.Clause
) -> tuple[Any, ...] | None:
    if not public_id:
        return None
    where = "".join(f" AND {condition}" for condition in visible[0])
    row = conn.execute(
        f"SELECT last_active_at, id FROM conversations WHERE public_id = ?{where}",
        (public_id, *visible[1]),
    ).fetchone()
    if row is None:
        raise unknown_cursor(name, public_id, "conversation id")
    return tuple(row)


def add_items(
    conn: Connection, conversation_id: str, items: Sequence[NewItem], *, now: int
) -> list[Item]:
    check_items(items)
    if not items:
        raise InvalidArgument("items must hold at least one item")
    with atomic(conn):
        key, _ = lookup(conn, conversation_id)
        return items_by_key(conn, insert_items(conn, items, now=now, conversation=key))


def list_items(
    conn: Connection,
    conversation_id: str,
    *,
    limit: int,
    order: str,
    after: str | None,
    before: str | None,
) -> Page[Item]:
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be 1..{MAX_LIST_LIMIT}, got {limit}")
    with atomic(conn, write=False):
        key, _ = lookup(conn, conversation_id)

        def position(item_id: str | None, name: str) -> tuple[Any, ...] | None:
            if not item_id:
                return None
            row = conn.execute(
                "SELECT position FROM items WHERE conversation_id = ? AND public_id = ?",
                (key, item_id),
            ).fetchone()
            if row is None:
                raise unknown_cursor(name, item_id, "item id in this conversation")
            return tuple(row)

        rows, has_more = fetch_page(
            conn,
            select=f"SELECT {ITEM_COLUMNS} {ITEM_FROM}",
            conditions=["i.conversation_id = ?"],
            params=[key],
            sort_columns=("i.position",),
            limit=limit,
            order=order,
            after=position(after, "after"),
            before=position(before, "before"),
        )
    return Page(items=[item_record(row) for row in rows], has_more=has_more)


def _item_key(conn: Connection, key: int, conversation_id: str, item_id: str) -> int:
    row = conn.execute(
        "SELECT id FROM items WHERE conversation_id = ? AND public_id = ?", (key, item_id)
    ).fetchone()
    if row is None:
        raise ItemNotFound(conversation_id, item_id)
    return int(row[0])


def get_item(conn: Connection, conversation_id: str, item_id: str) -> Item:
    with atomic(conn, write=False):
        key, _ = lookup(conn, conversation_id)
        return items_by_key(conn, [_item_key(conn, key, conversation_id, item_id)])[0]


def delete_item(conn: Connection, conversation_id: str, item_id: str) -> Conversation:
    """Removes the item from the conversation (and the store: an item belongs to one)."""
    with atomic(conn):
        key, _ = lookup(conn, conversation_id)
        item = _item_key(conn, key, conversation_id, item_id)
        conn.execute("DELETE FROM items WHERE id = ?", (item,))
        conn.execute("UPDATE conversations SET item_count = item_count - 1 WHERE id = ?", (key,))
        return lookup(conn, conversation_id)[1]


def recent_items(conn: Connection, key: int, limit: int) -> list[Item]:
    """The conversation's last `limit` items, oldest first (inside a transaction)."""
    rows = conn.execute(
        f"SELECT {ITEM_COLUMNS} {ITEM_FROM} WHERE i.conversation_id = ?"
        " ORDER BY i.position DESC LIMIT ?",
        (key, limit),
    ).fetchall()
    return [item_record(row) for row in reversed(rows)]
