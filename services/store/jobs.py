"""The durable ingest queue: jobs leased to workers, completed or failed under their lease.

A job is created with its file's attachment (one transaction) and is the only way a file's
chunks get written besides AddChunks. Workers claim jobs under a lease they renew while
working; a worker that dies stops renewing and the job is reclaimed once the lease expires.
Completing or failing needs the lease: a worker whose job was reclaimed, retried, finished,
cancelled or detached meanwhile writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.vectors import FloatMatrix
from services.common.vocabulary import FILE_ERROR_CODES
from services.store import ingest, shadow, vector_store_files, vector_stores
from services.store.compat import check_indexing, check_served
from services.store.db import atomic
from services.store.errors import InvalidArgument, JobNotFound, LeaseLost, ModelMismatch
from services.store.records import ChunkInput, ClaimedJob, EmbeddingModel, VectorStoreFile
from services.store.sql import Connection, dialect

# Claims of one job before its file fails (worker crashes count: each reclaim is a claim).
MAX_ATTEMPTS = 5
MAX_CLAIM = 100
MAX_LEASE_SECONDS = 3600
MAX_RETRY_AFTER_SECONDS = 86400
# Contents handed out by one claim beyond the first job (gRPC messages are capped at 64 MiB).
MAX_CLAIM_BYTES = 32 * 1024 * 1024
MAX_ERROR_MESSAGE = 1000

# Jobs a worker may take now: due pending ones, and leases that expired (their worker died),
# of files still in progress; oldest first. Workers poll this often, mostly finding nothing:
# it reads only the live jobs (the partial index) and looks their files up, never scanning
# finished jobs or every file of every vector store.
_CLAIMABLE_SQL = """
SELECT j.id, j.vector_store_id, j.file_id, j.attempts, j.state, f.bytes, c.model, c.dimensions,
       cf.status, c.shadow_of IS NOT NULL
FROM {live_jobs}
{join} vector_store_files AS cf
    ON cf.vector_store_id = j.vector_store_id AND cf.file_id = j.file_id
JOIN files AS f ON f.id = j.file_id
JOIN vector_stores AS c ON c.id = j.vector_store_id
WHERE j.state <> 'done' AND (cf.status = 'in_progress' OR cf.vectors_pending = 1)
  AND ((j.state = 'pending' AND j.next_attempt_at <= ?)
       OR (j.state = 'leased' AND j.lease_expires_at <= ?))
  AND {waiting}
ORDER BY j.id
LIMIT ?
{lock}
"""

# Jobs of models that cannot embed now: only those whose file a lexical pass would make
# searchable (not yet indexed at all, and not a re-index's hidden vector store, which nobody
# searches) are worth handing out.
_WAITING_SQL = """({served}
       OR (? AND cf.status = 'in_progress' AND c.shadow_of IS NULL))"""
_NO_VECTORS_SQL = "(? AND cf.status = 'in_progress' AND c.shadow_of IS NULL)"

_CLAIMED_SQL = """
SELECT j.id, c.public_id, j.file_id, f.filename, fc.content, cf.chunking_json,
       c.model, c.dimensions, j.attempts, j.key_name
FROM jobs AS j
JOIN vector_stores AS c ON c.id = j.vector_store_id
JOIN vector_store_files AS cf ON cf.vector_store_id = j.vector_store_id AND cf.file_id = j.file_id
JOIN files AS f ON f.id = j.file_id
LEFT JOIN file_contents AS fc ON fc.file_id = j.file_id
WHERE j.id = ?
"""


@dataclass(frozen=True)
class _HeldJob:
    key: int
    file_id: str
    attempts: int
    # The file is completed lexically: this job fills its vectors in.
    vectors_pending: bool = False


def _check_lease_args(worker_id: str, lease_seconds: int) -> None:
    if not worker_id:
        raise InvalidArgument("worker_id is required")
    if not 1 <= lease_seconds <= MAX_LEASE_SECONDS:
        raise InvalidArgument(f"lease_seconds must be 1..{MAX_LEASE_SECONDS}, got {lease_seconds}")


def _fail_file(
    conn: Connection, job_id: int, key: int, file_id: str, code: str, message: str, now: int
) -> None:
    # A file searchable lexically keeps its chunks and stays completed (vectors_pending):
    # only the filling of its vectors gave up.
    conn.execute(
        "UPDATE vector_store_files"
        " SET status = CASE WHEN vectors_pending = 1 THEN status ELSE 'failed' END,"
        " last_error_code = ?, last_error_message = ? WHERE vector_store_id = ? AND file_id = ?",
        (code, message[:MAX_ERROR_MESSAGE], key, file_id),
    )
    conn.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job_id,))
    shadow.settle(conn, key, now)


def claim(
    conn: Connection,
    *,
    worker_id: str,
    max_jobs: int,
    lease_seconds: int,
    now: int,
    models: Sequence[EmbeddingModel] = (),
    waiting: Sequence[str] = (),
    lexical: bool = False,
    vectors: bool = True,
    max_attempts: int = MAX_ATTEMPTS,
) -> list[ClaimedJob]:
    """Leases up to max_jobs jobs to the worker, with their files' contents.

    One write transaction (taken up front) picks and leases the jobs, so concurrent claimers
    never share one. A job whose lease expired after its last allowed attempt is not handed
    out again: its file fails (the workers keep dying on it). With `models` (what the worker
    embeds with), a job of a vector store indexed with another model fails too, in the words
    of the model rule (compat.check_served), rather than being embedded with the wrong one.
    A job of a `waiting` model (served, but its embedders are down) is left for later, or,
    for a worker that can index `lexical`ly, handed out as a lexical pass if its file is not
    searchable yet. Without `vectors` (this store has no vector index), and for a lexical
    worker without `models` (none of its embedders answers), every job is waiting.
    """
    _check_lease_args(worker_id, lease_seconds)
    if not 1 <= max_jobs <= MAX_CLAIM:
        raise InvalidArgument(f"max_jobs must be 1..{MAX_CLAIM}, got {max_jobs}")
    claimed: list[ClaimedJob] = []
    later = sorted({name.lower() for name in waiting})
    everything_waits = not vectors or (lexical and not models)
    if not everything_waits:
        # (Not `NOT IN ()` for none: PostgreSQL has no empty list.)
        marks = ", ".join("?" * len(later))
        waiting_sql = _WAITING_SQL.format(
            served=f"lower(c.model) NOT IN ({marks})" if later else "TRUE"
        )
        args: tuple[Any, ...] = (*later, lexical)
    else:
        waiting_sql, args = _NO_VECTORS_SQL, (lexical,)
    sql = _CLAIMABLE_SQL.format(
        waiting=waiting_sql,
        live_jobs=dialect(conn).live_jobs,
        join=dialect(conn).join_first,
        lock=dialect(conn).claim_lock,
    )
    with atomic(conn):
        budget = MAX_CLAIM_BYTES
        while len(claimed) < max_jobs:
            rows: list[tuple[Any, ...]] = conn.execute(
                sql, (now, now, *args, max_jobs - len(claimed))
            ).fetchall()
            if not rows:
                break
            for job_id, key, file_id, attempts, state, size, model, dimensions, *rest in rows:
                status, shadow = rest
                if state == "leased" and attempts >= max_attempts:
                    message = (
                        f"indexing was abandoned {attempts} times (its worker stopped "
                        "responding); attach the file again to retry"
                    )
                    _fail_file(conn, job_id, key, file_id, "server_error", message, now)
                    continue
                pass_lexical = everything_waits or model.lower() in later
                if not pass_lexical and models and EmbeddingModel(model, dimensions) not in models:
                    try:
                        check_served(vector_stores.lookup_key(conn, key), models)
                    except ModelMismatch as error:
                        _fail_file(conn, job_id, key, file_id, "server_error", str(error), now)
                        continue
                assert not pass_lexical or (status == "in_progress" and not shadow)
                if claimed and size > budget:
                    return claimed
                budget -= size
                conn.execute(
                    "UPDATE jobs SET state = 'leased', worker_id = ?, lease_expires_at = ?,"
                    " attempts = attempts + 1 WHERE id = ?",
                    (worker_id, now + lease_seconds, job_id),
                )
                row = conn.execute(_CLAIMED_SQL, (job_id,)).fetchone()
                assert row is not None, "a claimable job has its vector_store, file and row"
                claimed.append(
                    ClaimedJob(
                        job_id=row[0],
                        vector_store_id=row[1],
                        file_id=row[2],
                        filename=row[3],
                        content=bytes(row[4] or b""),
                        chunking=vector_store_files.decode_chunking(row[5]),
                        model=row[6],
                        dimensions=row[7],
                        attempt=row[8],
                        lexical=pass_lexical,
                        key_name=row[9],
                    )
                )
    return claimed


def _held(conn: Connection, job_id: int, worker_id: str) -> _HeldJob:
    """The job, if this worker holds its lease (expired but not reclaimed still counts)."""
    row = conn.execute(
        "SELECT j.vector_store_id, j.file_id, j.state, j.worker_id, j.attempts, cf.status,"
        " cf.vectors_pending FROM jobs AS j JOIN vector_store_files AS cf"
        " ON cf.vector_store_id = j.vector_store_id AND cf.file_id = j.file_id WHERE j.id = ?",
        (job_id,),
    ).fetchone()
    if row is None:
        raise JobNotFound(job_id)
    key, file_id, state, holder, attempts, status, pending = row
    if state == "done":
        raise LeaseLost(f"ingest job {job_id} is already finished; drop it")
    if state == "pending":
        raise LeaseLost(
            f"ingest job {job_id} is no longer leased to {worker_id!r}: its lease expired or it "
            "failed, and it waits for another attempt; drop it"
        )
    if holder != worker_id:
        raise LeaseLost(
            f"ingest job {job_id} is leased to another worker ({holder!r}) since the lease of "
            f"{worker_id!r} expired; drop it"
        )
    if status != "in_progress" and not pending:
        raise LeaseLost(f"file {file_id!r} of ingest job {job_id} is {status}; drop the job")
    return _HeldJob(key=key, file_id=file_id, attempts=attempts, vectors_pending=bool(pending))


def renew(conn: Connection, *, job_id: int, worker_id: str, lease_seconds: int, now: int) -> int:
    """Extends the worker's lease; returns when it now expires."""
    _check_lease_args(worker_id, lease_seconds)
    with atomic(conn):
        _held(conn, job_id, worker_id)
        expires = now + lease_seconds
        conn.execute("UPDATE jobs SET lease_expires_at = ? WHERE id = ?", (expires, job_id))
    return expires


def complete(
    conn: Connection,
    *,
    job_id: int,
    worker_id: str,
    chunks: Sequence[ChunkInput],
    vectors: FloatMatrix | None,
    model: str,
    now: int,
    window_counts: Sequence[int] = (),
) -> VectorStoreFile:
    """Writes the file's chunks and vectors and marks it completed, all in one transaction.
    `window_counts`: how many of `vectors` each chunk has (windows.py), one each if empty.

    Without `vectors` (a lexical pass) the chunks are written with their full-text rows only,
    the file becomes completed with vectors_pending, and the job waits to fill them in. A job
    that fills them replaces the lexical chunks with the real ones in the same way.
    """
    if vectors is not None:
        if not model:
            raise InvalidArgument("model is required: name the model that produced the vectors")
        ingest.check_chunks(chunks, vectors, window_counts)
    else:
        ingest.check_token_counts(chunks)
    dimensions = int(vectors.shape[1]) if vectors is not None else 0
    rows = int(vectors.shape[0]) if vectors is not None else 0
    usage = ingest.usage_bytes([chunk.text for chunk in chunks], dimensions, rows)
    with atomic(conn):
        job = _held(conn, job_id, worker_id)
        vector_store = vector_stores.lookup_key(conn, job.key)
        if vectors is None and job.vectors_pending:
            raise LeaseLost(f"file {job.file_id!r} is searchable already; drop ingest job {job_id}")
        if vectors is not None:
            check_indexing(vector_store, model, dimensions)
        before = conn.execute(
            "SELECT chunk_count, usage_bytes FROM vector_store_files"
            " WHERE vector_store_id = ? AND file_id = ?",
            (job.key, job.file_id),
        ).fetchone()
        old_chunks, old_usage = before if job.vectors_pending and before else (0, 0)
        # An in-progress file has no chunks (this guards against an earlier bug's leftovers);
        # a lexically indexed one has its provisional chunks, replaced now.
        ingest.delete_chunks(conn, job.key, job.file_id)
        ingest.insert_chunks(conn, job.key, job.file_id, chunks, vectors, window_counts)
        conn.execute(
            "UPDATE vector_store_files SET status = 'completed', chunk_count = ?, usage_bytes = ?,"
            " vectors_pending = ?, last_error_code = '', last_error_message = ''"
            " WHERE vector_store_id = ? AND file_id = ?",
            (len(chunks), usage, int(vectors is None), job.key, job.file_id),
        )
        conn.execute(
            "UPDATE vector_stores SET chunk_count = chunk_count + ?, usage_bytes = usage_bytes + ?,"
            f" last_active_at = {dialect(conn).greatest}(last_active_at, ?) WHERE id = ?",
            (len(chunks) - old_chunks, usage - old_usage, now, job.key),
        )
        if vectors is None:
            # Offered again at once: a worker whose model answers fills the vectors in.
            conn.execute(
                "UPDATE jobs SET state = 'pending', worker_id = '', lease_expires_at = 0,"
                " next_attempt_at = ?, attempts = 0 WHERE id = ?",
                (now, job_id),
            )
        else:
            conn.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job_id,))
        record = vector_store_files.fetch(conn, job.key, vector_store.id, job.file_id)
        shadow.settle(conn, job.key, now)
        return record


def fail(
    conn: Connection,
    *,
    job_id: int,
    worker_id: str,
    code: str,
    message: str,
    retry_after_seconds: int,
    now: int,
    max_attempts: int = MAX_ATTEMPTS,
    keep_attempt: bool = False,
) -> VectorStoreFile:
    """Records a failed attempt: retried later if transient and attempts remain, else final.

    While a file is retried it stays in_progress without a last_error (OpenAI shows errors only
    on failed files). `keep_attempt` gives the attempt back: the failure was not the file's.
    """
    if not worker_id:
        raise InvalidArgument("worker_id is required")
    if code not in FILE_ERROR_CODES:
        raise InvalidArgument(
            f"error code must be one of {', '.join(FILE_ERROR_CODES)}, got {code!r}"
        )
    if not 0 <= retry_after_seconds <= MAX_RETRY_AFTER_SECONDS:
        raise InvalidArgument(
            f"retry_after_seconds must be 0..{MAX_RETRY_AFTER_SECONDS}, got {retry_after_seconds}"
        )
    with atomic(conn):
        job = _held(conn, job_id, worker_id)
        if retry_after_seconds > 0 and (keep_attempt or job.attempts < max_attempts):
            conn.execute(
                "UPDATE jobs SET state = 'pending', worker_id = '', lease_expires_at = 0,"
                f" next_attempt_at = ?, attempts = {dialect(conn).greatest}(0, attempts - ?)"
                " WHERE id = ?",
                (now + retry_after_seconds, int(keep_attempt), job_id),
            )
        else:
            _fail_file(conn, job_id, job.key, job.file_id, code, message, now)
        vector_store = vector_stores.lookup_key(conn, job.key)
        return vector_store_files.fetch(conn, job.key, vector_store.id, job.file_id)
