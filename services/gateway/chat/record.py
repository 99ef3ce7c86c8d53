"""Writing a finished turn to the store: one RecordResponse, retried for a while when the
store is down (a kill of the store mid-reply must not lose the turn)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from services.gateway import errors
from services.gateway.clients import Store
from services.pb import store_pb2

log = logging.getLogger(__name__)

# Tries, over about this many seconds, to record a turn the store could not take at once.
RECORD_SECONDS = 30.0
# Writes still under way for streams that were cancelled (strong references keep them).
_PENDING: set[asyncio.Task[None]] = set()


async def record(store: Store, request: store_pb2.RecordResponseRequest) -> None:
    deadline = time.monotonic() + RECORD_SECONDS
    delay = 0.2
    while True:
        try:
            await store.RecordResponse(request)
            return
        except errors.Conflict:
            return  # an earlier attempt landed, and only its answer was lost
        except errors.ApiError as error:
            if isinstance(error, errors.NotFound) and request.started:
                # Deleted while its turn ran (or what it joins was).
                log.info("response %s not recorded: %s", request.id, error.message)
                return
            if not errors.is_transient(error) or time.monotonic() > deadline:
                log.error("could not record response %s: %s", request.id, error.message)
                return
        await asyncio.sleep(delay)
        delay = min(2.0, delay * 2)


def in_background(write: Coroutine[Any, Any, None]) -> None:
    """Runs a write to its end even though the request that started it is gone."""
    task = asyncio.create_task(write)
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)


async def settle(timeout: float) -> None:
    """Waits up to `timeout` seconds for the writes still under way (at shutdown)."""
    if _PENDING:
        await asyncio.wait(list(_PENDING), timeout=timeout)
