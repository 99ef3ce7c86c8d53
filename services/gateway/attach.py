"""The one attach step: files into a vector store, with their ingest jobs, then the workers.

Every door uses it: the REST routes (a stored file, a direct upload, a batch, the files of a
new vector store) and bulk ingest over gRPC. The request names the model this gateway embeds
with, so the store refuses a vector store of another model at once, in its own words, and the
upload is not stored (one store transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from services.common.model_info import ModelInfo
from services.gateway import errors
from services.gateway.attributes import Attribute, attributes_message
from services.gateway.clients import Store
from services.gateway.embedders import Embedders
from services.gateway.ingest import ChunkingStrategy
from services.gateway.models import store_model
from services.gateway.worker import IngestWorkers
from services.pb import store_pb2

# The context assumed for a store made before ragd recorded its model's (schema 8) while that
# model's embedders are away: the smallest of the common embedding models' (MiniLM's).
UNKNOWN_CONTEXT = 256


@dataclass(frozen=True)
class Upload:
    filename: str
    content: bytes


@dataclass(frozen=True)
class Attachment:
    """A stored file (`file_id`) or new content (`upload`), with its settings."""

    strategy: ChunkingStrategy
    file_id: str = ""
    upload: Upload | None = None
    attributes: dict[str, Attribute] = field(default_factory=dict)


@dataclass(frozen=True)
class Attacher:
    store: Store
    embedders: Embedders
    workers: IngestWorkers

    async def model(self, vector_store_id: str) -> ModelInfo:
        """The model the vector store's files are embedded with (to resolve their chunking);
        a store of a model no embedder here serves is refused. While the model's embedders do
        not answer, what the store recorded of it: files are then indexed lexically first."""
        try:
            return (await self.embedders.for_store(self.store, vector_store_id))[1]
        except errors.ApiError as error:
            if not errors.is_transient(error):
                raise
        found = await self.store.GetVectorStore(store_pb2.GetVectorStoreRequest(id=vector_store_id))
        return ModelInfo(
            name=found.model,
            dimensions=found.dimensions,
            max_input_tokens=found.max_input_tokens or UNKNOWN_CONTEXT,
            pooling="",
            normalized=True,
            digest="",
            special_tokens=0,
        )

    async def _model(self, vector_store_id: str) -> store_pb2.EmbeddingModel:
        return store_model(await self.model(vector_store_id))

    async def attach(
        self, vector_store_id: str, item: Attachment, key_name: str = ""
    ) -> store_pb2.VectorStoreFile:
        """One file; an upload whose content the vector store already has comes back as that
        file with `deduplicated` set (or, if it had failed, that file attached again).
        `key_name`: the API key whose usage its embedding counts in."""
        request = store_pb2.AttachFileRequest(
            vector_store_id=vector_store_id,
            key_name=key_name,
            attributes=attributes_message(item.attributes),
            chunking=item.strategy.message(),
            model=await self._model(vector_store_id),
        )
        if item.upload is not None:
            request.upload.CopyFrom(
                store_pb2.NewFile(filename=item.upload.filename, content=item.upload.content)
            )
        else:
            request.file_id = item.file_id
        attached = await self.store.AttachFile(request)
        self.workers.wake()
        return attached

    async def attach_batch(
        self, vector_store_id: str, items: Sequence[Attachment], key_name: str = ""
    ) -> store_pb2.FileBatch:
        """Stored files, in one store transaction, as a file batch."""
        batch = await self.store.CreateFileBatch(
            store_pb2.CreateFileBatchRequest(
                vector_store_id=vector_store_id,
                key_name=key_name,
                model=await self._model(vector_store_id),
                files=[
                    store_pb2.BatchFile(
                        file_id=item.file_id,
                        attributes=attributes_message(item.attributes),
                        chunking=item.strategy.message(),
                    )
                    for item in items
                ],
            )
        )
        self.workers.wake()
        return batch
