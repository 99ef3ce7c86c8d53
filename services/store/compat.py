"""The one model rule: vectors join or query a collection only if they come from the model it
was indexed with, at its dimension; and only vectors usable for cosine distance."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.common.vectors import FloatMatrix
from services.store.errors import DimensionMismatch, InvalidArgument, ModelMismatch
from services.store.records import Collection, EmbeddingModel


def _check(collection: Collection, model: str, dimensions: int, remedy: str) -> None:
    if (not model or model == collection.model) and dimensions == collection.dimensions:
        return
    given = f"{model} ({dimensions} dims)" if model else f"{dimensions}-dim vectors"
    message = (
        f"vector store {collection.id!r} was indexed with {collection.model} "
        f"({collection.dimensions} dims), not {given}; {remedy}"
    )
    if model and model != collection.model:
        raise ModelMismatch(message)
    raise DimensionMismatch(message)


def check_indexing(collection: Collection, model: str, dimensions: int) -> None:
    """Files embedded with `model` at `dimensions` may join the collection (at attach, at
    claim and when their vectors are written); raises ModelMismatch or DimensionMismatch."""
    _check(
        collection,
        model,
        dimensions,
        f"index it from a ragd whose embedder serves {collection.model}, or attach the files "
        f"to a vector store created with {model or 'that model'}",
    )


def serves(models: Sequence[EmbeddingModel], model: str, dimensions: int) -> bool:
    """One of `models` can index and query vectors of `model` at `dimensions`."""
    return any((m.name, m.dimensions) == (model, dimensions) for m in models)


def check_served(collection: Collection, models: Sequence[EmbeddingModel]) -> None:
    """One of `models` (those a worker embeds with) can index the collection's files."""
    if serves(models, collection.model, collection.dimensions):
        return
    if len(models) == 1:
        check_indexing(collection, models[0].name, models[0].dimensions)
    served = ", ".join(f"{m.name} ({m.dimensions} dims)" for m in models)
    raise ModelMismatch(
        f"vector store {collection.id!r} was indexed with {collection.model} "
        f"({collection.dimensions} dims), which no embedder here serves ({served}); index it "
        f"from a ragd whose embedder serves {collection.model}"
    )


def check_query(collection: Collection, model: str, dimensions: int) -> None:
    """A query vector from `model` (empty: not checked) at `dimensions` can search it."""
    _check(
        collection,
        model,
        dimensions,
        f"search it from a ragd whose embedder serves {collection.model}, or create a vector "
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
