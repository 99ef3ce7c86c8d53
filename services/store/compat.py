"""Whether vectors fit a collection: same model, same dimension, usable for cosine distance."""

from __future__ import annotations

import numpy as np

from services.common.vectors import FloatMatrix
from services.store.errors import DimensionMismatch, InvalidArgument, ModelMismatch
from services.store.records import Collection


def check_compatible(collection: Collection, model: str, dimensions: int, *, query: bool) -> None:
    """Raises ModelMismatch or DimensionMismatch with what to do about it.

    An empty `model` skips the model check (the dimension is always checked).
    """
    indexed = (
        f"vector store {collection.id!r} was indexed with {collection.model} "
        f"({collection.dimensions} dims)"
    )
    what = "a query vector" if query else "vectors"
    source = f" from {model}" if model else ""
    remedy = (
        f"embed the query with {collection.model} (search from a ragd whose embedder serves it), "
        "or create a new vector store and attach the files again"
        if query
        else "create a new store or re-embed"
    )
    if model and model != collection.model:
        raise ModelMismatch(f"{indexed} but got {what} from {model}; {remedy}")
    if dimensions != collection.dimensions:
        raise DimensionMismatch(f"{indexed} but got {dimensions}-dim {what}{source}; {remedy}")


def check_indexing_model(collection: Collection, model: str, dimensions: int) -> None:
    """Raises ModelMismatch unless files embedded with `model` can join the collection."""
    if model == collection.model and dimensions == collection.dimensions:
        return
    raise ModelMismatch(
        f"vector store {collection.id!r} was indexed with {collection.model} "
        f"({collection.dimensions} dims) but this server embeds with {model} ({dimensions} dims);"
        f" attach the file to a vector store created with {model}, or index into this one "
        f"from a ragd whose embedder serves {collection.model}"
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
