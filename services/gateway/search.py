"""Searching a vector store for one or more queries: embed, fan out, fall back, merge.

Plain asyncio over the two clients, no web framework: the route only parses and renders.
The query vectors go to the store as the embedder sent them (bytes), each query's search runs
concurrently, and the store answers NOT_FOUND for an unknown vector store itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.vocabulary import LEXICAL, VECTOR
from services.gateway import errors
from services.gateway.clients import EmbedderClient, Store
from services.gateway.embedders import Embedders
from services.pb import store_pb2

log = logging.getLogger(__name__)

# Embedder failures after which a search answers from the lexical index instead: the embedder
# is down or not answering. An overloaded one (429) is passed on with its Retry-After, as
# clients retry it and get full-quality results moments later.
EMBEDDER_DOWN = (errors.Unavailable, errors.Timeout)


@dataclass(frozen=True)
class Search:
    vector_store_id: str
    queries: Sequence[str]
    k: int
    mode: str
    score_threshold: float = 0.0
    filter: store_pb2.Filter | None = None
    exact: bool = False
    # A hybrid search's share of the vector ranking (OpenAI's hybrid_search weights); None:
    # the store's default.
    vector_weight: float | None = None


EMBEDDER_UNAVAILABLE = "embedder-unavailable"
VECTOR_INDEX_UNAVAILABLE = "vector-index-unavailable"


@dataclass(frozen=True)
class Found:
    hits: list[store_pb2.SearchHit]
    # The mode that ranked the hits, and whether it replaced the one asked for.
    mode: str
    degraded: bool
    # Why: "embedder-unavailable", or "vector-index-unavailable" (a store without sqlite-vec).
    reason: str = ""
    # Tokens of the queries embedded for this search (0 when another search of the same call
    # embedded them, or none were).
    embedded_tokens: int = 0


@dataclass(frozen=True)
class Deadlines:
    # Seconds for the queries' embedding, and for each query's search in the store.
    embed: float = 10.0
    store: float = 3.0


async def search(
    embedders: Embedders, store: Store, request: Search, deadlines: Deadlines
) -> Found:
    """The best k chunks over all queries (each chunk with its best score), best first.

    Vector and hybrid searches fall back to lexical when the embedder is down or does not
    answer within its deadline. A store that does not answer within its own is a 503 with
    Retry-After: a search should not hang for as long as a stalled store does.
    """
    return (await search_many(embedders, store, [request], deadlines))[0]


async def search_many(
    embedders: Embedders, store: Store, requests: Sequence[Search], deadlines: Deadlines
) -> list[Found]:
    """`search` for several vector stores at once: each store's queries are embedded with its
    model, once per model. A store whose model changed meanwhile (a re-index switched it; the
    store refuses vectors of the old one) is looked up again and searched once more."""
    try:
        return await _search_many(embedders, store, requests, deadlines, refresh=False)
    except errors.ModelMismatch:
        if len(embedders.clients) == 1:
            raise
        return await _search_many(embedders, store, requests, deadlines, refresh=True)


async def _search_many(
    embedders: Embedders,
    store: Store,
    requests: Sequence[Search],
    deadlines: Deadlines,
    refresh: bool,
) -> list[Found]:
    targets = await asyncio.gather(
        *(_embedder_of(embedders, store, request, refresh) for request in requests)
    )
    keys = {
        (id(embedder), tuple(request.queries)): (embedder, request.queries)
        for request, embedder in zip(requests, targets, strict=True)
        if embedder is not None
    }
    embedded = await asyncio.gather(
        *(
            query_vectors(embedder, queries, VECTOR, deadlines.embed)
            for embedder, queries in keys.values()
        )
    )
    vectors = {key: found[1] for key, found in zip(keys, embedded, strict=True)}
    calls = []
    charged: list[int] = []
    # Queries embedded once for several stores count once.
    uncharged = set(vectors)
    for request, embedder in zip(requests, targets, strict=True):
        key = (id(embedder), tuple(request.queries))
        rows = None if embedder is None else vectors[key]
        mode = request.mode if rows is not None or request.mode == LEXICAL else LEXICAL
        calls.append(search_embedded(store, request, mode, rows, deadlines))
        charged.append(rows.tokens if rows is not None and key in uncharged else 0)
        uncharged.discard(key)
    found = await asyncio.gather(*calls)
    return [
        dataclasses.replace(one, embedded_tokens=tokens) if tokens else one
        for one, tokens in zip(found, charged, strict=True)
    ]


async def _embedder_of(
    embedders: Embedders, store: Store, request: Search, refresh: bool
) -> EmbedderClient | None:
    """The embedder of the store's model; None for a lexical search or when it is down."""
    if request.mode == LEXICAL:
        return None
    try:
        return (await embedders.for_store(store, request.vector_store_id, refresh))[0]
    except EMBEDDER_DOWN as error:
        log.warning("embedder unavailable (%s): searching lexically", error)
        return None


async def search_embedded(
    store: Store,
    request: Search,
    mode: str,
    vectors: QueryVectors | None,
    deadlines: Deadlines,
) -> Found:
    """`search` with the queries already embedded (`query_vectors`): several vector stores
    searched for the same queries embed them once. `mode` is the one they can run in."""
    calls = [
        store.Search(_message(request, mode, index, vectors), timeout=deadlines.store)
        for index in range(len(request.queries))
    ]
    try:
        replies = await asyncio.gather(*calls)
    except errors.Timeout:
        raise errors.Unavailable(
            f"the store did not answer within {deadlines.store:g} s; retry shortly",
            retry_after=1,
        ) from None
    best: dict[str, store_pb2.SearchHit] = {}
    for reply in replies:
        # Several queries: each chunk keeps its best score over them.
        for hit in reply.hits:
            if hit.chunk_id not in best or best[hit.chunk_id].score < hit.score:
                best[hit.chunk_id] = hit
    hits = sorted(best.values(), key=lambda h: h.score, reverse=True)[: request.k]
    # A store without sqlite-vec answers vector searches lexically and says so in its mode.
    ran = next((reply.mode for reply in replies if reply.mode), mode)
    if ran != request.mode:
        reason = EMBEDDER_UNAVAILABLE if ran == mode else VECTOR_INDEX_UNAVAILABLE
        return Found(hits=hits, mode=ran, degraded=True, reason=reason)
    return Found(hits=hits, mode=ran, degraded=False)


@dataclass(frozen=True)
class QueryVectors:
    model: str
    dimensions: int
    rows: list[bytes]
    # The queries' tokens, all together.
    tokens: int = 0


async def query_vectors(
    embedder: EmbedderClient, queries: Sequence[str], mode: str, timeout: float
) -> tuple[str, QueryVectors | None]:
    """The mode a search can run in and, unless lexical, its queries' vectors: vector and
    hybrid searches become lexical when the embedder is down or does not answer in time."""
    if mode == LEXICAL:
        return mode, None
    try:
        return mode, await _embed(embedder, queries, timeout)
    except EMBEDDER_DOWN as error:
        log.warning("embedder unavailable (%s): searching lexically", error)
        return LEXICAL, None


async def _embed(embedder: EmbedderClient, queries: Sequence[str], timeout: float) -> QueryVectors:
    try:
        embedded = await embedder.embed(queries, truncate=False, timeout=timeout, interactive=True)
    except errors.InputTooLong as error:
        # A query beyond the model's context would be searched by its first tokens only.
        raise errors.InvalidRequest(
            f"query {error.index} has {error.tokens} tokens but the embedding model reads at "
            f"most {error.limit}; shorten it, or search it with mode 'lexical'",
            param="query",
            code="context_length_exceeded",
        ) from None
    rows = [embedded.vector_bytes(index) for index in range(len(queries))]
    return QueryVectors(embedded.model, embedded.dimensions, rows, sum(embedded.token_counts))


def _message(
    request: Search, mode: str, index: int, vectors: QueryVectors | None
) -> store_pb2.SearchRequest:
    message = store_pb2.SearchRequest(
        vector_store_id=request.vector_store_id,
        k=request.k,
        score_threshold=request.score_threshold,
        mode=mode,
        query_text=request.queries[index],
        exact=request.exact,
    )
    if request.vector_weight is not None:
        message.vector_weight = request.vector_weight
    if vectors is not None and mode != LEXICAL:
        message.query_vector = vectors.rows[index]
        message.dimensions = vectors.dimensions
        message.model = vectors.model
    if request.filter is not None:
        message.filter.CopyFrom(request.filter)
    return message
