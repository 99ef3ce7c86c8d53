"""The vector wire format: row-major little-endian float32 bytes."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float32]
_WIRE = np.dtype("<f4")


def to_bytes(vectors: npt.ArrayLike) -> bytes:
    return np.ascontiguousarray(vectors, dtype=_WIRE).tobytes()


def from_bytes(data: bytes, dimensions: int, count: int | None = None) -> FloatMatrix:
    """Decodes `count` vectors of `dimensions` floats; raises ValueError on a size mismatch."""
    rows = check_size(data, dimensions, count)
    return np.frombuffer(data, dtype=_WIRE).reshape(rows, dimensions).astype(np.float32)


def check_size(data: bytes, dimensions: int, count: int | None = None) -> int:
    """The number of vectors in `data` (exactly `count` if given); ValueError otherwise."""
    if dimensions <= 0:
        raise ValueError(f"dimensions must be positive, got {dimensions}")
    if len(data) % (4 * dimensions) != 0:
        raise ValueError(
            f"vector payload of {len(data)} bytes is not a whole number of "
            f"{dimensions}-dimensional float32 vectors"
        )
    rows = len(data) // (4 * dimensions)
    if count is not None and rows != count:
        raise ValueError(f"expected {count} vectors of {dimensions} dimensions, got {rows}")
    return rows
