"""The store's core API: collections, chunks and search over one SQLite database.

Thread-safe: each calling thread gets its own connection. No gRPC here; the servicer adapts it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from services.store import catalog, ingest, migrations, search
from services.store.db import ThreadConnections
from services.store.records import (
    AddChunksResult,
    AttributeValue,
    ChunkInput,
    Collection,
    Page,
    SearchHit,
)

DEFAULT_LIST_LIMIT = 20


class Repository:
    def __init__(self, path: str | Path, clock: Callable[[], float] = time.time) -> None:
        self._connections = ThreadConnections(path)
        self._clock = clock

    @property
    def path(self) -> Path:
        return self._connections.path

    def _now(self) -> int:
        return int(self._clock())

    def migrate(self) -> int:
        """Brings the schema up to date; returns its version. Raises DatabaseTooNew."""
        return migrations.migrate(self._connections.get())

    def close(self) -> None:
        self._connections.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def create_collection(
        self,
        name: str,
        model: str,
        dimensions: int,
        metadata: Mapping[str, str] | None = None,
    ) -> Collection:
        return catalog.create(
            self._connections.get(),
            name=name,
            model=model,
            dimensions=dimensions,
            metadata=metadata or {},
            now=self._now(),
        )

    def get_collection(self, collection_id: str) -> Collection:
        return catalog.lookup(self._connections.get(), collection_id)[1]

    def list_collections(
        self,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
    ) -> Page[Collection]:
        return catalog.list_page(
            self._connections.get(), limit=limit, order=order, after=after, before=before
        )

    def delete_collection(self, collection_id: str) -> None:
        catalog.delete(self._connections.get(), collection_id)

    def add_chunks(
        self,
        collection_id: str,
        file_id: str,
        filename: str,
        attributes: Mapping[str, AttributeValue],
        chunks: Sequence[ChunkInput],
        vectors: npt.ArrayLike,
        model: str,
    ) -> AddChunksResult:
        return ingest.add_chunks(
            self._connections.get(),
            collection_id=collection_id,
            file_id=file_id,
            filename=filename,
            attributes=attributes,
            chunks=chunks,
            vectors=np.asarray(vectors, dtype=np.float32),
            model=model,
            now=self._now(),
        )

    def search(
        self,
        collection_id: str,
        query: npt.ArrayLike,
        k: int,
        score_threshold: float = 0.0,
        model: str = "",
    ) -> list[SearchHit]:
        return search.nearest(
            self._connections.get(),
            collection_id=collection_id,
            query=np.asarray(query, dtype=np.float32),
            k=k,
            score_threshold=score_threshold,
            model=model,
            now=self._now(),
        )
