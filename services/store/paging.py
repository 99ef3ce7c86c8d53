"""One page of a listing in creation order, with cursors, shared by files and vector store files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.store.errors import InvalidArgument
from services.store.sql import Connection

# OpenAI lets a files listing ask for up to 10,000; callers apply tighter API limits.
MAX_LIST_LIMIT = 10_000

# A cursor's position: the values of the sort columns of the row it names.
SortKey = tuple[Any, ...]


def check_list_args(limit: int, order: str) -> None:
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be 1..{MAX_LIST_LIMIT}, got {limit}")
    if order not in ("asc", "desc"):
        raise InvalidArgument(f"order must be 'asc' or 'desc', got {order!r}")


def unknown_cursor(name: str, cursor: str, what: str) -> InvalidArgument:
    return InvalidArgument(
        f"{name} cursor {cursor!r} is not an existing {what} (it may have been deleted); "
        "list again without the cursor"
    )


def fetch_page(
    conn: Connection,
    *,
    select: str,
    conditions: Sequence[str],
    params: Sequence[Any],
    sort_columns: Sequence[str],
    limit: int,
    order: str,
    after: SortKey | None,
    before: SortKey | None,
) -> tuple[list[tuple[Any, ...]], bool]:
    """Rows of `select` (which ends before its WHERE clause) in `order` by `sort_columns`.

    `after` pages forward from a cursor (exclusive). `before` returns the `limit` rows
    immediately preceding it in the same order; there `has_more` means more rows precede the
    page. Both together bound the page on each side. The sort columns must be unique together.
    """
    check_list_args(limit, order)
    ascending = order == "asc"
    key = f"({', '.join(sort_columns)})"
    marks = f"({', '.join('?' for _ in sort_columns)})"
    where = list(conditions)
    values = list(params)
    if after is not None:
        where.append(f"{key} {'>' if ascending else '<'} {marks}")
        values.extend(after)
    if before is not None:
        where.append(f"{key} {'<' if ascending else '>'} {marks}")
        values.extend(before)
    # With only `before`, walk backwards from the cursor and flip the page afterwards.
    backwards = before is not None and after is None
    direction = "ASC" if ascending != backwards else "DESC"
    order_by = ", ".join(f"{column} {direction}" for column in sort_columns)
    where_sql = f"WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        f"{select} {where_sql} ORDER BY {order_by} LIMIT ?", (*values, limit + 1)
    ).fetchall()
    page = rows[:limit]
    if backwards:
        page.reverse()
    return page, len(rows) > limit
