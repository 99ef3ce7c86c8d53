"""file_search for a turn: the passages for some queries over the tools' vector stores, and
the query ragd uses itself when the model does not write one (the user's last message)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.common.vocabulary import DEFAULT_SEARCH_MODE
from services.gateway import errors
from services.gateway.attributes import attributes_python
from services.gateway.chat.context import Passage
from services.gateway.chat.items import ChatItem
from services.gateway.chat.tools import FileSearchTool
from services.gateway.clients import Store
from services.gateway.embedders import Embedders
from services.gateway.search import Deadlines, Search, search_many


def question(inputs: Sequence[ChatItem]) -> str:
    """The text of the last user message of the input ('' if it has none)."""
    for item in reversed(inputs):
        if item.type == "message" and item.role == "user" and item.text.strip():
            return item.text.strip()[:4000]
    return ""


def user_query(inputs: Sequence[ChatItem]) -> str:
    """The search query when ragd searches before the model: the user's last message."""
    asked = question(inputs)
    if not asked:
        raise errors.InvalidRequest(
            "file_search needs a user message in 'input' to search for", param="input"
        )
    return asked


async def file_search(
    tools: Sequence[FileSearchTool],
    queries: list[str],
    embedders: Embedders,
    store: Store,
    deadlines: Deadlines,
    first: int = 1,
) -> tuple[list[Passage], bool]:
    """The best passages for the queries over the tools' vector stores, numbered from
    `first`, and whether any store was searched lexically only (the embedder was down)."""
    asked = [
        Search(
            vector_store_id,
            queries,
            tool.max_num_results,
            DEFAULT_SEARCH_MODE,
            tool.score_threshold,
            tool.filter,
            vector_weight=tool.vector_weight,
        )
        for tool in tools
        for vector_store_id in tool.vector_store_ids
    ]
    owners = [n for n, tool in enumerate(tools) for _ in tool.vector_store_ids]
    # One embedding of the queries per model for every store (lexical where it is down).
    found = await search_many(embedders, store, asked, deadlines)
    # Each tool keeps its own max_num_results best; the passages are all tools' together.
    best_of: dict[tuple[str, str], Any] = {}
    for n, tool in enumerate(tools):
        mine: dict[tuple[str, str], Any] = {}
        for result in (result for owner, result in zip(owners, found, strict=True) if owner == n):
            for hit in result.hits:
                key = (hit.file_id, hit.text)
                if key not in mine or hit.score > mine[key].score:
                    mine[key] = hit
        ranked = sorted(mine.items(), key=lambda pair: pair[1].score, reverse=True)
        for key, hit in ranked[: tool.max_num_results]:
            if key not in best_of or hit.score > best_of[key].score:
                best_of[key] = hit
    best = sorted(best_of.values(), key=lambda hit: hit.score, reverse=True)
    degraded = any(result.degraded for result in found)
    passages = [
        Passage(
            n,
            hit.file_id,
            hit.filename,
            hit.text,
            round(float(hit.score), 6),
            attributes_python(hit.attributes),
        )
        for n, hit in enumerate(best, start=first)
    ]
    return passages, degraded
