"""The one model rule: vectors join or query a vector store only if they come from the model it
was indexed with, at its dimension; and only vectors usable for cosine distance."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.common.vectors import FloatMatrix
from services.store.errors import DimensionMismatch, InvalidArgument, ModelMismatch
from services.store.records import EmbeddingModel, VectorStore


def _check(vector_store: VectorStore, model: str, dimensions: int, remedy: str) -> None:
    if (not model or model == vector_store.model) and dimensions == vector_store.dimensions:
        return
    given = f"{model} ({dimensions} dims)" if model else f"{dimensions}-dim vectors"
    message = (
        f"vector store {vector_store.id!r} was indexed with {vector_store.model} "
        f"({vector_store.dimensions} dims), not {given}; {remedy}"
    )
    if model and model != vector_store.model:
        raise ModelMismatch(message)
    raise DimensionMismatch(message)


def check_indexing(vector_store: VectorStore, model: str, dimensions: int) -> None:
    """Files embedded with `model` at `dimensions` may join the vector store (at attach, at
    claim and when their vectors are written); raises ModelMismatch or DimensionMismatch."""
    _check(
        vector_store,
        model,
        dimensions,
        f"index it from a ragd whose embedder serves {vector_store.model}, or attach the files "
        f"to a vector store created with {model or 'that model'}",
    )


def serves(models: Sequence[EmbeddingModel], model: str, dimensions: int) -> bool:
    """One of `models` can index and query vectors of `model` at `dimensions`."""
    return any((m.name, m.dimensions) == (model, dimensions) for m in models)


def check_served(vector_store: VectorStore, models: Sequence[EmbeddingModel]) -> None:
    """One of `models` (those a worker embeds with) can index the vector_store's files."""
    if serves(models, vector_store.model, vector_store.dimensions):
        return
    if len(models) == 1:
        check_indexing(vector_store, models[0].name, models[0].dimensions)
    served = ", ".join(f"{m.name} ({m.dimensions} dims)" for m in models)
    raise ModelMismatch(
        f"vector store {vector_store.id!r} was indexed with {vector_store.model} "
        f"({vector_store.dimensions} dims), which no embedder here serves ({served}); index it "
        f"from a ragd whose embedder serves {vector_store.model}"
    )


def check_query(vector_store: VectorStore, model: str, dimensions: int) -> None:
    """A query vector from `model` (empty: not checked) at `dimensions` can search it."""
    _check(
        vector_store,
        model,
        dimensions,
        f"search it from a ragd whose embedder serves {vector_store.model}, or create a vector "
        f"store with {model or 'that model'} and attach the files to it",
    )


def check_vectors(matrix: FloatMatrix, what: str) -> None:
    """Rejects NaN/infinite values and all-zero rows (cosine distance is undefined for them).

    `what` names the rows in messages, e.g. "vector" or "query vector".
    """
    if not np.isfinite(matrix).all():
        raise InvalidArgument(f"{what}s must not contain NaN or infinite values")
    zero_rows = np.flatnonzero(~matrix.any(axis=1))
    if zero_rows.size:
        name = what if matrix.shape[0] == 1 else f"{what} {int(zero_rows[0])}"
        raise InvalidArgument(f"{name} is all zeros; cosine similarity needs a direction")
