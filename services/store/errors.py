"""What can go wrong in the store, named for the caller.

Each error is of one of a few kinds (the classes right below StoreError), and wire/rpc_base.py
maps each kind once to a gRPC status: a new error is one class here.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of the store's domain errors; the message is safe to show to clients."""


# The kinds.


class InvalidArgument(StoreError):
    """A request value is malformed or out of range."""


class NotFound(StoreError):
    """The object the request names does not exist (or the caller does not reach it)."""


class AlreadyExists(StoreError):
    """The object the request would make exists already."""


class PreconditionFailed(StoreError):
    """The request is well formed but the store's state refuses it; the message says why."""


class ModelRule(PreconditionFailed):
    """Vectors or a query against the one model rule (compat.py): the caller looks the vector
    store's model up again, since a re-index may have changed it."""


class Busy(StoreError):
    """Another operation holds what the request needs; retry once it ends."""


class StorageFull(StoreError):
    """The disk under the database (or the backup directory) has no room for the write."""


class Unavailable(StoreError):
    """A part of the store the request needs is missing or not ready."""


# The errors.


class VectorStoreNotFound(NotFound):
    def __init__(self, vector_store_id: str) -> None:
        super().__init__(f"no vector store with id {vector_store_id!r}")
        self.vector_store_id = vector_store_id


class FileNotFound(NotFound):
    def __init__(self, file_id: str) -> None:
        super().__init__(f"no file with id {file_id!r}")
        self.file_id = file_id


class VectorStoreFileNotFound(NotFound):
    def __init__(self, vector_store_id: str, file_id: str) -> None:
        super().__init__(
            f"file {file_id!r} is not in vector store {vector_store_id!r}; attach it first"
        )
        self.vector_store_id = vector_store_id
        self.file_id = file_id


class BatchNotFound(NotFound):
    def __init__(self, vector_store_id: str, batch_id: str) -> None:
        super().__init__(f"no file batch with id {batch_id!r} in vector store {vector_store_id!r}")
        self.batch_id = batch_id


class JobNotFound(NotFound):
    def __init__(self, job_id: int) -> None:
        super().__init__(
            f"no ingest job {job_id}: its file was detached, deleted or cancelled, or its vector "
            "store deleted; drop the job"
        )
        self.job_id = job_id


class LeaseLost(PreconditionFailed):
    """The worker no longer holds the job: it was reclaimed, retried or already finished."""


class DimensionMismatch(ModelRule):
    """Vectors whose dimension differs from the vector_store's."""


class ModelMismatch(ModelRule):
    """Vectors produced by another embedding model than the vector store was indexed with."""


class BackupExists(AlreadyExists):
    """A backup file of that name is already there: backups are never overwritten."""


class BackupNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"no backup named {name!r} in the backup directory")


class BackupUnusable(PreconditionFailed):
    """The file is not a backup this store can restore; the message says why."""


class ReplicaUnavailable(PreconditionFailed):
    """No replica is configured, or Litestream could not read it; the message says which."""


class KeyExists(AlreadyExists):
    pass


class KeyNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"no live API key named {name!r}")


class MaintenanceRunning(Busy):
    """A backup or vacuum is already running; they run one at a time."""


class DatabaseTooNew(Exception):
    """The database was migrated by a newer build; this build cannot safely open it."""


class VectorsUnavailable(Unavailable):
    """The store runs without sqlite-vec (lexical-only) and the call needs vector tables."""


class DatabaseUnavailable(Unavailable):
    """The database server (PostgreSQL) cannot be reached: every store sharing it is affected,
    so the gateway says which part is away rather than "the store"."""


class FullTextUnavailable(Unavailable):
    """A vector store's full-text index is being rebuilt from its chunks."""


class ConversationNotFound(NotFound):
    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"no conversation with id {conversation_id!r}")
        self.conversation_id = conversation_id


class ItemNotFound(NotFound):
    def __init__(self, conversation_id: str, item_id: str) -> None:
        super().__init__(f"no item {item_id!r} in conversation {conversation_id!r}")
        self.item_id = item_id


class ResponseNotFound(NotFound):
    def __init__(self, response_id: str) -> None:
        super().__init__(f"no response with id {response_id!r}")
        self.response_id = response_id


class ResponseExists(AlreadyExists):
    """A response of that id was recorded already (a retried turn)."""


class ReindexRunning(Busy):
    """A vector store has at most one re-index in progress."""


class NoReindex(PreconditionFailed):
    """Cancel asked for a vector store with no re-index in progress."""


class ProjectNotFound(NotFound):
    def __init__(self, project: str) -> None:
        super().__init__(f"no project {project!r}")


class ProjectExists(AlreadyExists):
    pass
