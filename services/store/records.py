"""The store's domain values: plain dataclasses, independent of SQL and gRPC."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

# OpenAI allows string, number and boolean attribute values.
AttributeValue = str | float | bool
Attributes = Mapping[str, AttributeValue]

T = TypeVar("T")


def chunk_public_id(key: int) -> str:
    """A chunk's id in the API, from its integer key."""
    return f"chunk_{key:d}"


@dataclass(frozen=True)
class FileCounts:
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    # Of the completed: files searchable lexically whose vectors are still to be written
    # (indexed while no embedder of the model answered, or without sqlite-vec).
    vectors_pending: int = 0

    @property
    def total(self) -> int:
        return self.in_progress + self.completed + self.failed + self.cancelled


@dataclass(frozen=True)
class VectorStore:
    id: str
    name: str
    created_at: int
    last_active_at: int
    metadata: dict[str, str]
    model: str
    dimensions: int
    # Completed files' chunks and their bytes (text plus vectors).
    chunk_count: int
    # Files attached, whatever their status.
    file_count: int
    usage_bytes: int
    file_counts: FileCounts = field(default_factory=FileCounts)
    # OpenAI's expires_after: anchor "last_active_at" (or "" for never) and days.
    expires_anchor: str = ""
    expires_days: int = 0
    # Unix seconds, 0 when the vector store does not expire.
    expires_at: int = 0
    # How vector searches run: "exact", "building" (a coarse index, searches still exact)
    # or "coarse" (coarse + exact rescoring; see vector_index.py).
    vector_index: str = "exact"
    # The model's context in tokens, as its embedder reported it at creation (0: unknown,
    # vector stores made before schema 8).
    max_input_tokens: int = 0
    # Its vectors are in the store's memory (resident.py); set by get_vector_store only.
    in_memory: bool = False
    # The latest re-index (reindex.py), if any.
    reindex: Reindex | None = None
    # OpenAI's description of the store's purpose ("" when none was given).
    description: str = ""


@dataclass(frozen=True)
class Reindex:
    """A re-index of a vector store to another model or chunking: in_progress until every file
    is indexed anew (then completed: the vector store switched) or it failed or was cancelled
    (the vector store kept its old index)."""

    status: str
    from_model: str
    from_dimensions: int
    model: str
    dimensions: int
    created_at: int
    finished_at: int
    file_counts: FileCounts
    last_error: str = ""


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    has_more: bool


@dataclass(frozen=True)
class ChunkInput:
    text: str
    token_count: int = 0


@dataclass(frozen=True)
class AddChunksResult:
    file_id: str
    chunk_count: int
    usage_bytes: int


@dataclass(frozen=True)
class SearchHit:
    chunk_id: str
    file_id: str
    filename: str
    text: str
    # 1 - cosine_distance / 2, in [0, 1]: see search.score_from_distance.
    score: float
    chunk_index: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    # Hybrid search: the chunk's 1-based rank in the vector and in the lexical candidates
    # (0: that list did not find it); why a chunk ranks where it does.
    vector_rank: int = 0
    lexical_rank: int = 0


@dataclass(frozen=True)
class File:
    id: str
    filename: str
    bytes: int
    created_at: int
    purpose: str
    # Hex SHA-256 of the content; empty for files written by AddChunks, which have none.
    sha256: str
    # Unix seconds when the retention sweep deletes it (OpenAI's expires_after); 0: never.
    expires_at: int = 0


@dataclass(frozen=True)
class LastError:
    # server_error, unsupported_file or invalid_file.
    code: str
    message: str


@dataclass(frozen=True)
class Chunking:
    """A static chunking strategy (OpenAI's "auto" is resolved to sizes by the gateway)."""

    max_tokens: int
    overlap_tokens: int


@dataclass(frozen=True)
class EmbeddingModel:
    name: str
    dimensions: int


@dataclass(frozen=True)
class NewFile:
    """An upload to store and attach in one step."""

    filename: str
    content: bytes
    purpose: str = "assistants"


@dataclass(frozen=True)
class VectorStoreFile:
    file_id: str
    vector_store_id: str
    # in_progress, completed, failed or cancelled.
    status: str
    created_at: int
    filename: str
    attributes: dict[str, AttributeValue]
    # None for files written by AddChunks.
    chunking: Chunking | None
    chunk_count: int
    usage_bytes: int
    # Set only while the status is failed.
    last_error: LastError | None = None
    batch_id: str = ""
    # True when an attach found this file (or one with the same content) already there.
    deduplicated: bool = False
    # Completed and searchable lexically; its vectors are still to be written.
    vectors_pending: bool = False


@dataclass(frozen=True)
class StoredChunk:
    chunk_id: str
    chunk_index: int
    text: str
    token_count: int


@dataclass(frozen=True)
class BatchFileInput:
    file_id: str
    attributes: Attributes = field(default_factory=dict)
    chunking: Chunking | None = None


@dataclass(frozen=True)
class FileBatch:
    id: str
    vector_store_id: str
    created_at: int
    # in_progress, completed or cancelled.
    status: str
    file_counts: FileCounts


@dataclass(frozen=True)
class ClaimedJob:
    job_id: int
    vector_store_id: str
    file_id: str
    filename: str
    content: bytes
    chunking: Chunking | None
    # The vector_store's embedding model and dimension.
    model: str
    dimensions: int
    # 1 for the first claim.
    attempt: int
    # Index the file lexically now (chunks and full-text rows, no vectors): its model's
    # embedders do not answer, or this store has no vector index. The job stays to fill the
    # vectors in later.
    lexical: bool = False
    # The API key the file was attached for ("" for none).
    key_name: str = ""


# Operations: embedding cache, audit log, stats, backup and vacuum.


@dataclass(frozen=True)
class AuditEntry:
    # Unix seconds (fractional) when the call was made.
    at: float
    # One of vocabulary.AUDIT_OPERATIONS.
    operation: str
    # Public vector store id.
    vector_store_id: str = ""
    k: int = 0
    latency_ms: float = 0.0
    result_count: int = 0
    degraded: bool = False
    # e.g. the file id and outcome of an ingest, or the search mode.
    detail: str = ""
    # Assigned by the store; 0 before the entry is recorded.
    id: int = 0
    key_name: str = ""
    embedded_tokens: int = 0
    # OpenAI's error code of a failed request; "" when it succeeded.
    error_code: str = ""
    # The key's project ("" when the API is open or the caller unknown).
    project: str = ""


@dataclass(frozen=True)
class CacheCounters:
    hits: int
    misses: int
    stored: int
    evicted: int


@dataclass(frozen=True)
class CacheSize:
    entries: int
    # Vector bytes (the 32-byte keys and row overhead not included).
    bytes: int
    models: int


@dataclass(frozen=True)
class BackupResult:
    path: Path
    bytes: int
    seconds: float


@dataclass(frozen=True)
class RestoreResult:
    path: Path
    # The copy of the database the restore replaced.
    replaced: Path
    # The backup's schema version, and the database's once migrated forward.
    restored_schema_version: int
    schema_version: int
    bytes: int
    seconds: float


# Ownership (access.py): every vector store, file, conversation, response and key belongs to
# a project; objects made before projects existed, and with an open API, to the default one.
DEFAULT_PROJECT = "proj_default"


@dataclass(frozen=True)
class Project:
    id: str
    name: str
    created_at: int


@dataclass(frozen=True)
class Access:
    """On whose behalf a store call runs, as the gateway vouches for it: the API key's project,
    its name and its limits. The default, no project, reaches everything: the store's own
    callers (ingest workers, the history indexer) and an open API."""

    project: str = ""
    key: str = ""
    # Non-empty: a key limited to these vector stores, which reaches only their files and the
    # files it uploaded, and only the conversations and responses it made ...
    vector_stores: frozenset[str] = frozenset()
    # ... or, with this, its project's.
    project_conversations: bool = False

    @property
    def everything(self) -> bool:
        return not self.project


EVERYTHING = Access()


@dataclass(frozen=True)
class ApiKey:
    name: str
    # "admin", "write" or "read".
    scope: str
    # The vector stores it may reach; empty: all of its project's.
    vector_stores: tuple[str, ...]
    # 0: no limit.
    requests_per_minute: int
    tokens_per_day: int
    created_at: int
    last_used_at: int
    revoked_at: int
    # Since creation, as gateways reported them.
    requests: int
    searches: int
    embedded_tokens: int
    bytes_stored: int
    # Embedded tokens this UTC day.
    embedded_tokens_today: int
    project: str = DEFAULT_PROJECT
    # A key limited to some vector stores reaches its project's conversations and responses,
    # not only those it made.
    project_conversations: bool = False


@dataclass(frozen=True)
class KeyState:
    """Keys made and revoked so far: revoking only ever adds to `revoked`, so a change of
    either number tells a gateway to look its cached keys up again."""

    keys: int
    revoked: int


@dataclass(frozen=True)
class KeyUsage:
    """What one gateway counted for a key since its last report."""

    name: str
    requests: int = 0
    searches: int = 0
    embedded_tokens: int = 0
    bytes_stored: int = 0
    last_used_at: float = 0.0


@dataclass(frozen=True)
class BackupInfo:
    # Relative to the backup directory.
    name: str
    bytes: int
    modified_at: float


@dataclass(frozen=True)
class VacuumResult:
    bytes_before: int
    bytes_after: int
    seconds: float
    # Vector stores whose vec0 table was rebuilt to drop the slots of deleted vectors.
    compacted: int


@dataclass(frozen=True)
class VectorStoreStats:
    id: str
    name: str
    model: str
    dimensions: int
    files: int
    chunks: int
    # Rows in the vector table (equal to chunks in a consistent database).
    vectors: int
    # Vector slots the vec0 table has allocated; above `vectors` after deletions until vacuum.
    vector_slots: int
    usage_bytes: int


@dataclass(frozen=True)
class DatabaseStats:
    schema_version: int
    # The database file, its write-ahead log, and the free pages inside the file.
    db_bytes: int
    wal_bytes: int
    free_bytes: int
    vector_stores: list[VectorStoreStats]
    files: int
    file_bytes: int
    chunks: int
    vectors: int
    usage_bytes: int
    jobs_pending: int
    jobs_leased: int
    cache: CacheSize
    audit_entries: int


@dataclass(frozen=True)
class ModelUse:
    """Vector stores indexed with one model: how many, and the ids of the oldest few."""

    model: str
    dimensions: int
    vector_stores: int
    sample_ids: list[str]
    # One of the models the caller serves fits them (compat.serves).
    served: bool = False


@dataclass(frozen=True)
class StoreStatus:
    schema_version: int
    disk_free_bytes: int
    disk_total_bytes: int
    # A write failed for lack of space and the disk has not had room since.
    storage_full: bool
    models: list[ModelUse] = field(default_factory=list)
    # Why sqlite-vec could not be loaded; "" when it was. Set: the store is lexical-only.
    vector_index_error: str = ""
    # "ragd", "python", "sqlite", "apsw", "sqlite_vec" -> version.
    versions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stats:
    database: DatabaseStats
    # Since the store started.
    cache_counters: CacheCounters
    cache_max_entries: int
    status: StoreStatus

    @property
    def cache_hit_rate(self) -> float:
        lookups = self.cache_counters.hits + self.cache_counters.misses
        return self.cache_counters.hits / lookups if lookups else 0.0


# Conversations and responses (chat history).


@dataclass(frozen=True)
class Conversation:
    id: str
    created_at: int
    last_active_at: int
    metadata: dict[str, str]
    # The first line of the first user message unless one was set.
    title: str
    item_count: int
    # User messages.
    turn_count: int = 0


@dataclass(frozen=True)
class NewItem:
    """An item to record: OpenAI's item fields other than id/type/role/status in `body`."""

    type: str
    body: str = "{}"
    role: str = ""
    status: str = "completed"
    # What full-text search sees (the message's text, a call's queries...).
    text: str = ""
    # The caller's id for it (a response's output item); empty: the store names it.
    id: str = ""


@dataclass(frozen=True)
class Item:
    id: str
    type: str
    role: str
    status: str
    # JSON object of the item's other fields.
    body: str
    text: str
    created_at: int
    conversation_id: str = ""
    response_id: str = ""
    # Its place in the conversation: increasing, with gaps where items were deleted.
    position: int = 0


@dataclass(frozen=True)
class NewResponse:
    """A finished turn: the response and its items, written in one transaction."""

    id: str
    created_at: float
    completed_at: float
    # completed, incomplete, failed or cancelled.
    status: str
    model: str
    # JSON objects: the request's settings, token usage, and the error of a failed turn.
    settings: str = "{}"
    usage: str = "{}"
    error: str = "{}"
    conversation_id: str = ""
    previous_response_id: str = ""
    inputs: tuple[NewItem, ...] = ()
    outputs: tuple[NewItem, ...] = ()
    # Started (a pending row stands for it): recorded only in place of that row.
    started: bool = False


@dataclass(frozen=True)
class ResponseRecord:
    id: str
    created_at: float
    completed_at: float
    status: str
    model: str
    settings: str
    usage: str
    error: str
    conversation_id: str
    previous_response_id: str
    outputs: list[Item]


@dataclass(frozen=True)
class ItemHit:
    item: Item
    # In [0, 1], the best hit scoring 1 (bm25 relative to the best, as for chunks).
    score: float


@dataclass(frozen=True)
class PendingText:
    """A conversation item's text waiting for its vector."""

    key: int
    text: str
