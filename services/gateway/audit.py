"""The audit trail of ingest and search calls, sent to the store in the background.

`record()` only appends to a bounded in-memory queue, so it costs a search nothing; a
background task sends the queue to the store in batches (RecordAudit) about once a second.
If the store is unreachable, entries wait (up to the bound, the oldest dropped first) and go
with the next batch; a gateway that is killed loses at most the last second's entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque

from services.gateway.clients import Store
from services.gateway.errors import ApiError, is_transient
from services.pb import store_pb2

log = logging.getLogger(__name__)

MAX_PENDING = 10_000
# The store's limit per RecordAudit call.
MAX_BATCH = 1000


class AuditLog:
    def __init__(
        self, store: Store, flush_seconds: float = 1.0, max_pending: int = MAX_PENDING
    ) -> None:
        self._store = store
        self._flush_seconds = flush_seconds
        self._pending: deque[store_pb2.AuditEntry] = deque(maxlen=max_pending)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def record(
        self,
        operation: str,
        collection_id: str,
        *,
        latency_ms: float,
        k: int = 0,
        result_count: int = 0,
        degraded: bool = False,
        detail: str = "",
        at: float | None = None,
    ) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(
            store_pb2.AuditEntry(
                at=time.time() if at is None else at,
                operation=operation,
                collection_id=collection_id,
                k=k,
                latency_ms=latency_ms,
                result_count=result_count,
                degraded=degraded,
                detail=detail,
            )
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # One last attempt, briefly: shutting down must not hang on an unreachable store.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), timeout=2.0)

    async def flush(self) -> bool:
        """Sends everything queued; False (entries kept) if the store is down."""
        while self._pending:
            batch = [self._pending.popleft() for _ in range(min(MAX_BATCH, len(self._pending)))]
            try:
                await self._store.RecordAudit(store_pb2.RecordAuditRequest(entries=batch))
            except ApiError as error:
                if not is_transient(error):
                    # The store will never take these (a bug, not an outage): do not retry.
                    log.error("the store refused %d audit entries: %s", len(batch), error.message)
                    continue
                log.warning("cannot record audit entries yet: %s", error.message)
                # Back in front, in order; if the queue filled meanwhile, the newest give way.
                self._pending.extendleft(reversed(batch))
                return False
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._flush_seconds)
            await self.flush()
