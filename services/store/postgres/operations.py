"""Operations on PostgreSQL: the store's figures and the server's versions. Backups,
restores and vacuums are the operator's PostgreSQL tooling's (Repository._sqlite says so).
"""

from __future__ import annotations

import psycopg

from services.store import audit, cache
from services.store.db import atomic
from services.store.postgres import schema
from services.store.records import DatabaseStats, VectorStoreStats
from services.store.sql import Connection


def _scalar(conn: Connection, sql: str) -> int:
    return int(conn.execute(sql).get or 0)


def stats(conn: Connection) -> DatabaseStats:
    """Global and per vector store figures from one snapshot; db_bytes is the whole
    database's size as the server counts it (tables, indexes, TOAST), wal_bytes and
    free_bytes are the server's business (0)."""
    with atomic(conn, write=False):
        rows = conn.execute(
            "SELECT public_id, name, model, dimensions, file_count, chunk_count, usage_bytes"
            " FROM vector_stores ORDER BY id"
        ).fetchall()
        vector_stores = [
            VectorStoreStats(
                id=public_id,
                name=name,
                model=model,
                dimensions=dims,
                files=files,
                chunks=chunks,
                vectors=chunks,
                vector_slots=chunks,
                usage_bytes=usage,
            )
            for public_id, name, model, dims, files, chunks, usage in rows
        ]
        return DatabaseStats(
            schema_version=schema.schema_version(conn),
            db_bytes=_scalar(conn, "SELECT pg_database_size(current_database())"),
            wal_bytes=0,
            free_bytes=0,
            vector_stores=vector_stores,
            files=_scalar(conn, "SELECT count(*) FROM files"),
            file_bytes=_scalar(conn, "SELECT sum(bytes) FROM files"),
            chunks=sum(c.chunks for c in vector_stores),
            vectors=sum(c.vectors for c in vector_stores),
            usage_bytes=sum(c.usage_bytes for c in vector_stores),
            jobs_pending=_scalar(conn, "SELECT count(*) FROM jobs WHERE state = 'pending'"),
            jobs_leased=_scalar(conn, "SELECT count(*) FROM jobs WHERE state = 'leased'"),
            cache=cache.size(conn),
            audit_entries=audit.count(conn),
        )


def versions(conn: Connection) -> dict[str, str]:
    """The engine and the server's version, pgvector's when installed, and the driver's."""
    found = {
        "engine": "postgres",
        "postgresql": str(conn.execute("SHOW server_version").get).split()[0],
        "psycopg": psycopg.__version__,
    }
    pgvector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").get
    if pgvector:
        found["pgvector"] = str(pgvector)
    return found
