"""What can go wrong in the store, named for the caller; the servicer maps each to a gRPC status."""

from __future__ import annotations


class StoreError(Exception):
    """Base of the store's domain errors; the message is safe to show to clients."""


class InvalidArgument(StoreError):
    """A request value is malformed or out of range."""


class CollectionNotFound(StoreError):
    def __init__(self, collection_id: str) -> None:
        super().__init__(f"no vector store with id {collection_id!r}")
        self.collection_id = collection_id


class DimensionMismatch(StoreError):
    """Vectors whose dimension differs from the collection's."""


class ModelMismatch(StoreError):
    """Vectors produced by another embedding model than the collection was indexed with."""


class DatabaseTooNew(Exception):
    """The database was migrated by a newer build; this build cannot safely open it."""
