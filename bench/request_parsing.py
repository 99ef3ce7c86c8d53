"""The cost of reading a request body (issue 29 item 8): each body declared once as a pydantic
model (services/gateway/requests.py) against the hand-written checks it replaced, frozen
below as the baseline, on the same decoded bodies in the same run. Parsing only: the JSON is
decoded once beforehand, as json_body does before either.

    python -m bench.request_parsing [--repeats 7] [--number 2000] [--only response]

Prints a table (median microseconds per body, and the ratio) for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import timeit
from collections.abc import Callable
from typing import Any

from bench.params_before import (
    metadata,
    optional_int,
    optional_number,
    optional_object,
    optional_str,
)
from bench.request_parsing_chat import (
    CHAT_BODIES,
    RESPONSE_BODIES,
    new_chat,
    new_response,
    old_chat,
    old_response,
)
from services.common.vocabulary import (
    DEFAULT_SEARCH_MODE,
    MAX_DESCRIPTION_CHARS,
    MAX_EMBED_INPUTS,
    MAX_NAME_CHARS,
    MAX_NEW_ITEMS,
    MAX_QUERY_CHARS,
    MAX_SEARCH_QUERIES,
    MAX_SEARCH_RESULTS,
    MAX_TITLE_CHARS,
    RANKERS,
    SEARCH_MODES,
)
from services.gateway.chat.items import parse_items
from services.gateway.conversation_bodies import ConversationCreate
from services.gateway.errors import invalid
from services.gateway.filters import parse_filter
from services.gateway.requests import parse
from services.gateway.routes.embeddings import EmbeddingRequest
from services.gateway.search import Search
from services.gateway.search_body import SearchRequest
from services.gateway.vector_store_bodies import VectorStoreCreate

# The hand-written search checks as they were before the model (routes/vector_stores.py).


def _old_queries(body: dict[str, Any]) -> list[str]:
    raw = body.get("query")
    queries = [raw] if isinstance(raw, str) else raw
    if not isinstance(queries, list) or not queries:
        raise invalid("'query' must be a non-empty string or array of strings", param="query")
    if len(queries) > MAX_SEARCH_QUERIES:
        raise invalid("too many queries", param="query", code="too_many_queries")
    if not all(isinstance(q, str) and q.strip() for q in queries):
        raise invalid("every 'query' must be a non-empty string", param="query")
    for query in queries:
        if len(query) > MAX_QUERY_CHARS:
            raise invalid("query too long", param="query", code="query_too_long")
        query.encode("utf-8")
    return queries


def _old_ranking_options(body: dict[str, Any], where: str) -> tuple[float, float | None]:
    """OpenAI's ranking_options (of a search or of a file_search tool `where`): the score
    threshold, and the vector ranking's share of a hybrid search from hybrid_search's
    embedding_weight and text_weight (None when not sent: the store's default)."""
    ranking = optional_object(body, "ranking_options") or {}
    ranker = optional_str(ranking, "ranker", "auto")
    if ranker not in RANKERS:
        raise invalid(
            f"'{where}ranking_options.ranker' must be one of {', '.join(RANKERS)}",
            param="ranking_options",
        )
    threshold = optional_number(ranking, "score_threshold", 0.0, 0.0, 1.0)
    hybrid = optional_object(ranking, "hybrid_search")
    if hybrid is None:
        return threshold, None
    vector = optional_number(hybrid, "embedding_weight", 1.0, 0.0, 1e6)
    text = optional_number(hybrid, "text_weight", 1.0, 0.0, 1e6)
    if vector + text <= 0:
        raise invalid(
            f"'{where}ranking_options.hybrid_search' needs a positive embedding_weight or "
            "text_weight",
            param="ranking_options",
        )
    return threshold, vector / (vector + text)


def old_search(body: dict[str, Any]) -> Search:
    queries = _old_queries(body)
    mode = optional_str(body, "mode", DEFAULT_SEARCH_MODE) or DEFAULT_SEARCH_MODE
    if mode not in SEARCH_MODES:
        raise invalid("bad mode", param="mode")
    k = optional_int(body, "max_num_results", 10, 1, MAX_SEARCH_RESULTS)
    threshold, weight = _old_ranking_options(body, "")
    if not isinstance(body.get("rewrite_query", False), bool):
        raise invalid("'rewrite_query' must be a boolean", param="rewrite_query")
    exact = body.get("exact", False)
    if not isinstance(exact, bool):
        raise invalid("'exact' must be a boolean", param="exact")
    filters = parse_filter(body["filters"]) if body.get("filters") is not None else None
    return Search("vs_bench", queries, k, mode, threshold, filters, exact, weight)


def new_search(body: dict[str, Any]) -> Search:
    return parse(SearchRequest, body).search("vs_bench")


# The vector store's create, as routes/vector_stores.py read it (less the model lookup and the
# chunking's model limit, the same both ways).


def _old_expires_after(body: dict[str, Any]) -> tuple[str, int] | None:
    raw = body.get("expires_after")
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("anchor") != "last_active_at":
        raise invalid("'expires_after.anchor' must be 'last_active_at'", param="expires_after")
    days = raw.get("days")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 365:
        raise invalid("'expires_after.days' must be 1 to 365", param="expires_after")
    return "last_active_at", days


def _old_chunking(raw: Any) -> tuple[int, int] | None:
    if raw is None or (isinstance(raw, dict) and raw.get("type") == "auto"):
        return None
    if not isinstance(raw, dict) or raw.get("type") != "static":
        raise invalid("'chunking_strategy.type' must be 'auto' or 'static'")
    static = raw.get("static")
    if not isinstance(static, dict):
        raise invalid("'chunking_strategy.static' must be an object")
    size, overlap = static.get("max_chunk_size_tokens"), static.get("chunk_overlap_tokens", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not 100 <= size <= 4096:
        raise invalid("bad size")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= size // 2:
        raise invalid("bad overlap")
    return size, overlap


def old_create(body: dict[str, Any]) -> tuple[Any, ...]:
    name = optional_str(body, "name", "", MAX_NAME_CHARS) or ""
    description = optional_str(body, "description", "", MAX_DESCRIPTION_CHARS) or ""
    meta = metadata(body)
    expires = _old_expires_after(body)
    file_ids = body.get("file_ids") or []
    if not isinstance(file_ids, list) or not all(isinstance(f, str) for f in file_ids):
        raise invalid("'file_ids' must be an array of file ids", param="file_ids")
    chunking = _old_chunking(body.get("chunking_strategy"))
    return name, description, meta, expires, file_ids, chunking


def new_create(body: dict[str, Any]) -> tuple[Any, ...]:
    asked = parse(VectorStoreCreate, body)
    expires = asked.expires_after
    static = asked.chunking_strategy.static if asked.chunking_strategy else None
    return (
        asked.name,
        asked.description,
        asked.metadata,
        (expires.anchor, expires.days) if expires else None,
        asked.file_ids,
        (static.max_chunk_size_tokens, static.chunk_overlap_tokens) if static else None,
    )


SEARCH_BODIES: dict[str, dict[str, Any]] = {
    "search, one query": {"query": "how do I rotate the logs"},
    "search, SDK-like": {
        "query": "how do I rotate the logs",
        "max_num_results": 8,
        "filters": {"type": "eq", "key": "section", "value": "8"},
        "ranking_options": {"ranker": "auto", "score_threshold": 0.2},
        "rewrite_query": False,
    },
    "search, 20 queries, nested filter": {
        "query": [f"query number {n} about logs" for n in range(20)],
        "max_num_results": 50,
        "mode": "hybrid",
        "filters": {
            "type": "and",
            "filters": [
                {"type": "in", "key": "section", "value": ["1", "5", "8"]},
                {
                    "type": "or",
                    "filters": [
                        {"type": "gte", "key": "year", "value": 2020},
                        {"type": "eq", "key": "pinned", "value": True},
                    ],
                },
            ],
        },
        "ranking_options": {"hybrid_search": {"embedding_weight": 2, "text_weight": 1}},
    },
}

# The embeddings body, as routes/embeddings.py read it.


def old_embeddings(body: dict[str, Any]) -> tuple[Any, ...]:
    raw = body.get("input")
    if raw is None:
        raise invalid("'input' is required", param="input")
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items or len(items) > MAX_EMBED_INPUTS:
        raise invalid("bad input", param="input")
    for item in items:
        if isinstance(item, int | list) and not isinstance(item, bool):
            raise invalid("token ids", param="input")
        if not isinstance(item, str) or item == "":
            raise invalid("bad item", param="input")
    encoding = optional_str(body, "encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise invalid("bad encoding", param="encoding_format")
    model = optional_str(body, "model")
    truncate = body.get("truncate")
    if truncate is None:
        truncate = False
    if not isinstance(truncate, bool):
        raise invalid("bad truncate", param="truncate")
    return items, encoding, model, body.get("dimensions"), truncate


def new_embeddings(body: dict[str, Any]) -> tuple[Any, ...]:
    asked = parse(EmbeddingRequest, body)
    return asked.input, asked.encoding_format, asked.model, asked.dimensions, asked.truncate


EMBEDDING_BODIES: dict[str, dict[str, Any]] = {
    "embeddings, one text": {"input": "how do I rotate the logs", "model": "all-MiniLM-L6-v2"},
    "embeddings, 2048 texts": {
        "input": [f"text number {n} about rotating logs" for n in range(2048)],
        "encoding_format": "base64",
        "dimensions": 384,
    },
}

CREATE_BODIES: dict[str, dict[str, Any]] = {
    "vector store create, name only": {"name": "handbook"},
    "vector store create, everything": {
        "name": "handbook",
        "description": "the team's handbook",
        "metadata": {f"key{n}": f"value {n}" for n in range(16)},
        "file_ids": [f"file-{n:024x}" for n in range(20)],
        "chunking_strategy": {
            "type": "static",
            "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 50},
        },
        "expires_after": {"anchor": "last_active_at", "days": 7},
    },
}

# A conversation's create, as routes/conversations.py read it (each item checked by
# chat/items.parse_items both ways).


def old_conversation(body: dict[str, Any]) -> tuple[Any, ...]:
    raw = body.get("items")
    if isinstance(raw, list) and len(raw) > MAX_NEW_ITEMS:
        raise invalid("too many items", param="items")
    if isinstance(raw, str):
        raise invalid("'items' must be an array of items", param="items")
    items = [] if raw is None else [item.message() for item in parse_items(raw, "items")]
    title = optional_str(body, "title", "", MAX_TITLE_CHARS) or ""
    return metadata(body), title, items


def new_conversation(body: dict[str, Any]) -> tuple[Any, ...]:
    asked = parse(ConversationCreate, body)
    return asked.metadata, asked.title, asked.items


CONVERSATION_BODIES: dict[str, dict[str, Any]] = {
    "conversation create, empty": {},
    "conversation create, 20 items": {
        "metadata": {"topic": "logs"},
        "title": "Rotating logs",
        "items": [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"line {n} about logs"}
            for n in range(20)
        ],
    },
}

FAMILIES: list[tuple[str, Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], Any]]] = [
    *((name, old_search, new_search) for name in SEARCH_BODIES),
    *((name, old_create, new_create) for name in CREATE_BODIES),
    *((name, old_embeddings, new_embeddings) for name in EMBEDDING_BODIES),
    *((name, old_conversation, new_conversation) for name in CONVERSATION_BODIES),
    *((name, old_response, new_response) for name in RESPONSE_BODIES),
    *((name, old_chat, new_chat) for name in CHAT_BODIES),
]
BODIES = {
    **SEARCH_BODIES,
    **CREATE_BODIES,
    **EMBEDDING_BODIES,
    **CONVERSATION_BODIES,
    **RESPONSE_BODIES,
    **CHAT_BODIES,
}


def measure(repeats: int, number: int, only: str = "") -> list[tuple[str, float, float]]:
    """Median microseconds per body, old and new alternating within each repeat, so that a
    noisy neighbour slows both alike."""
    rows = []
    for name, old, new in FAMILIES:
        if not name.startswith(only):
            continue
        body = BODIES[name]
        # Same answer both ways, else the comparison means nothing.
        assert old(body) == new(body), name
        befores, afters = [], []
        for _ in range(repeats):
            befores.append(timeit.timeit(lambda: old(body), number=number))  # noqa: B023
            afters.append(timeit.timeit(lambda: new(body), number=number))  # noqa: B023
        scale = 1e6 / number
        rows.append((name, statistics.median(befores) * scale, statistics.median(afters) * scale))
    return rows


def table(rows: list[tuple[str, float, float]]) -> str:
    lines = [
        "| Body | hand-written checks (µs) | pydantic model (µs) | model / hand-written |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, before, after in rows:
        lines.append(f"| {name} | {before:.1f} | {after:.1f} | {after / before:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--only", default="", help="the bodies whose name starts so")
    args = parser.parse_args()
    rows = measure(args.repeats, args.number, args.only)
    print(f"Python {platform.python_version()}, median of {args.repeats} x {args.number}")
    print(table(rows))


if __name__ == "__main__":
    main()
