"""The gateway's side of the store's embedding cache: batch lookups and stores by text hash.

A vector is cached under the exact model weights (the embedder's name and the sha256 of its
GGUF) and the sha256 of the exact text, so a hit is the vector the embedder would return.
The cache only saves work: when the store cannot answer, texts are embedded as usual.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

from services.common.model_info import ModelInfo
from services.common.vectors import FloatMatrix, from_bytes, to_bytes
from services.gateway.clients import Store
from services.gateway.errors import ApiError
from services.pb import store_pb2

log = logging.getLogger(__name__)

# Hashes per store call (the store's limit is 4096; 1024 vectors of 384 dims are 1.5 MB).
BATCH = 1024


def text_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def model_key(info: ModelInfo) -> str | None:
    """The cache key of the served weights; None when the embedder reports no digest."""
    return f"{info.name}@sha256:{info.digest}" if info.digest else None


class EmbeddingCache:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def lookup(self, info: ModelInfo, hashes: Sequence[bytes]) -> list[FloatMatrix | None]:
        """The cached vector of each hash, or None (also for every hash if the store fails)."""
        key = model_key(info)
        found: list[FloatMatrix | None] = [None] * len(hashes)
        if key is None:
            return found
        for start in range(0, len(hashes), BATCH):
            part = list(hashes[start : start + BATCH])
            try:
                reply = await self._store.GetCachedEmbeddings(
                    store_pb2.GetCachedEmbeddingsRequest(
                        model_key=key, dimensions=info.dimensions, text_sha256=part
                    )
                )
                flags = list(reply.found)
                if len(flags) != len(part):
                    raise ValueError(f"{len(flags)} flags for {len(part)} hashes")
                vectors = iter(from_bytes(reply.vectors, info.dimensions, sum(flags)))
            except (ApiError, ValueError) as error:
                log.warning("embedding cache lookup failed, embedding instead: %s", error)
                return [None] * len(hashes)
            for offset, hit in enumerate(flags):
                if hit:
                    found[start + offset] = next(vectors)
        return found

    async def save(self, info: ModelInfo, hashes: Sequence[bytes], vectors: FloatMatrix) -> None:
        key = model_key(info)
        if key is None or not len(hashes):
            return
        for start in range(0, len(hashes), BATCH):
            try:
                await self._store.PutCachedEmbeddings(
                    store_pb2.PutCachedEmbeddingsRequest(
                        model_key=key,
                        dimensions=info.dimensions,
                        text_sha256=list(hashes[start : start + BATCH]),
                        vectors=to_bytes(vectors[start : start + BATCH]),
                    )
                )
            except ApiError as error:
                log.warning("cannot store vectors in the embedding cache: %s", error.message)
                return
