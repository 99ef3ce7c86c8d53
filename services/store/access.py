"""Who may reach what: the one place the ownership rules are written.

A caller (records.Access, from the API key the gateway vouches for) reaches the objects of its
project only. A key limited to some vector stores reaches those stores, the files attached to
them or uploaded by itself, and the conversations and responses it made (all of its project's
with `project_conversations`). Anything else is answered exactly as an unknown id is.

Two uses: `check` refuses a named object (the wire layer's guard runs it for every id a request
names, before the call), and the `*_visible` clauses narrow listings and searches in SQL, so
pages, cursors and counts never include what the caller cannot reach.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from services.store import projects
from services.store.errors import (
    ConversationNotFound,
    FileNotFound,
    ProjectNotFound,
    ResponseNotFound,
    StoreError,
    VectorStoreNotFound,
)
from services.store.records import Access
from services.store.sql import Connection, dialect

VECTOR_STORE = "vector_store"
FILE = "file"
CONVERSATION = "conversation"
RESPONSE = "response"

# SQL conditions (to be ANDed) and their parameters.
Clause = tuple[list[str], list[Any]]


def project_key(conn: Connection, access: Access) -> int | None:
    """The caller's project (None: every project); -1, which matches nothing, for a project
    that does not exist."""
    if access.everything:
        return None
    try:
        return projects.key_of(conn, access.project)
    except ProjectNotFound:
        return -1


def owner(conn: Connection, access: Access) -> tuple[int, str]:
    """The project and key name a new object is stamped with (inside a transaction)."""
    if access.everything:
        return projects.DEFAULT_KEY, access.key
    return projects.key_of(conn, access.project), access.key


def _in_project(conn: Connection, access: Access, alias: str) -> Clause:
    key = project_key(conn, access)
    return ([f"{alias}.project_id = ?"], [key]) if key is not None else ([], [])


def vector_stores_visible(conn: Connection, access: Access, alias: str) -> Clause:
    conditions, params = _in_project(conn, access, alias)
    if access.vector_stores:
        conditions.append(f"{alias}.public_id IN {dialect(conn).text_list}")
        params.append(json.dumps(sorted(access.vector_stores)))
    return conditions, params


def files_visible(conn: Connection, access: Access, alias: str) -> Clause:
    conditions, params = _in_project(conn, access, alias)
    if access.vector_stores:
        conditions.append(
            f"({alias}.created_by = ? OR EXISTS (SELECT 1 FROM vector_store_files AS acf"
            " JOIN vector_stores AS ac ON ac.id = acf.vector_store_id"
            f" WHERE acf.file_id = {alias}.id"
            f" AND ac.public_id IN {dialect(conn).text_list}))"
        )
        params += [access.key, json.dumps(sorted(access.vector_stores))]
    return conditions, params


def conversations_visible(conn: Connection, access: Access, alias: str) -> Clause:
    """Also for responses: both are kept by who made them."""
    conditions, params = _in_project(conn, access, alias)
    if access.vector_stores and not access.project_conversations:
        conditions.append(f"{alias}.created_by = ?")
        params.append(access.key)
    return conditions, params


responses_visible = conversations_visible

_Visible = Callable[[Connection, Access, str], Clause]
# kind -> (the object by its public id as `t`, who may see it, the error an unknown id gets)
_KINDS: dict[str, tuple[str, _Visible, Callable[[str], StoreError]]] = {
    VECTOR_STORE: (
        "vector_stores AS t WHERE t.public_id = ? AND t.shadow_of IS NULL",
        vector_stores_visible,
        VectorStoreNotFound,
    ),
    FILE: ("files AS t WHERE t.id = ?", files_visible, FileNotFound),
    CONVERSATION: (
        "conversations AS t WHERE t.public_id = ?",
        conversations_visible,
        ConversationNotFound,
    ),
    RESPONSE: ("responses AS t WHERE t.public_id = ?", responses_visible, ResponseNotFound),
}
# A background response under way is a row of its own until its turn ends (responses.py).
_PENDING_RESPONSE = "pending_responses AS t WHERE t.public_id = ?"


def check(conn: Connection, access: Access, kind: str, public_id: str) -> None:
    """Raises the kind's not-found error unless the caller reaches the object (an object that
    does not exist included, so that the answer is the same)."""
    if access.everything:
        return
    source, visible, missing = _KINDS[kind]
    conditions, params = visible(conn, access, "t")
    where = "".join(f" AND {condition}" for condition in conditions)
    sql = f"SELECT 1 FROM {source}{where}"
    args = [public_id, *params]
    if kind == RESPONSE:
        sql += f" UNION ALL SELECT 1 FROM {_PENDING_RESPONSE}{where}"
        args += [public_id, *params]
    if conn.execute(sql, args).get is None:
        raise missing(public_id)
