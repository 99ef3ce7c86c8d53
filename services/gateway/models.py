"""The one rule for a request that names an embedding model: it must be one this gateway
serves (embedders.py), compared without regard to case; the refusal names the served ones."""

from __future__ import annotations

from typing import Any

from services.common.model_info import ModelInfo
from services.gateway.clients import EmbedderClient
from services.gateway.embedders import Embedders
from services.gateway.errors import InvalidRequest, NotFound
from services.pb import store_pb2


def store_model(served: ModelInfo) -> store_pb2.EmbeddingModel:
    """The served model as the store's model rule takes it."""
    return store_pb2.EmbeddingModel(name=served.name, dimensions=served.dimensions)


async def embeddings_model(
    requested: str | None, embedders: Embedders
) -> tuple[EmbedderClient, ModelInfo]:
    """/v1/embeddings: an unknown model is OpenAI's 404 model_not_found."""
    try:
        return await embedders.get(requested)
    except InvalidRequest as error:
        raise NotFound(error.message, param="model", code="model_not_found") from None


async def new_store_model(value: Any, embedders: Embedders) -> tuple[EmbedderClient, ModelInfo]:
    """A new vector store's `embedding_model` (ragd extension): a name, or the
    {"name", "dimensions"} object vector stores show; absent means the default model. Also
    the model of a re-index."""
    if value is None:
        return await embedders.get(None)
    name, dimensions = value, None
    if isinstance(value, dict):
        unknown = set(value) - {"name", "dimensions"}
        if unknown:
            raise InvalidRequest(
                f"'embedding_model' takes 'name' and 'dimensions', not {sorted(unknown)}",
                param="embedding_model",
            )
        name, dimensions = value.get("name"), value.get("dimensions")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            '\'embedding_model\' must be a model name or {"name": ..., "dimensions": ...}',
            param="embedding_model",
        )
    client, info = await embedders.get(name, param="embedding_model")
    if dimensions is not None and dimensions != info.dimensions:
        raise InvalidRequest(
            f"'embedding_model.dimensions' must be {info.dimensions} for {info.name}",
            param="embedding_model",
        )
    return client, info
