"""A response readable while its turn runs: the store holds it from the start (queued or in
progress, with its input) under a lease this gateway renews, and the turn's record ends it.

Background runs (chat/background.py) and streamed turns share it. A gateway that dies mid-turn
stops renewing and the store ends the response as failed once the lease runs out, so no
response stays in progress forever; a failed response keeps its input out of its conversation
(issue 30), whoever ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable

from services.common.vocabulary import IN_PROGRESS, PENDING_RESPONSE_STATUSES
from services.gateway import errors
from services.gateway.chat.events import Event
from services.gateway.chat.turn import Turn
from services.gateway.clients import Store
from services.pb import store_pb2

log = logging.getLogger(__name__)

# Why a held response's turn is told to stop: it was deleted, or it ended meanwhile
# (cancelled, or failed when its lease ran out).
DELETED, ENDED = "deleted", "cancelled"


class Leases:
    def __init__(self, store: Store, seconds: float) -> None:
        self._store = store
        self.seconds = seconds

    async def start(self, turn: Turn) -> None:
        """The response stored as it stands (queued, or in progress), with its input."""
        await self._store.StartResponse(
            store_pb2.StartResponseRequest(
                response=turn.record_request(), lease_seconds=self.seconds
            )
        )
        turn.started = True

    async def hold(self, turn: Turn, stop: Callable[[str], None], *, at_once: bool) -> None:
        """Renews the lease until cancelled (at once first, when the renewal says the turn is
        in progress); tells `stop` when the response was deleted or ended meanwhile."""
        wait = not at_once
        while True:
            if wait:
                await asyncio.sleep(self.seconds / 3)
            wait = True
            try:
                reply = await self._store.RenewResponse(
                    store_pb2.RenewResponseRequest(
                        id=turn.id, lease_seconds=self.seconds, status=IN_PROGRESS
                    )
                )
            except errors.NotFound:
                stop(DELETED)
                return
            except errors.ApiError as error:
                # The store is away: try again; the lease has room for a missed renewal.
                log.warning("could not renew %s: %s", turn.id, error.message)
                continue
            if reply.status not in PENDING_RESPONSE_STATUSES:
                stop(ENDED)
                return

    async def streamed(self, turn: Turn) -> AsyncGenerator[Event]:
        """A streamed turn's events, its response readable (in progress) from its first. The
        stream goes on if the store cannot take the start: the response is then readable
        once recorded, as before. One deleted meanwhile is not recorded."""
        holding = None
        try:
            await self.start(turn)
        except errors.ApiError as error:
            log.warning("response %s is not readable until it ends: %s", turn.id, error.message)
        else:
            holding = asyncio.create_task(self.hold(turn, _stopped(turn), at_once=False))
        try:
            async with contextlib.aclosing(turn.events(stream=True)) as events:
                async for event in events:
                    yield event
        finally:
            if holding is not None:
                holding.cancel()


def _stopped(turn: Turn) -> Callable[[str], None]:
    """A streamed turn runs to its end whatever happens to its stored response: its client
    reads it. Deleted, it is not recorded; ended by the store, its record is refused."""

    def stop(why: str) -> None:
        if why == DELETED:
            turn.stop = DELETED

    return stop
