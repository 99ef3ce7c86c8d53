"""The bodies of POST /v1/vector_stores, /v1/vector_stores/{id} and its re-index, declared
once (requests.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from services.common import vocabulary as v
from services.gateway.ingest import ChunkingStrategyBody
from services.gateway.requests import Metadata, RequestModel, Text
from services.gateway.schemas import EMBEDDING_MODEL

Name = Annotated[Text, Field(max_length=v.MAX_NAME_CHARS)]
Description = Annotated[
    Text,
    Field(
        max_length=v.MAX_DESCRIPTION_CHARS,
        description="what the store is for (OpenAI takes it on create; ragd also on update)",
    ),
]
# The model to index with: its shape and its being served are checked against the embedders
# (models.new_store_model); described here.
EmbeddingModel = Annotated[Any, WithJsonSchema(EMBEDDING_MODEL)]


class ExpiresAfter(RequestModel):
    anchor: Literal["last_active_at"]
    days: Annotated[int, Field(ge=1, le=365)]


class VectorStoreCreate(RequestModel):
    name: Name = ""
    description: Description = ""
    metadata: Metadata = Field(default_factory=dict)
    file_ids: list[str] = Field(default_factory=list)
    chunking_strategy: ChunkingStrategyBody | None = None
    expires_after: ExpiresAfter | None = None
    embedding_model: EmbeddingModel = None


class VectorStoreUpdate(RequestModel):
    """Each field sent is changed; null clears it (a name, metadata, the expiry)."""

    nulls_are_absent = False

    name: Name | None = None
    description: Description | None = None
    metadata: Metadata | None = None
    expires_after: ExpiresAfter | None = None


class VectorStoreReindex(RequestModel):
    embedding_model: Annotated[EmbeddingModel, Field(description="the model to re-index with")]
    chunking_strategy: Annotated[
        ChunkingStrategyBody | None,
        Field(
            description="every file's new chunking; absent: each file's own, shortened to the "
            "new model's context"
        ),
    ] = None
