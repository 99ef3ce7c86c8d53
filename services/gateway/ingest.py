"""The ingestion pipeline: chunking strategy, text -> chunks -> vectors. No web framework."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from services.common.model_info import ModelInfo
from services.common.vocabulary import (
    CHARS_PER_TOKEN,
    MAX_CHUNK_TOKENS,
    MIN_CHUNK_TOKENS,
    STATIC,
)
from services.gateway.chunking import Chunk, CountTokens, chunk_text
from services.gateway.clients import EmbedderClient
from services.gateway.embed_cache import EmbeddingCache, text_hash
from services.gateway.requests import RequestModel, fail, parse
from services.pb import store_pb2

# OpenAI's "auto" strategy is 800 tokens with 400 overlap; a model whose context is smaller
# (MiniLM: 256) gets chunks of its full context and no overlap. On the docstring benchmark
# (2,000 documents) a quarter of overlap embedded 13% more tokens and changed recall@10 and
# MRR@10 of the default search by less than 0.005 (the chunker already cuts at paragraphs
# and sentences); a static strategy still sets any overlap.
AUTO_MAX_TOKENS = 800
AUTO_OVERLAP_TOKENS = 400
# A chunk longer than the model's window is embedded as windows overlapping by a quarter of
# one, so that a passage cut by one window's end is whole in the next.
WINDOW_OVERLAP_DIVISOR = 4


@dataclass(frozen=True)
class ChunkingStrategy:
    max_tokens: int
    overlap_tokens: int

    def message(self) -> store_pb2.ChunkingStrategy:
        return store_pb2.ChunkingStrategy(
            max_chunk_size_tokens=self.max_tokens, chunk_overlap_tokens=self.overlap_tokens
        )

    @classmethod
    def from_message(cls, message: store_pb2.ChunkingStrategy) -> ChunkingStrategy:
        return cls(message.max_chunk_size_tokens, message.chunk_overlap_tokens)


class StaticChunking(RequestModel):
    max_chunk_size_tokens: Annotated[int, Field(ge=MIN_CHUNK_TOKENS, le=MAX_CHUNK_TOKENS)]
    chunk_overlap_tokens: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _overlap_within_half(self) -> StaticChunking:
        half = self.max_chunk_size_tokens // 2
        if self.chunk_overlap_tokens > half:
            raise fail(
                "invalid_value",
                f"'{{path}}.chunk_overlap_tokens' must be an integer from 0 to half of "
                f"max_chunk_size_tokens ({half})",
            )
        return self


class ChunkingStrategyBody(RequestModel):
    """OpenAI's chunking_strategy: {"type": "auto"} or {"type": "static", "static": {...}}."""

    type: Literal["auto", "static"]
    static: StaticChunking | None = None

    @model_validator(mode="after")
    def _static_has_sizes(self) -> ChunkingStrategyBody:
        if self.type == STATIC and self.static is None:
            raise fail("invalid_value", "'{path}.static' must be an object")
        return self


def resolve_chunking(
    raw: ChunkingStrategyBody | Any, model: ModelInfo, param: str = "chunking_strategy"
) -> ChunkingStrategy:
    """An OpenAI chunking_strategy (a parsed body's, or JSON from a form or a batch's files[],
    then named by `param`): OpenAI's whole range, whatever the model's context (a chunk
    longer than it is embedded as several windows: `windows`)."""
    limit = model.max_input_tokens
    asked = raw if isinstance(raw, ChunkingStrategyBody | None) else None
    if raw is not None and asked is None:
        asked = parse(ChunkingStrategyBody, raw, at=param)
    if asked is None or asked.static is None:
        if limit >= AUTO_MAX_TOKENS:
            return ChunkingStrategy(AUTO_MAX_TOKENS, AUTO_OVERLAP_TOKENS)
        return ChunkingStrategy(limit, 0)
    return ChunkingStrategy(asked.static.max_chunk_size_tokens, asked.static.chunk_overlap_tokens)


def chunk_lexically(text: str, strategy: ChunkingStrategy) -> list[Chunk]:
    """Chunks for a lexical pass, counted in characters (CHARS_PER_TOKEN): the model's
    tokenizer is away. They are replaced by real ones when the vectors are filled in."""

    def estimate(texts: Sequence[str]) -> list[int]:
        return [max(1, math.ceil(len(item) / CHARS_PER_TOKEN)) for item in texts]

    return chunk_text(text, estimate, strategy.max_tokens, strategy.overlap_tokens)


def _counter(embedder: EmbedderClient) -> CountTokens:
    """Token counts from the embedder, for the chunker running in a worker thread."""
    loop = asyncio.get_running_loop()

    def count(texts: Sequence[str]) -> list[int]:
        future = asyncio.run_coroutine_threadsafe(embedder.count_tokens(texts), loop)
        return future.result()

    return count


async def chunk(embedder: EmbedderClient, text: str, strategy: ChunkingStrategy) -> list[Chunk]:
    """Chunks text with real model token counts, asking the embedder from a worker thread."""
    special = (await embedder.info()).special_tokens
    return await asyncio.to_thread(
        chunk_text,
        text,
        _counter(embedder),
        strategy.max_tokens,
        strategy.overlap_tokens,
        special,
    )


async def windows(embedder: EmbedderClient, chunks: Sequence[Chunk]) -> list[list[Chunk]]:
    """Each chunk as the texts to embed: itself when it fits the model's window (every chunk
    of a strategy within it), else overlapping windows that do, cut at natural boundaries as
    chunks are. The store keeps the first window's vector as the chunk's and finds the chunk
    by its best window (services/store/windows.py)."""
    info = await embedder.info()
    limit = info.max_input_tokens
    if all(item.tokens <= limit for item in chunks):
        return [[item] for item in chunks]
    count = _counter(embedder)

    def cut(item: Chunk) -> list[Chunk]:
        if item.tokens <= limit:
            return [item]
        overlap = (limit - info.special_tokens) // WINDOW_OVERLAP_DIVISOR
        return chunk_text(item.text, count, limit, overlap, info.special_tokens) or [item]

    return await asyncio.to_thread(lambda: [cut(item) for item in chunks])


async def embed_chunks(
    embedder: EmbedderClient,
    chunks: Sequence[Chunk],
    batch_size: int,
    cache: EmbeddingCache | None = None,
) -> np.ndarray:
    """Embeds chunks in batches; chunks already fit the model, so nothing is truncated.

    Each distinct text is embedded once. With a cache, texts whose vectors the store holds
    for this exact model are not embedded at all (one batch lookup), and the new vectors are
    stored for next time.
    """
    info = await embedder.info()
    if not chunks:
        return np.zeros((0, info.dimensions), dtype=np.float32)
    texts = list(dict.fromkeys(item.text for item in chunks))
    hashes = [text_hash(text) for text in texts] if cache is not None else []
    vectors = await cache.lookup(info, hashes) if cache is not None else [None] * len(texts)
    missing = [i for i, vector in enumerate(vectors) if vector is None]
    for start in range(0, len(missing), batch_size):
        batch = missing[start : start + batch_size]
        embedded = await embedder.embed([texts[i] for i in batch], truncate=False)
        for i, vector in zip(batch, embedded.vectors, strict=True):
            vectors[i] = vector
    found = [vector for vector in vectors if vector is not None]
    assert len(found) == len(texts), "every distinct text has a vector"
    unique = np.stack(found)
    if cache is not None and missing:
        await cache.save(info, [hashes[i] for i in missing], unique[missing])
    position = {text: i for i, text in enumerate(texts)}
    return unique[[position[item.text] for item in chunks]]
