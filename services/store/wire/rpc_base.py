"""What every store RPC shares: running database work off the event loop, errors to status
codes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

import apsw
import grpc

from services.common.grpc_server import Context
from services.store.disk import is_full_error
from services.store.errors import (
    BackupExists,
    BackupNotFound,
    BackupUnusable,
    BatchNotFound,
    ConversationNotFound,
    DimensionMismatch,
    FileNotFound,
    FullTextUnavailable,
    InvalidArgument,
    ItemNotFound,
    JobNotFound,
    KeyExists,
    KeyNotFound,
    LeaseLost,
    MaintenanceRunning,
    ModelMismatch,
    NoReindex,
    ProjectExists,
    ProjectNotFound,
    ReindexRunning,
    ReplicaUnavailable,
    ResponseExists,
    ResponseNotFound,
    StorageFull,
    StoreError,
    VectorStoreFileNotFound,
    VectorStoreNotFound,
    VectorsUnavailable,
)
from services.store.repository import DEFAULT_LIST_LIMIT, Repository
from services.store.wire import guard

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_MESSAGE = "the store's database is busy with other writes; retry shortly"
INTERNAL_MESSAGE = "internal error in the store; see the store's log"
# Trailing metadata of a write refused for a full disk.
REASON_KEY = "ragd-reason"
STORAGE_FULL = "storage-full"
# ... and of vectors or a query refused by the model rule: a gateway serving several models
# looks the vector_store's model up again (it changes when a re-index switches).
MODEL_MISMATCH = "model-mismatch"

_STATUS: list[tuple[type[StoreError], grpc.StatusCode]] = [
    (VectorStoreNotFound, grpc.StatusCode.NOT_FOUND),
    (FileNotFound, grpc.StatusCode.NOT_FOUND),
    (VectorStoreFileNotFound, grpc.StatusCode.NOT_FOUND),
    (BatchNotFound, grpc.StatusCode.NOT_FOUND),
    (JobNotFound, grpc.StatusCode.NOT_FOUND),
    (ConversationNotFound, grpc.StatusCode.NOT_FOUND),
    (ItemNotFound, grpc.StatusCode.NOT_FOUND),
    (ResponseNotFound, grpc.StatusCode.NOT_FOUND),
    (ResponseExists, grpc.StatusCode.ALREADY_EXISTS),
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (DimensionMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (ModelMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (LeaseLost, grpc.StatusCode.FAILED_PRECONDITION),
    (BackupExists, grpc.StatusCode.ALREADY_EXISTS),
    (BackupNotFound, grpc.StatusCode.NOT_FOUND),
    (BackupUnusable, grpc.StatusCode.FAILED_PRECONDITION),
    (ReplicaUnavailable, grpc.StatusCode.FAILED_PRECONDITION),
    (KeyExists, grpc.StatusCode.ALREADY_EXISTS),
    (KeyNotFound, grpc.StatusCode.NOT_FOUND),
    (ProjectExists, grpc.StatusCode.ALREADY_EXISTS),
    (ProjectNotFound, grpc.StatusCode.NOT_FOUND),
    (MaintenanceRunning, grpc.StatusCode.ABORTED),
    (ReindexRunning, grpc.StatusCode.ABORTED),
    (NoReindex, grpc.StatusCode.FAILED_PRECONDITION),
    (VectorsUnavailable, grpc.StatusCode.UNAVAILABLE),
    (FullTextUnavailable, grpc.StatusCode.UNAVAILABLE),
]


def status_for(error: StoreError) -> grpc.StatusCode:
    for error_type, code in _STATUS:
        if isinstance(error, error_type):
            return code
    return grpc.StatusCode.INTERNAL


def list_args(limit: int, order: str) -> tuple[int, str]:
    return limit or DEFAULT_LIST_LIMIT, order or "desc"


class RpcBase:
    """Runs each blocking database call on the executor's threads."""

    def __init__(self, repository: Repository, executor: Executor) -> None:
        self._repository = repository
        self._executor = executor

    async def _call(self, context: Context, work: Callable[[], T]) -> T:
        """Runs `work` on a database thread, after refusing any object the request names that
        its caller does not reach (guard.py); store errors become statuses."""
        loop = asyncio.get_running_loop()
        disk = self._repository.disk
        call = guard.pending()

        def checked() -> T:
            self._repository.authorize(call.caller, call.references)
            return work()

        try:
            result = await loop.run_in_executor(self._executor, checked)
            if disk.full:
                disk.check_recovered()
            return result
        except StorageFull as error:
            await _abort_full(context, error)
        except (apsw.FullError, OSError) as error:
            if not isinstance(error, apsw.FullError) and not is_full_error(error):
                log.exception("store request failed")
                await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
            await _abort_full(context, disk.refused())
        except (ModelMismatch, DimensionMismatch) as error:
            await context.abort(
                status_for(error), str(error), trailing_metadata=((REASON_KEY, MODEL_MISMATCH),)
            )
        except StoreError as error:
            await context.abort(status_for(error), str(error))
        except apsw.BusyError:
            # Another writer held the database past the busy timeout: a retry may well succeed.
            log.warning("database busy: %s", BUSY_MESSAGE)
            await context.abort(grpc.StatusCode.UNAVAILABLE, BUSY_MESSAGE)
        except Exception:
            log.exception("store request failed")
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
        raise AssertionError("unreachable: context.abort raises")


async def _abort_full(context: Context, error: StorageFull) -> None:
    # RESOURCE_EXHAUSTED is gRPC's code for a full file system; the reason tells it from an
    # overloaded server.
    await context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        str(error),
        trailing_metadata=((REASON_KEY, STORAGE_FULL),),
    )
