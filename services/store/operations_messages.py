"""Conversions between the operations RPCs' messages and domain values (no gRPC here)."""

from __future__ import annotations

from services.pb import store_pb2 as pb
from services.store.audit import AuditEntry
from services.store.operations import Stats


def audit_entry_from_message(message: pb.AuditEntry) -> AuditEntry:
    return AuditEntry(
        at=message.at,
        operation=message.operation,
        collection_id=message.collection_id,
        k=message.k,
        latency_ms=message.latency_ms,
        result_count=message.result_count,
        degraded=message.degraded,
        detail=message.detail,
    )


def audit_entry_message(entry: AuditEntry) -> pb.AuditEntry:
    return pb.AuditEntry(
        id=entry.id,
        at=entry.at,
        operation=entry.operation,
        collection_id=entry.collection_id,
        k=entry.k,
        latency_ms=entry.latency_ms,
        result_count=entry.result_count,
        degraded=entry.degraded,
        detail=entry.detail,
    )


def stats_message(stats: Stats) -> pb.StoreStats:
    database, counters = stats.database, stats.cache_counters
    return pb.StoreStats(
        schema_version=database.schema_version,
        db_bytes=database.db_bytes,
        wal_bytes=database.wal_bytes,
        free_bytes=database.free_bytes,
        collections=len(database.collections),
        files=database.files,
        file_bytes=database.file_bytes,
        chunks=database.chunks,
        vectors=database.vectors,
        usage_bytes=database.usage_bytes,
        jobs_pending=database.jobs_pending,
        jobs_leased=database.jobs_leased,
        cache=pb.CacheStats(
            entries=database.cache.entries,
            bytes=database.cache.bytes,
            max_entries=stats.cache_max_entries,
            hits=counters.hits,
            misses=counters.misses,
            hit_rate=stats.cache_hit_rate,
            stored=counters.stored,
            evicted=counters.evicted,
        ),
        audit_entries=database.audit_entries,
        per_collection=[
            pb.CollectionStats(
                id=item.id,
                name=item.name,
                model=item.model,
                dimensions=item.dimensions,
                files=item.files,
                chunks=item.chunks,
                vectors=item.vectors,
                vector_slots=item.vector_slots,
                usage_bytes=item.usage_bytes,
            )
            for item in database.collections
        ],
    )
