"""What can go wrong in the store, named for the caller; the servicer maps each to a gRPC status."""

from __future__ import annotations


class StoreError(Exception):
    """Base of the store's domain errors; the message is safe to show to clients."""


class InvalidArgument(StoreError):
    """A request value is malformed or out of range."""


class VectorStoreNotFound(StoreError):
    def __init__(self, vector_store_id: str) -> None:
        super().__init__(f"no vector store with id {vector_store_id!r}")
        self.vector_store_id = vector_store_id


class FileNotFound(StoreError):
    def __init__(self, file_id: str) -> None:
        super().__init__(f"no file with id {file_id!r}")
        self.file_id = file_id


class VectorStoreFileNotFound(StoreError):
    def __init__(self, vector_store_id: str, file_id: str) -> None:
        super().__init__(
            f"file {file_id!r} is not in vector store {vector_store_id!r}; attach it first"
        )
        self.vector_store_id = vector_store_id
        self.file_id = file_id


class BatchNotFound(StoreError):
    def __init__(self, vector_store_id: str, batch_id: str) -> None:
        super().__init__(f"no file batch with id {batch_id!r} in vector store {vector_store_id!r}")
        self.batch_id = batch_id


class JobNotFound(StoreError):
    def __init__(self, job_id: int) -> None:
        super().__init__(
            f"no ingest job {job_id}: its file was detached, deleted or cancelled, or its vector "
            "store deleted; drop the job"
        )
        self.job_id = job_id


class LeaseLost(StoreError):
    """The worker no longer holds the job: it was reclaimed, retried or already finished."""


class DimensionMismatch(StoreError):
    """Vectors whose dimension differs from the vector_store's."""


class ModelMismatch(StoreError):
    """Vectors produced by another embedding model than the vector store was indexed with."""


class BackupExists(StoreError):
    """A backup file of that name is already there: backups are never overwritten."""


class BackupNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no backup named {name!r} in the backup directory")


class BackupUnusable(StoreError):
    """The file is not a backup this store can restore; the message says why."""


class ReplicaUnavailable(StoreError):
    """No replica is configured, or Litestream could not read it; the message says which."""


class KeyExists(StoreError):
    pass


class KeyNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no live API key named {name!r}")


class MaintenanceRunning(StoreError):
    """A backup or vacuum is already running; they run one at a time."""


class DatabaseTooNew(Exception):
    """The database was migrated by a newer build; this build cannot safely open it."""


class VectorsUnavailable(StoreError):
    """The store runs without sqlite-vec (lexical-only) and the call needs vector tables."""


class FullTextUnavailable(StoreError):
    """A vector store's full-text index is being rebuilt from its chunks."""


class StorageFull(StoreError):
    """The disk under the database (or the backup directory) has no room for the write."""


class ConversationNotFound(StoreError):
    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"no conversation with id {conversation_id!r}")
        self.conversation_id = conversation_id


class ItemNotFound(StoreError):
    def __init__(self, conversation_id: str, item_id: str) -> None:
        super().__init__(f"no item {item_id!r} in conversation {conversation_id!r}")
        self.item_id = item_id


class ResponseNotFound(StoreError):
    def __init__(self, response_id: str) -> None:
        super().__init__(f"no response with id {response_id!r}")
        self.response_id = response_id


class ResponseExists(StoreError):
    """A response of that id was recorded already (a retried turn)."""


class ReindexRunning(StoreError):
    """A vector store has at most one re-index in progress."""


class NoReindex(StoreError):
    """Cancel asked for a vector store with no re-index in progress."""


class ProjectNotFound(StoreError):
    def __init__(self, project: str) -> None:
        super().__init__(f"no project {project!r}")


class ProjectExists(StoreError):
    pass
