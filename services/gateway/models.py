"""The one rule for a request that names an embedding model: it must be one this gateway
serves (today the one model of its embedders), compared without regard to case; the refusal
names the served ones."""

from __future__ import annotations

from typing import Any

from services.gateway.clients import ModelInfo
from services.gateway.errors import InvalidRequest, NotFound
from services.pb import store_pb2


def store_model(served: ModelInfo) -> store_pb2.EmbeddingModel:
    """The served model as the store's model rule takes it."""
    return store_pb2.EmbeddingModel(name=served.name, dimensions=served.dimensions)


def unknown_model(requested: str, served: ModelInfo) -> str | None:
    """None when `requested` is served; else why not, naming what is."""
    if requested.lower() == served.name.lower():
        return None
    return (
        f"the model '{requested}' is not served here; this server embeds with "
        f"'{served.name}' (see GET /v1/models)"
    )


def check_embeddings_model(requested: str | None, served: ModelInfo) -> None:
    """/v1/embeddings: an unknown model is OpenAI's 404 model_not_found."""
    if requested is not None and (why := unknown_model(requested, served)):
        raise NotFound(why, param="model", code="model_not_found")


def check_store_model(value: Any, served: ModelInfo) -> None:
    """A new vector store's `embedding_model` (ragd extension): a name, or the
    {"name", "dimensions"} object vector stores show; absent means the served model."""
    if value is None:
        return
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
    if why := unknown_model(name, served):
        raise InvalidRequest(why, param="embedding_model", code="model_not_found")
    if dimensions is not None and dimensions != served.dimensions:
        raise InvalidRequest(
            f"'embedding_model.dimensions' must be {served.dimensions} for {served.name}",
            param="embedding_model",
        )
