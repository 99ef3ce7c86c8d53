"""The store's core API over one SQLite database: vector stores, files, ingest jobs, search and
operations (embedding cache, audit log, stats, backup, vacuum).

One facade: each method runs one module function on the calling thread's own connection (so
it is thread-safe) with the store's clock and settings. No gRPC here; store/wire adapts it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType

import apsw
import numpy as np
import numpy.typing as npt

from services.common.versions import process_versions
from services.common.vocabulary import LEXICAL, VECTOR
from services.store import (
    access,
    attachments,
    audit,
    batches,
    cache,
    conversations,
    files,
    fulltext,
    ingest,
    jobs,
    keys,
    maintenance,
    migrations,
    projects,
    reindex,
    replica,
    resident,
    responses,
    retention,
    search,
    vacuum,
    vector_index,
    vector_stores,
)
from services.store.config import PostgresSettings
from services.store.db import (
    ThreadConnections,
    atomic,
    database_key,
    library_versions,
    vectors_available,
    vectors_error,
)
from services.store.disk import DiskWatch
from services.store.errors import (
    InvalidArgument,
    MaintenanceRunning,
    PreconditionFailed,
    ReplicaUnavailable,
)
from services.store.postgres import operations
from services.store.postgres import schema as postgres_schema
from services.store.postgres.connection import PostgresConnections
from services.store.records import (
    DEFAULT_PROJECT,
    EVERYTHING,
    Access,
    AddChunksResult,
    ApiKey,
    AttributeValue,
    AuditEntry,
    BackupInfo,
    BackupResult,
    BatchFileInput,
    Chunking,
    ChunkInput,
    ClaimedJob,
    Conversation,
    EmbeddingModel,
    File,
    FileBatch,
    Item,
    ItemHit,
    KeyState,
    KeyUsage,
    NewFile,
    NewItem,
    NewResponse,
    Page,
    PendingText,
    Project,
    ResponseRecord,
    RestoreResult,
    SearchHit,
    Stats,
    StoredChunk,
    StoreStatus,
    VacuumResult,
    VectorStore,
    VectorStoreFile,
)
from services.store.replica import ReplicaSettings, ReplicaStatus
from services.store.retention import RetentionSettings, Swept
from services.store.search import items as item_search
from services.store.search.filters import Filter
from services.store.sql import Connection

DEFAULT_LIST_LIMIT = 20

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperationsSettings:
    # None: `backups/` beside the database.
    backup_dir: Path | None = None
    cache_max_entries: int = cache.DEFAULT_MAX_ENTRIES
    audit_retention_days: int = audit.DEFAULT_RETENTION_DAYS
    # The newest backups kept after each backup (0: all), and the free space a backup must
    # leave on its disk.
    backup_keep: int = 10
    backup_reserve_bytes: int = 128 << 20
    # Litestream replicates the database (replica.py): it owns the checkpoints then.
    replica: ReplicaSettings | None = None
    # How long chat history is kept (retention.py).
    retention: RetentionSettings = field(default_factory=RetentionSettings)


class Repository:
    def __init__(
        self,
        path: str | Path,
        clock: Callable[[], float] = time.time,
        max_attempts: int = jobs.MAX_ATTEMPTS,
        operations: OperationsSettings | None = None,
        index: vector_index.IndexSettings | None = None,
        postgres: PostgresSettings | None = None,
    ) -> None:
        """`postgres`: the database is PostgreSQL's (RAGD_DATABASE_URL); `path` is then only
        where the store's own files go (backups, full-text indexes of SQLite's engine)."""
        self._settings = operations or OperationsSettings()
        self._sqlite_connections = ThreadConnections(
            path, checkpoints=self._settings.replica is None
        )
        self._connections: ThreadConnections | PostgresConnections = self._sqlite_connections
        if postgres is not None:
            self._connections = PostgresConnections(postgres.url, limit=postgres.pool_max)
        self.postgres = postgres
        self.index = index or vector_index.IndexSettings()
        # Builds in progress: vector store key -> last rowid copied.
        self._builds: dict[int, int] = {}
        self._clock = clock
        self._max_attempts = max_attempts
        self._cache_counters = cache.Counters()
        self._maintenance = threading.Lock()
        # Held by revocations and by the step of a restore that carries them over, so that
        # none is made between the two and lost.
        self._revoking = threading.Lock()
        self._next_prune = 0.0
        self.disk = DiskWatch(self.path.resolve().parent)

    @property
    def path(self) -> Path:
        return self._sqlite_connections.path

    @property
    def engine(self) -> str:
        """The database engine: "sqlite" or "postgres"."""
        return "sqlite" if self.postgres is None else "postgres"

    def database_connections(self) -> tuple[int, int] | None:
        """PostgreSQL connections open and the most opened; None on SQLite (a file)."""
        if not isinstance(self._connections, PostgresConnections):
            return None
        return self._connections.counts()

    @property
    def backup_dir(self) -> Path:
        configured = self._settings.backup_dir
        return configured if configured is not None else self.path.parent / "backups"

    def _now(self) -> int:
        return int(self._clock())

    def _conn(self) -> Connection:
        return self._connections.get()

    def _sqlite(self, what: str) -> apsw.Connection:
        """The SQLite connection for what only SQLite's engine does here; on PostgreSQL a
        PreconditionFailed naming the tooling that does it there."""
        if self.postgres is not None:
            raise PreconditionFailed(
                f"{what} is not done by ragd on PostgreSQL: PostgreSQL's own tooling "
                "(pg_dump, pgBackRest, its VACUUM and autovacuum) owns backups and maintenance"
            )
        return self._sqlite_connections.get()

    def migrate(self) -> int:
        """Brings the schema up to date; returns its version. Raises DatabaseTooNew. With
        sqlite-vec loaded, also creates the vector tables of vector stores made without it."""
        if isinstance(self._connections, PostgresConnections):
            return postgres_schema.migrate(self._connections.get())
        conn = self._sqlite("migrating a SQLite database")
        version = migrations.migrate(conn)
        if vectors_available():
            vector_index.create_missing(conn)
        fulltext.for_database(conn).remove_orphans(conn)
        return version

    @property
    def vectors(self) -> bool:
        """sqlite-vec is loaded (see db.vectors_available); PostgreSQL has pgvector."""
        self._conn()  # the first connection decides
        if self.postgres is not None:
            return True  # pgvector's (postgres/vectors.py)
        return vectors_available()

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

    def build_indexes(self, budget_seconds: float = 0.5) -> bool:
        """Advances coarse index builds (vector_index.py) for about `budget_seconds`, one
        short transaction at a time, and full-text indexes (fulltext.py): applies what is
        queued, one batch, and rebuilds missing ones; True while work remains. The server
        calls it from a background loop; one caller at a time."""
        if self.postgres is not None:
            return False  # PostgreSQL keeps its indexes itself, in the same transactions
        conn = self._sqlite("index building")
        texts = self._fulltext_step(conn)
        if not vectors_available():
            return texts
        # Vectors into memory first: searches of a vector store not there yet scan SQLite.
        if vector_index.warm(conn, self.index.resident):
            return True
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
        return bool(self._builds) or texts

    def _fulltext_step(self, conn: apsw.Connection) -> bool:
        indexes = fulltext.for_database(conn)
        try:
            busy = indexes.sync(conn)
            missing = indexes.missing(conn)
            if missing:
                busy = indexes.rebuild_step(conn, missing[0]) or busy
        except (fulltext.Unavailable, OSError, ValueError) as error:
            # The disk is full, most likely; what is queued stays queued.
            log.warning("full-text indexes wait: %s", error)
            return False
        if not busy:
            indexes.close_writers()
        return busy or bool(missing)

    # VectorStores

    def create_vector_store(
        self,
        name: str,
        model: str,
        dimensions: int,
        metadata: Mapping[str, str] | None = None,
        expires_anchor: str = "",
        expires_days: int = 0,
        max_input_tokens: int = 0,
        caller: Access = EVERYTHING,
        description: str = "",
    ) -> VectorStore:
        return vector_stores.create(
            self._conn(),
            name=name,
            model=model,
            dimensions=dimensions,
            metadata=metadata or {},
            now=self._now(),
            expires_anchor=expires_anchor,
            expires_days=expires_days,
            max_input_tokens=max_input_tokens,
            caller=caller,
            description=description,
        )

    def update_vector_store(
        self,
        vector_store_id: str,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        expires: tuple[str, int] | None = None,
        description: str | None = None,
    ) -> VectorStore:
        """Changes the fields given; `expires` is (anchor, days), ("", 0) for never."""
        return vector_stores.update(
            self._conn(),
            vector_store_id,
            name=name,
            metadata=metadata,
            expires=expires,
            description=description,
        )

    def get_vector_store(self, vector_store_id: str) -> VectorStore:
        with atomic(self._conn(), write=False):
            found = reindex.lookup(self._conn(), vector_store_id)
        if self.postgres is None and vector_index.in_memory(
            self._sqlite("resident vectors"), found.id, self.index.resident
        ):
            return replace(found, in_memory=True)
        return found

    # Re-indexing (reindex.py)

    def start_reindex(
        self,
        vector_store_id: str,
        model: EmbeddingModel,
        chunking: Chunking | None = None,
        max_chunk_tokens: int = 0,
    ) -> VectorStore:
        return reindex.start(
            self._conn(),
            vector_store_id=vector_store_id,
            model=model.name,
            dimensions=model.dimensions,
            chunking=chunking,
            max_chunk_tokens=max_chunk_tokens,
            now=self._now(),
        )

    def cancel_reindex(self, vector_store_id: str) -> VectorStore:
        return reindex.cancel(self._conn(), vector_store_id=vector_store_id, now=self._now())

    def list_vector_stores(
        self,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
        name: str | None = None,
        caller: Access = EVERYTHING,
    ) -> Page[VectorStore]:
        return vector_stores.list_page(
            self._conn(),
            limit=limit,
            order=order,
            after=after,
            before=before,
            name=name,
            caller=caller,
        )

    def delete_vector_store(self, vector_store_id: str) -> None:
        vector_stores.delete(self._conn(), vector_store_id)

    def add_chunks(
        self,
        vector_store_id: str,
        file_id: str,
        filename: str,
        attributes: Mapping[str, AttributeValue],
        chunks: Sequence[ChunkInput],
        vectors: npt.ArrayLike,
        model: str,
    ) -> AddChunksResult:
        return ingest.add_chunks(
            self._conn(),
            vector_store_id=vector_store_id,
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
        vector_store_id: str,
        query: npt.ArrayLike | bytes | None,
        k: int,
        score_threshold: float = 0.0,
        model: str = "",
        filter: Filter | None = None,
        mode: str = VECTOR,
        query_text: str = "",
        exact: bool = False,
        vector_weight: float | None = None,
    ) -> list[SearchHit]:
        """See search.run: `mode` vector (or empty), lexical or hybrid."""
        return search.run(
            self._conn(),
            vector_store_id=vector_store_id,
            mode=mode,
            query=query if query is None or isinstance(query, bytes) else np.asarray(query),
            text=query_text,
            k=k,
            score_threshold=score_threshold,
            model=model,
            filter=filter,
            now=self._now(),
            index=self.index,
            exact=exact,
            vector_weight=vector_weight,
        )

    # Files

    def create_file(
        self,
        filename: str,
        purpose: str,
        content: bytes,
        caller: Access = EVERYTHING,
        expires_after_seconds: int = 0,
    ) -> File:
        return files.create(
            self._conn(),
            filename=filename,
            purpose=purpose,
            content=content,
            now=self._now(),
            caller=caller,
            expires_after_seconds=expires_after_seconds,
        )

    def get_file(self, file_id: str) -> File:
        return files.get(self._conn(), file_id)

    def get_file_content(self, file_id: str) -> tuple[File, bytes]:
        return files.content(self._conn(), file_id)

    def list_files(
        self,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        purpose: str | None = None,
        caller: Access = EVERYTHING,
    ) -> Page[File]:
        return files.list_page(
            self._conn(), limit=limit, order=order, after=after, purpose=purpose, caller=caller
        )

    def delete_file(self, file_id: str) -> None:
        """Deletes the file and removes it from every vector store."""
        files.delete(self._conn(), file_id, self._now())

    # Files in vector stores

    def attach_file(
        self,
        vector_store_id: str,
        file_id: str = "",
        attributes: Mapping[str, AttributeValue] | None = None,
        chunking: Chunking | None = None,
        model: EmbeddingModel | None = None,
        upload: NewFile | None = None,
        key_name: str = "",
    ) -> VectorStoreFile:
        """Attaches `file_id`, or stores and attaches `upload` (attachments.attach)."""
        return attachments.attach(
            self._conn(),
            vector_store_id=vector_store_id,
            file_id=file_id,
            upload=upload,
            attributes=attributes or {},
            chunking=chunking,
            now=self._now(),
            model=model,
            key_name=key_name,
        )

    def get_vector_store_file(self, vector_store_id: str, file_id: str) -> VectorStoreFile:
        return attachments.get(self._conn(), vector_store_id, file_id)

    def list_vector_store_files(
        self,
        vector_store_id: str,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
        status: str | None = None,
        batch_id: str | None = None,
    ) -> Page[VectorStoreFile]:
        return attachments.list_page(
            self._conn(),
            vector_store_id=vector_store_id,
            limit=limit,
            order=order,
            after=after,
            before=before,
            status=status,
            batch_id=batch_id,
        )

    def update_vector_store_file(
        self, vector_store_id: str, file_id: str, attributes: Mapping[str, AttributeValue]
    ) -> VectorStoreFile:
        return attachments.update_attributes(
            self._conn(), vector_store_id=vector_store_id, file_id=file_id, attributes=attributes
        )

    def detach_file(self, vector_store_id: str, file_id: str) -> None:
        attachments.detach(
            self._conn(), vector_store_id=vector_store_id, file_id=file_id, now=self._now()
        )

    def get_vector_store_file_chunks(
        self, vector_store_id: str, file_id: str
    ) -> tuple[VectorStoreFile, list[StoredChunk]]:
        return attachments.chunks(self._conn(), vector_store_id=vector_store_id, file_id=file_id)

    # Batches

    def create_file_batch(
        self,
        vector_store_id: str,
        batch_files: Sequence[BatchFileInput],
        model: EmbeddingModel | None = None,
        key_name: str = "",
    ) -> FileBatch:
        return batches.create(
            self._conn(),
            vector_store_id=vector_store_id,
            files=batch_files,
            now=self._now(),
            model=model,
            key_name=key_name,
        )

    def get_file_batch(self, vector_store_id: str, batch_id: str) -> FileBatch:
        return batches.get(self._conn(), vector_store_id=vector_store_id, batch_id=batch_id)

    def cancel_file_batch(self, vector_store_id: str, batch_id: str) -> FileBatch:
        return batches.cancel(
            self._conn(), vector_store_id=vector_store_id, batch_id=batch_id, now=self._now()
        )

    # Ingest jobs

    def claim_jobs(
        self,
        worker_id: str,
        max_jobs: int,
        lease_seconds: int,
        models: Sequence[EmbeddingModel] = (),
        waiting: Sequence[str] = (),
        lexical: bool = False,
    ) -> list[ClaimedJob]:
        return jobs.claim(
            self._conn(),
            worker_id=worker_id,
            max_jobs=max_jobs,
            lease_seconds=lease_seconds,
            now=self._now(),
            models=models,
            waiting=waiting,
            lexical=lexical,
            vectors=self.vectors,
            max_attempts=self._max_attempts,
        )

    def renew_job(self, job_id: int, worker_id: str, lease_seconds: int) -> int:
        """Extends the lease; returns its new expiry (unix seconds)."""
        return jobs.renew(
            self._conn(),
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
        vectors: npt.ArrayLike | None,
        model: str,
        window_counts: Sequence[int] = (),
    ) -> VectorStoreFile:
        """`vectors` None: a lexical pass; `window_counts`: a long chunk's windows
        (jobs.complete)."""
        return jobs.complete(
            self._conn(),
            job_id=job_id,
            worker_id=worker_id,
            chunks=chunks,
            vectors=None if vectors is None else np.asarray(vectors, dtype=np.float32),
            model=model,
            now=self._now(),
            window_counts=window_counts,
        )

    def fail_job(
        self,
        job_id: int,
        worker_id: str,
        code: str,
        message: str,
        retry_after_seconds: int = 0,
        keep_attempt: bool = False,
    ) -> VectorStoreFile:
        return jobs.fail(
            self._conn(),
            job_id=job_id,
            worker_id=worker_id,
            code=code,
            message=message,
            retry_after_seconds=retry_after_seconds,
            now=self._now(),
            max_attempts=self._max_attempts,
            keep_attempt=keep_attempt,
        )

    # Embedding cache

    def get_cached_embeddings(
        self, model_key: str, dimensions: int, hashes: Sequence[bytes]
    ) -> list[bytes | None]:
        if self._settings.cache_max_entries <= 0:
            found: list[bytes | None] = [None] * len(hashes)
        else:
            found = cache.get(
                self._conn(),
                model_key=model_key,
                dimensions=dimensions,
                hashes=hashes,
                now=self._now(),
            )
        hits = sum(1 for vector in found if vector is not None)
        self._cache_counters.add(hits=hits, misses=len(found) - hits)
        return found

    def put_cached_embeddings(
        self, model_key: str, dimensions: int, hashes: Sequence[bytes], vectors: bytes
    ) -> tuple[int, int]:
        """Returns (entries stored, entries evicted)."""
        stored, evicted = cache.put(
            self._conn(),
            model_key=model_key,
            dimensions=dimensions,
            hashes=hashes,
            vectors=vectors,
            now=self._now(),
            max_entries=self._settings.cache_max_entries,
        )
        self._cache_counters.add(stored=stored, evicted=evicted)
        return stored, evicted

    # Audit log

    def record_audit(self, entries: Sequence[AuditEntry]) -> int:
        conn = self._conn()
        recorded = audit.record(conn, entries)
        now = self._clock()
        if now >= self._next_prune:
            pruned = audit.prune(conn, now=now, retention_days=self._settings.audit_retention_days)
            # A full batch means more are due: prune again on the next write.
            if pruned < audit.PRUNE_BATCH:
                self._next_prune = now + audit.PRUNE_INTERVAL_SECONDS
        return recorded

    @property
    def retention(self) -> RetentionSettings:
        return self._settings.retention

    def sweep_expired(self) -> Swept:
        """Deletes a batch of chat history past its time to live (retention.py); the server
        calls it from a background loop."""
        return retention.sweep(self._conn(), self._settings.retention, now=self._clock())

    # API keys (services/store/keys.py)

    def create_api_key(
        self,
        name: str,
        scope: str,
        vector_stores: Sequence[str] = (),
        requests_per_minute: int = 0,
        tokens_per_day: int = 0,
        project: str = "",
        project_conversations: bool = False,
    ) -> tuple[ApiKey, str]:
        """The new key's record and its secret, which is not kept anywhere; `project`: its id
        or name (default: the default project)."""
        return keys.create(
            self._conn(),
            name=name,
            scope=scope,
            vector_stores=vector_stores,
            requests_per_minute=requests_per_minute,
            tokens_per_day=tokens_per_day,
            now=self._clock(),
            project=project or DEFAULT_PROJECT,
            project_conversations=project_conversations,
        )

    def authenticate_api_key(self, secret: str) -> ApiKey | None:
        return keys.authenticate(self._conn(), secret, self._clock())

    def list_api_keys(self, revoked: bool = False) -> list[ApiKey]:
        return keys.list_keys(self._conn(), self._clock(), revoked=revoked)

    def key_state(self) -> KeyState:
        return keys.state(self._conn())

    # Projects and who reaches what (projects.py, access.py)

    def create_project(self, name: str) -> Project:
        return projects.create(self._conn(), name, self._now())

    def list_projects(self) -> list[Project]:
        return projects.list_all(self._conn())

    def authorize(self, caller: Access, references: Sequence[tuple[str, str]]) -> None:
        """Raises the not-found error of the first (kind, public id) the caller does not
        reach, as for an id that does not exist."""
        if caller.everything or not references:
            return
        with atomic(self._conn(), write=False):
            for kind, public_id in references:
                access.check(self._conn(), caller, kind, public_id)

    def revoke_api_key(self, name: str) -> ApiKey:
        with self._revoking:
            return keys.revoke(self._conn(), name, self._clock())

    def record_key_usage(self, usages: Sequence[KeyUsage]) -> None:
        keys.record_usage(self._conn(), usages, self._clock())

    def list_audit(
        self,
        limit: int,
        operation: str | None = None,
        vector_store_id: str | None = None,
        before_id: int | None = None,
        key_name: str | None = None,
    ) -> Page[AuditEntry]:
        return audit.list_page(
            self._conn(),
            limit=limit,
            operation=operation,
            vector_store_id=vector_store_id,
            before_id=before_id,
            key_name=key_name,
        )

    # The whole database

    def stats(self) -> Stats:
        return Stats(
            database=(
                maintenance.stats(self._sqlite("stats"), path=self.path)
                if self.postgres is None
                else operations.stats(self._conn())
            ),
            cache_counters=self._cache_counters.snapshot(),
            cache_max_entries=self._settings.cache_max_entries,
            status=self.status(),
        )

    def status(self, served: Sequence[EmbeddingModel] = ()) -> StoreStatus:
        """`served`: the caller's models, which each model in use is judged against."""
        self.disk.check_recovered()
        usage = self.disk.usage()
        return StoreStatus(
            schema_version=(
                migrations.schema_version(self._sqlite("status"))
                if self.postgres is None
                else postgres_schema.schema_version(self._conn())
            ),
            disk_free_bytes=usage.free_bytes,
            disk_total_bytes=usage.total_bytes,
            storage_full=self.disk.full,
            models=vector_stores.models_in_use(self._conn(), served),
            vector_index_error="" if self.vectors else vectors_error(),
            versions=process_versions()
            | (
                library_versions(self._sqlite("status"))
                if self.postgres is None
                else operations.versions(self._conn())
            ),
        )

    @contextmanager
    def _exclusive(self, what: str) -> Iterator[None]:
        if not self._maintenance.acquire(blocking=False):
            raise MaintenanceRunning(
                f"cannot start a {what}: a backup or vacuum is already running; retry when it ends"
            )
        try:
            yield
        finally:
            self._maintenance.release()

    def backup(self, name: str = "") -> BackupResult:
        """Writes a consistent copy to `name` inside the backup directory (default: timed,
        and then counted against backup_keep)."""
        conn = self._sqlite("a backup")
        if name:
            maintenance.check_name_is_free(name)
            target = maintenance.resolve_backup_path(self.backup_dir, name)
        with self._exclusive("backup"):
            if not name:
                target = maintenance.new_own_path(self.backup_dir, maintenance.BACKUPS, time.time())
            maintenance.make_directories(self.backup_dir, target.parent)
            maintenance.check_room(conn, target.parent, self._settings.backup_reserve_bytes)
            result = maintenance.backup(conn, target=target)
            maintenance.prune_backups(
                self.backup_dir, maintenance.BACKUPS, self._settings.backup_keep
            )
        return result

    def restore(self, name: str) -> RestoreResult:
        """Replaces the database's content with the backup `name`, keeping a copy of what it
        replaces as replaced/replaced-<UTC time>.db in the backup directory.

        The backup is checked first (quick_check, and its schema against the one the
        migrations make at its version), then copied aside and migrated forward there, and
        keys revoked in the live database are revoked in that copy too (a restore must not
        bring a revoked key back); only then is it copied over the database in one step."""
        self._sqlite("a restore")
        source = maintenance.existing_backup(self.backup_dir, name)
        started = time.monotonic()
        size = source.stat().st_size
        restored_version = maintenance.check_backup(source, len(migrations.MIGRATIONS))
        with self._exclusive("restore"):
            conn = self._sqlite("a restore")
            replaced_dir = maintenance.own_directory(self.backup_dir, maintenance.REPLACED)
            maintenance.make_directories(self.backup_dir, replaced_dir)
            # Room for the copy of the live database and for the working copy of the backup.
            maintenance.check_room(conn, replaced_dir, self._settings.backup_reserve_bytes + size)
            page_size = int(conn.execute("PRAGMA page_size").get)
            with maintenance.staged(source, self.backup_dir, page_size) as staged:
                migrations.migrate(staged)
                replaced = maintenance.new_own_path(
                    self.backup_dir, maintenance.REPLACED, time.time()
                )
                maintenance.backup(conn, target=replaced)
                with self._revoking:
                    keys.carry_revocations(conn, staged)
                    maintenance.restore(conn, source=staged)
            found = resident.existing(database_key(conn))
            if found is not None:
                found.forget()
            fulltext.for_database(conn).forget()
            self._builds = {}
            version = self.migrate()
            maintenance.prune_backups(
                self.backup_dir, maintenance.REPLACED, self._settings.backup_keep
            )
        return RestoreResult(
            path=source,
            replaced=replaced,
            restored_schema_version=restored_version,
            schema_version=version,
            bytes=size,
            seconds=time.monotonic() - started,
        )

    def restore_from_replica(self, timestamp: str = "") -> RestoreResult:
        """Restores the replica's latest state (or the one at `timestamp`) as restore() does a
        backup: Litestream writes it to replica/replica-<UTC time>.db in the backup directory,
        which is then checked and copied over the database, keeping the replaced one."""
        settings = self._settings.replica
        if settings is None:
            raise ReplicaUnavailable(
                "no replica is configured: set RAGD_REPLICA_URL on the store (and run "
                "Litestream beside it) to restore from one"
            )
        if timestamp and not replica.valid_timestamp(timestamp):
            raise InvalidArgument(
                f"the timestamp must be an RFC 3339 time such as 2026-01-31T12:00:00Z, "
                f"got {timestamp[:80]!r}"
            )
        with self._exclusive("restore"):
            target = maintenance.new_own_path(self.backup_dir, maintenance.REPLICA, time.time())
            maintenance.make_directories(self.backup_dir, target.parent)
            if not replica.fetch(settings, target, timestamp):
                raise ReplicaUnavailable(
                    f"the replica {settings.url} holds no database"
                    + (f" at {timestamp}" if timestamp else "")
                )
            maintenance.prune_backups(
                self.backup_dir, maintenance.REPLICA, self._settings.backup_keep
            )
        return self.restore(str(target.relative_to(self.backup_dir.resolve())))

    @property
    def replica(self) -> ReplicaSettings | None:
        """The replica Litestream keeps (None: replication is off)."""
        return self._settings.replica

    def replica_status(self) -> ReplicaStatus | None:
        """Where the replica stands (None: no replication configured)."""
        settings = self._settings.replica
        return None if settings is None else replica.status(self.path, settings)

    def list_backups(self) -> list[BackupInfo]:
        return maintenance.list_backups(self.backup_dir)

    def backup_file(self, name: str) -> Path:
        """The backup `name` names, for reading (BackupNotFound if absent)."""
        return maintenance.existing_backup(self.backup_dir, name)

    def vacuum(self) -> VacuumResult:
        conn = self._sqlite("a vacuum")
        with self._exclusive("vacuum"):
            return vacuum.vacuum(
                conn,
                path=self.path,
                checkpoint=self._sqlite_connections.checkpoints,
            )

    # Conversations and responses

    def create_conversation(
        self,
        metadata: Mapping[str, str] | None = None,
        title: str = "",
        items: Sequence[NewItem] = (),
        caller: Access = EVERYTHING,
    ) -> tuple[Conversation, list[Item]]:
        return conversations.create(
            self._conn(),
            metadata=metadata or {},
            title=title,
            items=items,
            now=self._now(),
            caller=caller,
        )

    def get_conversation(self, conversation_id: str) -> Conversation:
        return conversations.get(self._conn(), conversation_id)

    def update_conversation(
        self,
        conversation_id: str,
        metadata: Mapping[str, str] | None = None,
        title: str | None = None,
    ) -> Conversation:
        return conversations.update(self._conn(), conversation_id, metadata=metadata, title=title)

    def delete_conversation(self, conversation_id: str) -> None:
        conversations.delete(self._conn(), conversation_id)

    def list_conversations(
        self,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
        caller: Access = EVERYTHING,
    ) -> Page[Conversation]:
        return conversations.list_page(
            self._conn(), limit=limit, order=order, after=after, before=before, caller=caller
        )

    def add_items(self, conversation_id: str, items: Sequence[NewItem]) -> list[Item]:
        return conversations.add_items(self._conn(), conversation_id, items, now=self._now())

    def list_items(
        self,
        conversation_id: str,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
        before: str | None = None,
    ) -> Page[Item]:
        return conversations.list_items(
            self._conn(), conversation_id, limit=limit, order=order, after=after, before=before
        )

    def get_item(self, conversation_id: str, item_id: str) -> Item:
        return conversations.get_item(self._conn(), conversation_id, item_id)

    def delete_item(self, conversation_id: str, item_id: str) -> Conversation:
        return conversations.delete_item(self._conn(), conversation_id, item_id)

    def search_history(
        self,
        text: str,
        k: int,
        conversation_id: str = "",
        mode: str = LEXICAL,
        vector: bytes = b"",
        model: str = "",
        caller: Access = EVERYTHING,
    ) -> list[ItemHit]:
        return item_search.search(
            self._conn(),
            text=text,
            k=k,
            conversation_id=conversation_id,
            mode=mode,
            vector=vector,
            model=model,
            caller=caller,
        )

    def pending_item_texts(self, model: str, after: int, limit: int) -> list[PendingText]:
        return item_search.pending(self._conn(), model, after, limit)

    def put_item_vectors(
        self, model: str, dimensions: int, keys: Sequence[int], data: bytes
    ) -> int:
        return item_search.put_vectors(self._conn(), model, dimensions, keys, data)

    def record_response(self, response: NewResponse, caller: Access = EVERYTHING) -> ResponseRecord:
        return responses.record(self._conn(), response, now=self._now(), caller=caller)

    def get_response(self, response_id: str) -> ResponseRecord:
        return responses.get(self._conn(), response_id, now=self._clock())

    def start_response(
        self, response: NewResponse, lease: float, caller: Access = EVERYTHING
    ) -> ResponseRecord:
        return responses.start(
            self._conn(), response, lease=lease, now=self._clock(), caller=caller
        )

    def renew_response(self, response_id: str, status: str, lease: float) -> ResponseRecord:
        return responses.renew(
            self._conn(), response_id, status=status, lease=lease, now=self._clock()
        )

    def cancel_response(self, response_id: str) -> ResponseRecord:
        return responses.cancel(self._conn(), response_id, now=self._clock())

    def expire_responses(self) -> int:
        """Background responses whose gateway stopped (their lease ran out), ended as failed."""
        return responses.expire(self._conn(), now=self._clock())

    def delete_response(self, response_id: str) -> None:
        responses.delete(self._conn(), response_id)

    def list_response_input_items(
        self,
        response_id: str,
        limit: int = DEFAULT_LIST_LIMIT,
        order: str = "desc",
        after: str | None = None,
    ) -> Page[Item]:
        return responses.input_items(
            self._conn(), response_id, limit=limit, order=order, after=after
        )

    def history(
        self,
        conversation_id: str = "",
        previous_response_id: str = "",
        limit: int = responses.MAX_HISTORY,
    ) -> list[Item]:
        return responses.history(
            self._conn(),
            conversation_id=conversation_id,
            previous_response_id=previous_response_id,
            limit=limit,
        )
