"""The store's Prometheus figures: what it holds (vector stores, files, chunks, bytes), its
ingest queue and its embedding cache. Read from the same snapshot as /admin/stats, refreshed in
the background (RAGD_METRICS_REFRESH_SECONDS), so a scrape never touches the database."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.store.records import Stats
from services.store.replica import ReplicaStatus


class StoreCollector(Collector):
    def __init__(self) -> None:
        self.latest: Stats | None = None
        # Where the Litestream replica stands (None: replication is off).
        self.replica: ReplicaStatus | None = None
        # PostgreSQL connections open and the most opened (None: SQLite).
        self.connections: tuple[int, int] | None = None

    def collect(self) -> Iterator[Metric]:
        yield from self._replica()
        if self.connections is not None:
            opened, most = self.connections
            yield _gauge(
                "ragd_store_db_connections", "PostgreSQL connections this store has open.", opened
            )
            yield _gauge(
                "ragd_store_db_connections_max",
                "The most PostgreSQL connections this store opens (RAGD_DATABASE_POOL_MAX); "
                "calls beyond them answer 503.",
                most,
            )
        stats = self.latest
        if stats is None:
            return
        db = stats.database
        yield _gauge("ragd_store_vector_stores", "Vector stores.", len(db.vector_stores))
        yield _gauge("ragd_store_files", "Files uploaded.", db.files)
        yield _gauge("ragd_store_chunks", "Chunks in every vector store.", db.chunks)
        yield _gauge("ragd_store_vectors", "Vectors in every vector store.", db.vectors)
        yield _gauge("ragd_store_db_bytes", "Size of the database file.", db.db_bytes)
        yield _gauge("ragd_store_wal_bytes", "Size of the write-ahead log.", db.wal_bytes)
        yield _gauge(
            "ragd_store_disk_free_bytes",
            "Free space on the database's file system.",
            stats.status.disk_free_bytes,
        )
        yield _gauge(
            "ragd_store_storage_full",
            "1 while writes are refused for lack of space.",
            int(stats.status.storage_full),
        )
        jobs = GaugeMetricFamily(
            "ragd_ingest_jobs", "Ingest jobs not finished, by state.", labels=["state"]
        )
        jobs.add_metric(["pending"], db.jobs_pending)
        jobs.add_metric(["leased"], db.jobs_leased)
        yield jobs
        yield _gauge("ragd_cache_entries", "Embeddings in the cache.", db.cache.entries)
        counters = stats.cache_counters
        for name, value, what in (
            ("ragd_cache_hits", counters.hits, "Embedding cache lookups that hit."),
            ("ragd_cache_misses", counters.misses, "Embedding cache lookups that missed."),
        ):
            yield CounterMetricFamily(name, what + " Since the store started.", value=value)

    def _replica(self) -> Iterator[Metric]:
        found = self.replica
        if found is None:
            return
        # No lag is shown when the store cannot tell it (Litestream down, replica unreachable):
        # alert on the lag, and on this being 1.
        unknown = found.state == "unknown" or found.lag_seconds < 0
        yield _gauge(
            "ragd_store_replica_unknown",
            "1 while the store cannot tell where the Litestream replica stands.",
            int(unknown),
        )
        if not unknown:
            yield _gauge(
                "ragd_store_replica_lag_seconds",
                "Age of the oldest change the Litestream replica does not hold yet (0: current).",
                found.lag_seconds,
            )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def watch() -> StoreCollector:
    """Registers the store's collector (once per process: the metrics port is one)."""
    collector = StoreCollector()
    REGISTRY.register(collector)
    return collector
