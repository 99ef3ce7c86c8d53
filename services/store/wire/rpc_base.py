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
    AlreadyExists,
    Busy,
    DatabaseUnavailable,
    InvalidArgument,
    ModelRule,
    NotFound,
    PreconditionFailed,
    StorageFull,
    StoreError,
    Unavailable,
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
# ... and of a database server that cannot be reached (PostgreSQL).
DATABASE_UNAVAILABLE = "database-unavailable"

# Each kind of store error (errors.py) -> its status, and the reason sent with it as trailing
# metadata ("" for none). An error takes its nearest kind's.
_KINDS: dict[type[StoreError], tuple[grpc.StatusCode, str]] = {
    NotFound: (grpc.StatusCode.NOT_FOUND, ""),
    AlreadyExists: (grpc.StatusCode.ALREADY_EXISTS, ""),
    InvalidArgument: (grpc.StatusCode.INVALID_ARGUMENT, ""),
    PreconditionFailed: (grpc.StatusCode.FAILED_PRECONDITION, ""),
    ModelRule: (grpc.StatusCode.FAILED_PRECONDITION, MODEL_MISMATCH),
    Busy: (grpc.StatusCode.ABORTED, ""),
    # RESOURCE_EXHAUSTED is gRPC's code for a full file system; the reason tells it from an
    # overloaded server.
    StorageFull: (grpc.StatusCode.RESOURCE_EXHAUSTED, STORAGE_FULL),
    Unavailable: (grpc.StatusCode.UNAVAILABLE, ""),
    DatabaseUnavailable: (grpc.StatusCode.UNAVAILABLE, DATABASE_UNAVAILABLE),
}


def status_for(error: StoreError) -> tuple[grpc.StatusCode, str]:
    """The error's status and reason, by its kind."""
    for kind in type(error).__mro__:
        if kind in _KINDS:
            return _KINDS[kind]
    return grpc.StatusCode.INTERNAL, ""


async def _abort(context: Context, error: StoreError) -> None:
    code, reason = status_for(error)
    await context.abort(
        code, str(error), trailing_metadata=((REASON_KEY, reason),) if reason else ()
    )


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
        except StoreError as error:
            await _abort(context, error)
        except (apsw.FullError, OSError) as error:
            if not isinstance(error, apsw.FullError) and not is_full_error(error):
                log.exception("store request failed")
                await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
            await _abort(context, disk.refused())
        except apsw.BusyError:
            # Another writer held the database past the busy timeout: a retry may well succeed.
            log.warning("database busy: %s", BUSY_MESSAGE)
            await context.abort(grpc.StatusCode.UNAVAILABLE, BUSY_MESSAGE)
        except Exception:
            log.exception("store request failed")
            await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
        raise AssertionError("unreachable: context.abort raises")
