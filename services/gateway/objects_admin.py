"""Store messages rendered as the /admin routes' JSON objects: API keys and projects (in
OpenAI's shapes), backups, restores, vacuums, statistics and the audit log. The schemas they
match are in schemas.py; tests/test_renderers.py checks every property is produced."""

from __future__ import annotations

from typing import Any

from services.pb import store_pb2


def api_key(
    key: store_pb2.ApiKey, *, secret: str | None = None, revoked: bool = False
) -> dict[str, Any]:
    """`secret` only in the answer that made the key; `revoked` in the one that revoked it."""
    rendered: dict[str, Any] = {
        "object": "api_key",
        "name": key.name,
        "scope": key.scope,
        "project": key.project,
        "vector_stores": list(key.vector_stores),
        "project_conversations": key.project_conversations,
        "requests_per_minute": key.requests_per_minute or None,
        "tokens_per_day": key.tokens_per_day or None,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at or None,
        "revoked_at": key.revoked_at or None,
        "usage": {
            "requests": key.requests,
            "searches": key.searches,
            "embedded_tokens": key.embedded_tokens,
            "embedded_tokens_today": key.embedded_tokens_today,
            "bytes_stored": key.bytes_stored,
        },
    }
    if secret is not None:
        rendered["key"] = secret
    if revoked:
        rendered["revoked"] = True
    return rendered


def project(item: store_pb2.Project) -> dict[str, Any]:
    # OpenAI's project object (its status is always active here: projects are not archived).
    return {
        "object": "organization.project",
        "id": item.id,
        "name": item.name,
        "created_at": item.created_at,
        "archived_at": None,
        "status": "active",
    }


def unpaged(data: list[dict[str, Any]]) -> dict[str, Any]:
    """A list the admin routes give whole."""
    return {"object": "list", "data": data, "has_more": False}


def backup(reply: store_pb2.BackupResponse) -> dict[str, Any]:
    return {"path": reply.path, "bytes": reply.bytes, "seconds": round(reply.seconds, 3)}


def restore(reply: store_pb2.RestoreResponse) -> dict[str, Any]:
    return {
        "path": reply.path,
        "replaced_path": reply.replaced_path,
        "schema_version": reply.schema_version,
        "restored_schema_version": reply.restored_schema_version,
        "bytes": reply.bytes,
        "seconds": round(reply.seconds, 3),
    }


def backup_file(info: store_pb2.BackupInfo) -> dict[str, Any]:
    return {"path": info.name, "bytes": info.bytes, "modified_at": round(info.modified_at, 3)}


def vacuum(reply: store_pb2.VacuumResponse) -> dict[str, Any]:
    return {
        "bytes_before": reply.bytes_before,
        "bytes_after": reply.bytes_after,
        "seconds": round(reply.seconds, 3),
        "compacted_vector_stores": reply.compacted_vector_stores,
    }


def disk(status: store_pb2.StoreStatus) -> dict[str, Any]:
    """The store's disk, as /ready and /admin/stats show it."""
    return {
        "free_bytes": status.disk_free_bytes,
        "total_bytes": status.disk_total_bytes,
        "full": status.storage_full,
    }


def stats(reply: store_pb2.StoreStats, cache_enabled: bool) -> dict[str, Any]:
    """`cache_enabled`: this gateway's setting (RAGD_EMBED_CACHE); the rest is the store's."""
    cache = reply.cache
    return {
        "object": "ragd.stats",
        "global": {
            "schema_version": reply.schema_version,
            "db_bytes": reply.db_bytes,
            "wal_bytes": reply.wal_bytes,
            "free_bytes": reply.free_bytes,
            "vector_stores": reply.vector_stores,
            "files": reply.files,
            "file_bytes": reply.file_bytes,
            "chunks": reply.chunks,
            "vectors": reply.vectors,
            "usage_bytes": reply.usage_bytes,
            "jobs": {"pending": reply.jobs_pending, "leased": reply.jobs_leased},
            "audit_entries": reply.audit_entries,
            "disk": disk(reply.status),
        },
        "embedding_cache": {
            "enabled": cache_enabled,
            "entries": cache.entries,
            "bytes": cache.bytes,
            "max_entries": cache.max_entries,
            "hits": cache.hits,
            "misses": cache.misses,
            "hit_rate": round(cache.hit_rate, 4),
            "stored": cache.stored,
            "evicted": cache.evicted,
        },
        "vector_stores": [
            {
                "id": item.id,
                "name": item.name,
                "embedding_model": {"name": item.model, "dimensions": item.dimensions},
                "files": item.files,
                "chunks": item.chunks,
                "vectors": item.vectors,
                "vector_slots": item.vector_slots,
                "usage_bytes": item.usage_bytes,
            }
            for item in reply.per_vector_store
        ],
        "replica": replica(reply.replica) if reply.HasField("replica") else None,
    }


def replica(found: store_pb2.ReplicaStatus) -> dict[str, Any]:
    """Litestream's replica against the database; figures it could not read are null."""
    known = found.state != "unknown"
    return {
        "url": found.url,
        "state": found.state,
        "replica_txid": found.replica_txid or None,
        "local_txid": found.local_txid or None,
        "replica_at": round(found.replica_at, 3) or None,
        "lag_seconds": round(found.lag_seconds, 3) if known and found.lag_seconds >= 0 else None,
        "sync_interval_seconds": found.sync_interval,
        "error": found.error or None,
    }


def audit_entry(entry: store_pb2.AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": entry.at,
        "operation": entry.operation,
        "vector_store_id": entry.vector_store_id or None,
        "k": entry.k,
        "latency_ms": round(entry.latency_ms, 3),
        "result_count": entry.result_count,
        "degraded": entry.degraded,
        "detail": entry.detail,
        "key": entry.key_name or None,
        "project": entry.project or None,
        "embedded_tokens": entry.embedded_tokens,
        "error_code": entry.error_code or None,
    }


def audit_page(entries: list[store_pb2.AuditEntry], has_more: bool) -> dict[str, Any]:
    """Newest first; `last_id` is the `before` of the next page."""
    data = [audit_entry(entry) for entry in entries]
    return {
        "object": "list",
        "data": data,
        "has_more": has_more,
        "last_id": data[-1]["id"] if data else None,
    }
