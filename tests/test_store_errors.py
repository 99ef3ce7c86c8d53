"""The store's errors by kind: every error maps to a status through its kind (rpc_base.py)."""

from __future__ import annotations

import grpc
import pytest

from services.store import errors
from services.store.errors import StoreError
from services.store.wire.rpc_base import MODEL_MISMATCH, STORAGE_FULL, status_for


def _subclasses(base: type[StoreError]) -> list[type[StoreError]]:
    found = []
    for child in base.__subclasses__():
        found += [child, *_subclasses(child)]
    return found


@pytest.mark.parametrize("error", _subclasses(StoreError), ids=lambda error: error.__name__)
def test_every_store_error_has_a_status(error: type[StoreError]) -> None:
    code, _ = status_for(error.__new__(error))
    assert code is not grpc.StatusCode.INTERNAL


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (errors.VectorStoreNotFound("vs_x"), grpc.StatusCode.NOT_FOUND, ""),
        (errors.ModelMismatch("m"), grpc.StatusCode.FAILED_PRECONDITION, MODEL_MISMATCH),
        (errors.DimensionMismatch("d"), grpc.StatusCode.FAILED_PRECONDITION, MODEL_MISMATCH),
        (errors.LeaseLost("l"), grpc.StatusCode.FAILED_PRECONDITION, ""),
        (errors.StorageFull("s"), grpc.StatusCode.RESOURCE_EXHAUSTED, STORAGE_FULL),
        (errors.ReindexRunning("r"), grpc.StatusCode.ABORTED, ""),
        (StoreError("no kind"), grpc.StatusCode.INTERNAL, ""),
    ],
)
def test_the_nearest_kind_decides(error: StoreError, code: grpc.StatusCode, reason: str) -> None:
    assert status_for(error) == (code, reason)
