"""The store's core API over one SQLite database: collections, files, ingest jobs, search.

Thread-safe: each calling thread gets its own connection. No gRPC here; the servicer adapts it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from services.store import (
    attachments,
    batches,
    catalog,
    files,
    fusion,
    ingest,
    jobs,
    lexical,
    migrations,
    search,
    vector_index,
)
from services.store.db import ThreadConnections
from services.store.errors import InvalidArgument
from services.store.filters import Filter
from services.store.operations import Operations, OperationsSettings
from services.store.records import (
    AddChunksResult,
    AttributeValue,
    BatchFileInput,
    ChunkInput,
    ClaimedJob,
    Collection,
    CollectionFile,
    File,
    FileBatch,
    Page,
    SearchHit,
    StoredChunk,
)

DEFAULT_LIST_LIMIT = 20


class Repository:
    def __init__(
        self,
        path: str | Path,
        clock: Callable[[], float] = time.time,
        max_attempts: int = jobs.MAX_ATTEMPTS,
        operations: OperationsSettings | None = None,
        index: vector_index.IndexSettings | None = None,
    ) -> None:
        self._connections = ThreadConnections(path)
        self.index = index or vector_index.IndexSettings()
        # Builds in progress: collection key -> last rowid copied.
        self._builds: dict[int, int] = {}
        self._clock = clock
        self._max_attempts = max_attempts
        # Embedding cache, audit log, stats, backup and vacuum.
        self.ops = Operations(self._connections, clock, operations or OperationsSettings())

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

    def build_indexes(self, budget_seconds: float = 0.5) -> bool:
        """Advances coarse index builds (vector_index.py) for about `budget_seconds`, one
        short transaction at a time; True while work remains. The server calls it from a
        background loop; one caller at a time."""
        conn = self._connections.get()
        deadline = time.monotonic() + budget_seconds
        pending = vector_index.pending_builds(conn, self.index)
        self._builds = {key: self._builds.get(key, 0) for key in pending}
        for key in pending:
            # At least one step per call, so any budget makes progress.
            while (
                after := vector_index.build_step(conn, key, self._builds[key], self.index)
            ) is not None:
                self._builds[key] = after
                if time.monotonic() >= deadline:
                    return True
            del self._builds[key]
        return bool(self._builds)

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
        expires_anchor: str = "",
        expires_days: int = 0,
    ) -> Collection:
        return catalog.create(
            self._connections.get(),
            name=name,
            model=model,
            dimensions=dimensions,
            metadata=metadata or {},
            now=self._now(),
            expires_anchor=expires_anchor,
            expires_days=expires_days,
        )

    def update_collection(
        self,
        collection_id: str,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        expires: tuple[str, int] | None = None,
    ) -> Collection:
        """Changes the fields given; `expires` is (anchor, days), ("", 0) for never."""
        return catalog.update(
            self._connections.get(), collection_id, name=name, metadata=metadata, expires=expires
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
        query: npt.ArrayLike | None,
        k: int,
        score_threshold: float = 0.0,
        model: str = "",
        filter: Filter | None = None,
        mode: str = search.VECTOR,
        query_text: str = "",
        exact: bool = False,
    ) -> list[SearchHit]:
        """`mode` is one of search.MODES (empty: vector); lexical uses only `query_text`,
        vector only `query`, hybrid both. `exact` skips the coarse index."""
        mode = mode or search.VECTOR
        if mode not in search.MODES:
            raise InvalidArgument(f"mode must be one of {', '.join(search.MODES)}, got {mode!r}")
        conn, now = self._connections.get(), self._now()
        if mode == search.LEXICAL:
            return lexical.matches(
                conn,
                collection_id=collection_id,
                text=query_text,
                k=k,
                score_threshold=score_threshold,
                now=now,
                filter=filter,
            )
        vector = np.asarray(query if query is not None else [], dtype=np.float32)
        if vector.size == 0:
            raise InvalidArgument(f"{mode} search needs a query vector")
        if mode == search.HYBRID:
            return fusion.hybrid(
                conn,
                collection_id=collection_id,
                query=vector,
                text=query_text,
                k=k,
                score_threshold=score_threshold,
                model=model,
                now=now,
                filter=filter,
                index=self.index,
                exact=exact,
            )
        return search.nearest(
            conn,
            collection_id=collection_id,
            query=vector,
            k=k,
            score_threshold=score_threshold,
            model=model,
            now=now,
            filter=filter,
            index=self.index,
            exact=exact,
        )

    # Files

    def create_file(self, filename: str, purpose: str, content: bytes) -> File:
        return files.create(
            self._connections.get(),
            filename=filename,
            purpose=purpose,
            content=content,
            now=self._now(),
        )

    def get_file(self, file_id: str) -> File:
        return files.get(self._connections.get(), file_id)

    def get_file_content(self, file_id: str) -> tuple[File, bytes]:
        return files.content(self._connections.get(), file_id)

    def list_files(
        self,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        purpose: str | None = None,
    ) -> Page[File]:
        return files.list_page(
            self._connections.get(), limit=limit, order=order, after=after, purpose=purpose
        )

    def delete_file(self, file_id: str) -> None:
        """Deletes the file and removes it from every collection."""
        files.delete(self._connections.get(), file_id)

    # Files in collections

    def attach_file(
        self,
        collection_id: str,
        file_id: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        chunking_json: str = "",
        model: str = "",
        dimensions: int = 0,
    ) -> CollectionFile:
        return attachments.attach(
            self._connections.get(),
            collection_id=collection_id,
            file_id=file_id,
            attributes=attributes or {},
            chunking_json=chunking_json,
            now=self._now(),
            model=model,
            dimensions=dimensions,
        )

    def get_collection_file(self, collection_id: str, file_id: str) -> CollectionFile:
        return attachments.get(self._connections.get(), collection_id, file_id)

    def find_collection_file(self, collection_id: str, sha256: str) -> CollectionFile | None:
        return attachments.find_by_content(self._connections.get(), collection_id, sha256)

    def list_collection_files(
        self,
        collection_id: str,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
        status: str | None = None,
        batch_id: str | None = None,
    ) -> Page[CollectionFile]:
        return attachments.list_page(
            self._connections.get(),
            collection_id=collection_id,
            limit=limit,
            order=order,
            after=after,
            before=before,
            status=status,
            batch_id=batch_id,
        )

    def update_collection_file(
        self, collection_id: str, file_id: str, attributes: Mapping[str, AttributeValue]
    ) -> CollectionFile:
        return attachments.update_attributes(
            self._connections.get(),
            collection_id=collection_id,
            file_id=file_id,
            attributes=attributes,
        )

    def detach_file(self, collection_id: str, file_id: str) -> None:
        attachments.detach(self._connections.get(), collection_id=collection_id, file_id=file_id)

    def get_collection_file_chunks(
        self, collection_id: str, file_id: str
    ) -> tuple[CollectionFile, list[StoredChunk]]:
        return attachments.chunks(
            self._connections.get(), collection_id=collection_id, file_id=file_id
        )

    # Batches

    def create_file_batch(
        self,
        collection_id: str,
        batch_files: Sequence[BatchFileInput],
        model: str = "",
        dimensions: int = 0,
    ) -> FileBatch:
        return batches.create(
            self._connections.get(),
            collection_id=collection_id,
            files=batch_files,
            now=self._now(),
            model=model,
            dimensions=dimensions,
        )

    def get_file_batch(self, collection_id: str, batch_id: str) -> FileBatch:
        return batches.get(self._connections.get(), collection_id=collection_id, batch_id=batch_id)

    def cancel_file_batch(self, collection_id: str, batch_id: str) -> FileBatch:
        return batches.cancel(
            self._connections.get(),
            collection_id=collection_id,
            batch_id=batch_id,
            now=self._now(),
        )

    # Ingest jobs

    def claim_jobs(self, worker_id: str, max_jobs: int, lease_seconds: int) -> list[ClaimedJob]:
        return jobs.claim(
            self._connections.get(),
            worker_id=worker_id,
            max_jobs=max_jobs,
            lease_seconds=lease_seconds,
            now=self._now(),
            max_attempts=self._max_attempts,
        )

    def renew_job(self, job_id: int, worker_id: str, lease_seconds: int) -> int:
        """Extends the lease; returns its new expiry (unix seconds)."""
        return jobs.renew(
            self._connections.get(),
            job_id=job_id,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            now=self._now(),
        )

    def complete_job(
        self,
        job_id: int,
        worker_id: str,
        chunks: Sequence[ChunkInput],
        vectors: npt.ArrayLike,
        model: str,
    ) -> CollectionFile:
        return jobs.complete(
            self._connections.get(),
            job_id=job_id,
            worker_id=worker_id,
            chunks=chunks,
            vectors=np.asarray(vectors, dtype=np.float32),
            model=model,
            now=self._now(),
        )

    def fail_job(
        self,
        job_id: int,
        worker_id: str,
        code: str,
        message: str,
        retry_after_seconds: int = 0,
    ) -> CollectionFile:
        return jobs.fail(
            self._connections.get(),
            job_id=job_id,
            worker_id=worker_id,
            code=code,
            message=message,
            retry_after_seconds=retry_after_seconds,
            now=self._now(),
            max_attempts=self._max_attempts,
        )
