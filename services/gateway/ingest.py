"""The ingestion pipeline: chunking strategy, text -> chunks -> vectors. No web framework."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from services.gateway.chunking import Chunk, chunk_text
from services.gateway.clients import EmbedderClient, ModelInfo
from services.gateway.errors import invalid

# OpenAI's "auto" strategy is 800 tokens with 400 overlap; a model whose context is smaller
# (MiniLM: 256) gets chunks of its full context and a quarter of that as overlap.
AUTO_MAX_TOKENS = 800
AUTO_OVERLAP_TOKENS = 400
# [CLS] and [SEP]: what the embedder's token count adds to every text.
SPECIAL_TOKENS = 2


@dataclass(frozen=True)
class ChunkingStrategy:
    max_tokens: int
    overlap_tokens: int
    kind: str  # "auto" or "static"

    def as_json(self) -> dict[str, Any]:
        # OpenAI reports the resolved sizes for both kinds.
        return {
            "type": "static",
            "static": {
                "max_chunk_size_tokens": self.max_tokens,
                "chunk_overlap_tokens": self.overlap_tokens,
            },
        }


def resolve_chunking(
    raw: Any, model: ModelInfo, param: str = "chunking_strategy"
) -> ChunkingStrategy:
    """Validates an OpenAI chunking_strategy against the model's context."""
    limit = model.max_input_tokens
    if raw is None or (isinstance(raw, dict) and raw.get("type") == "auto"):
        auto = min(AUTO_MAX_TOKENS, limit)
        return ChunkingStrategy(auto, min(AUTO_OVERLAP_TOKENS, auto // 4), "auto")
    if not isinstance(raw, dict) or raw.get("type") != "static":
        raise invalid(f"'{param}.type' must be 'auto' or 'static'", param=param)
    static = raw.get("static")
    if not isinstance(static, dict):
        raise invalid(f"'{param}.static' must be an object", param=param)
    size: Any = static.get("max_chunk_size_tokens")
    overlap: Any = static.get("chunk_overlap_tokens", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not 100 <= size <= 4096:
        raise invalid(
            f"'{param}.static.max_chunk_size_tokens' must be an integer from 100 to 4096",
            param=param,
        )
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= size // 2:
        raise invalid(
            f"'{param}.static.chunk_overlap_tokens' must be an integer from 0 to half "
            f"of max_chunk_size_tokens ({size // 2})",
            param=param,
        )
    if size > limit:
        raise invalid(
            f"'{param}.static.max_chunk_size_tokens' is {size}, but the embedding model "
            f"{model.name} accepts at most {limit} tokens per chunk; use {limit} or less",
            param=param,
        )
    return ChunkingStrategy(size, overlap, "static")


def strategy_from_json(raw: Any) -> ChunkingStrategy:
    """A strategy recorded by resolve_chunking (always static, with sizes) read back."""
    static = raw["static"]
    return ChunkingStrategy(
        static["max_chunk_size_tokens"], static["chunk_overlap_tokens"], raw.get("type", "static")
    )


async def chunk(embedder: EmbedderClient, text: str, strategy: ChunkingStrategy) -> list[Chunk]:
    """Chunks text with real model token counts, asking the embedder from a worker thread."""
    loop = asyncio.get_running_loop()

    def count(texts: Sequence[str]) -> list[int]:
        future = asyncio.run_coroutine_threadsafe(embedder.count_tokens(texts), loop)
        return future.result()

    return await asyncio.to_thread(
        chunk_text, text, count, strategy.max_tokens, strategy.overlap_tokens, SPECIAL_TOKENS
    )


async def embed_chunks(
    embedder: EmbedderClient, chunks: Sequence[Chunk], batch_size: int
) -> np.ndarray:
    """Embeds chunks in batches; chunks already fit the model, so nothing is truncated."""
    info = await embedder.info()
    if not chunks:
        return np.zeros((0, info.dimensions), dtype=np.float32)
    parts = []
    for start in range(0, len(chunks), batch_size):
        batch = [c.text for c in chunks[start : start + batch_size]]
        parts.append((await embedder.embed(batch, truncate=False)).vectors)
    return np.vstack(parts)
