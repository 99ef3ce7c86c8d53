"""The store's operations API: embedding cache, audit log, stats, backup and vacuum.

Reached as `Repository.ops`; thread-safe like the repository (one connection per thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from services.store import audit, cache, maintenance
from services.store.audit import AuditEntry
from services.store.db import ThreadConnections
from services.store.errors import MaintenanceRunning
from services.store.records import Page


@dataclass(frozen=True)
class OperationsSettings:
    # None: `backups/` beside the database.
    backup_dir: Path | None = None
    cache_max_entries: int = cache.DEFAULT_MAX_ENTRIES
    audit_retention_days: int = audit.DEFAULT_RETENTION_DAYS


@dataclass(frozen=True)
class Stats:
    database: maintenance.DatabaseStats
    # Since the store started.
    cache_counters: cache.CacheCounters
    cache_max_entries: int

    @property
    def cache_hit_rate(self) -> float:
        lookups = self.cache_counters.hits + self.cache_counters.misses
        return self.cache_counters.hits / lookups if lookups else 0.0


class Operations:
    def __init__(
        self,
        connections: ThreadConnections,
        clock: Callable[[], float],
        settings: OperationsSettings,
    ) -> None:
        self._connections = connections
        self._clock = clock
        self._settings = settings
        self._counters = cache.Counters()
        self._maintenance = threading.Lock()
        self._next_prune = 0.0

    @property
    def backup_dir(self) -> Path:
        configured = self._settings.backup_dir
        return configured if configured is not None else self._connections.path.parent / "backups"

    # Embedding cache

    def get_cached_embeddings(
        self, model_key: str, dimensions: int, hashes: Sequence[bytes]
    ) -> list[bytes | None]:
        if self._settings.cache_max_entries <= 0:
            found: list[bytes | None] = [None] * len(hashes)
        else:
            found = cache.get(
                self._connections.get(),
                model_key=model_key,
                dimensions=dimensions,
                hashes=hashes,
                now=int(self._clock()),
            )
        hits = sum(1 for vector in found if vector is not None)
        self._counters.add(hits=hits, misses=len(found) - hits)
        return found

    def put_cached_embeddings(
        self, model_key: str, dimensions: int, hashes: Sequence[bytes], vectors: bytes
    ) -> tuple[int, int]:
        """Returns (entries stored, entries evicted)."""
        stored, evicted = cache.put(
            self._connections.get(),
            model_key=model_key,
            dimensions=dimensions,
            hashes=hashes,
            vectors=vectors,
            now=int(self._clock()),
            max_entries=self._settings.cache_max_entries,
        )
        self._counters.add(stored=stored, evicted=evicted)
        return stored, evicted

    # Audit log

    def record_audit(self, entries: Sequence[AuditEntry]) -> int:
        conn = self._connections.get()
        recorded = audit.record(conn, entries)
        now = self._clock()
        if now >= self._next_prune:
            pruned = audit.prune(conn, now=now, retention_days=self._settings.audit_retention_days)
            # A full batch means more are due: prune again on the next write.
            if pruned < audit.PRUNE_BATCH:
                self._next_prune = now + audit.PRUNE_INTERVAL_SECONDS
        return recorded

    def list_audit(
        self,
        limit: int,
        operation: str | None = None,
        collection_id: str | None = None,
        before_id: int | None = None,
    ) -> Page[AuditEntry]:
        return audit.list_page(
            self._connections.get(),
            limit=limit,
            operation=operation,
            collection_id=collection_id,
            before_id=before_id,
        )

    # Whole database

    def stats(self) -> Stats:
        return Stats(
            database=maintenance.stats(self._connections.get(), path=self._connections.path),
            cache_counters=self._counters.snapshot(),
            cache_max_entries=self._settings.cache_max_entries,
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

    def backup(self, name: str = "") -> maintenance.BackupResult:
        """Writes a consistent copy to `name` inside the backup directory (default: timed)."""
        target = maintenance.resolve_backup_path(
            self.backup_dir, name or maintenance.default_backup_name(time.time())
        )
        with self._exclusive("backup"):
            return maintenance.backup(self._connections.get(), target=target)

    def vacuum(self) -> maintenance.VacuumResult:
        with self._exclusive("vacuum"):
            return maintenance.vacuum(self._connections.get(), path=self._connections.path)
