"""Embeds conversation items in the background, so history can be searched by meaning
without slowing a turn.

The store's items without a vector of the embedder's model are the queue: a gateway that
stops mid-way loses nothing, and the next one (or the same one restarted) picks up there.
Each gateway walks the items from a watermark (item keys only grow), so an idle poll reads
only what was added since; once in a while it walks from the start again, for items whose
embedding failed or that another model's embedder left behind. Gateways running side by side
may embed an item twice; the second write replaces the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from services.gateway import errors
from services.gateway.clients import EmbedderClient, Store
from services.pb import store_pb2

log = logging.getLogger(__name__)

BATCH = 32
# How often the walk starts over from the first item.
RESCAN_SECONDS = 600.0


class HistoryIndexer:
    def __init__(self, embedder: EmbedderClient, store: Store, poll_seconds: float) -> None:
        self._embedder = embedder
        self._store = store
        self._poll = poll_seconds
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def wake(self) -> None:
        """Items were added through this gateway: look now."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        after, started = 0, time.monotonic()
        while True:
            if time.monotonic() - started > RESCAN_SECONDS:
                after, started = 0, time.monotonic()
            try:
                after, found = await self.index_once(after)
            except errors.ApiError as error:
                log.warning("cannot index conversation history: %s", error.message)
                found = 0
            if found < BATCH:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._poll)

    async def index_once(self, after: int) -> tuple[int, int]:
        """Embeds and stores the next batch after key `after`; returns the new watermark and
        how many items it found."""
        info = await self._embedder.info()
        reply = await self._store.PendingItemTexts(
            store_pb2.PendingItemTextsRequest(model=info.name, after=after, limit=BATCH)
        )
        if not reply.items:
            return after, 0
        texts = [item.text for item in reply.items]
        try:
            # Bulk work: behind searches; a message longer than the model reads is embedded
            # by its beginning.
            embedded = await self._embedder.embed(texts, truncate=True)
            await self._store.PutItemVectors(
                store_pb2.PutItemVectorsRequest(
                    model=embedded.model,
                    dimensions=embedded.dimensions,
                    keys=[item.key for item in reply.items],
                    vectors=embedded.data,
                )
            )
        except errors.ApiError as error:
            if errors.is_transient(error):
                raise
            # Refused for good: these stay lexical-only until the next walk from the start.
            log.warning("skipped %d history items: %s", len(texts), error.message)
        return reply.items[-1].key, len(reply.items)
