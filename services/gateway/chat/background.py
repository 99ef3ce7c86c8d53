"""Background responses: a turn run apart from the request that started it, so that it
survives its client; polled with GET, cancelled, and its events replayed and followed.

The store holds the response from the start (queued, then in progress, with its input) under
a lease this gateway renews while the turn runs (chat/lease.py); the turn's record ends it. A
cancel reaches the store first (whichever gateway takes it) and this gateway learns it at its
next renewal, or at once when the cancel comes to it. A gateway that dies mid-turn stops
renewing: the store ends the response as failed once the lease runs out.

The events of a run are kept here, in memory, while it runs and for KEEP_SECONDS after;
another gateway, or this one later, replays a finished response from its record instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from services.common.vocabulary import (
    CANCELLED,
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    INCOMPLETE,
)
from services.gateway.chat import record
from services.gateway.chat.events import (
    Event,
    OutputItemAdded,
    OutputItemDone,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
)
from services.gateway.chat.lease import Leases
from services.gateway.chat.turn import Turn
from services.gateway.clients import Store
from services.pb import store_pb2

log = logging.getLogger(__name__)

# Events of finished runs are kept this long for replay.
KEEP_SECONDS = 600.0
# Waits this long at shutdown for the runs' records.
STOP_SECONDS = 5.0


@dataclass
class Run:
    turn: Turn
    events: list[Event] = field(default_factory=list)
    done: bool = False
    ended_at: float = 0.0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    task: asyncio.Task[None] | None = None


class BackgroundRuns:
    def __init__(self, store: Store, lease_seconds: float) -> None:
        self._store = store
        # Streamed turns are held under the same lease (routes/responses.py).
        self.leases = Leases(store, lease_seconds)
        self._runs: dict[str, Run] = {}

    async def start(self, turn: Turn) -> None:
        """Records the response as queued with its input, then runs the turn apart."""
        await self.leases.start(turn)
        self._forget_old()
        run = Run(turn)
        self._runs[turn.id] = run
        run.task = asyncio.create_task(self._run(run), name=f"background {turn.id}")

    async def _run(self, run: Run) -> None:
        # The first renewal, at once, says the turn is in progress.
        stop = functools.partial(self._stop, run)
        renewing = asyncio.create_task(self.leases.hold(run.turn, stop, at_once=True))
        try:
            async with contextlib.aclosing(run.turn.events(stream=True)) as events:
                async for event in events:
                    await self._add(run, event)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("background response %s failed", run.turn.id)
        finally:
            renewing.cancel()
            run.done, run.ended_at = True, time.monotonic()
            async with run.changed:
                run.changed.notify_all()

    async def _add(self, run: Run, event: Event) -> None:
        run.events.append(event)
        async with run.changed:
            run.changed.notify_all()

    def _stop(self, run: Run, why: str) -> None:
        run.turn.stop = why
        if run.task is not None and not run.done:
            run.task.cancel()

    async def cancel(self, response_id: str) -> store_pb2.ResponseRecord:
        reply = await self._store.CancelResponse(store_pb2.ResponseRef(id=response_id))
        run = self._runs.get(response_id)
        if run is not None and reply.status == CANCELLED:
            self._stop(run, "cancelled")
        return reply

    def local(self, response_id: str) -> Run | None:
        return self._runs.get(response_id)

    async def follow(self, run: Run, after: int) -> AsyncGenerator[Event]:
        """The run's events after sequence number `after`, as they come, to its end."""
        sent = after + 1
        while True:
            while sent < len(run.events):
                yield run.events[sent]
                sent += 1
            if run.done:
                return
            async with run.changed:
                if sent >= len(run.events) and not run.done:
                    await run.changed.wait()

    def _forget_old(self) -> None:
        now = time.monotonic()
        for response_id, run in list(self._runs.items()):
            if run.done and now - run.ended_at > KEEP_SECONDS:
                del self._runs[response_id]

    async def stop(self) -> None:
        """At shutdown: each run still going ends as failed (its record written if the store
        answers within STOP_SECONDS; else its lease runs out)."""
        running = [run for run in self._runs.values() if not run.done]
        for run in running:
            self._stop(run, "shutdown")
        tasks = [run.task for run in running if run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_SECONDS)
        await record.settle(STOP_SECONDS)


def replayed(response: dict[str, Any], after: int) -> list[Event]:
    """The events of a finished response rebuilt from its record (its run's own events are
    gone): created, each output item added and done, and the final event."""
    shell = {**response, "status": IN_PROGRESS, "output": []}
    numbers = itertools.count()
    # Numbered last, as the events were before they were typed (the same bytes).
    events: list[Event] = [
        ResponseCreated(type="response.created", response=shell, sequence_number=next(numbers)),
        ResponseInProgress(
            type="response.in_progress", response=shell, sequence_number=next(numbers)
        ),
    ]
    for index, item in enumerate(response["output"]):
        started = json.loads(json.dumps(item))
        events.append(
            OutputItemAdded(
                type="response.output_item.added",
                output_index=index,
                item=started,
                sequence_number=next(numbers),
            )
        )
        events.append(
            OutputItemDone(
                type="response.output_item.done",
                output_index=index,
                item=item,
                sequence_number=next(numbers),
            )
        )
    # A cancelled response ends without a final event, as its live stream did.
    status = response["status"]
    if status == COMPLETED:
        events.append(
            ResponseCompleted(
                type="response.completed", response=response, sequence_number=next(numbers)
            )
        )
    elif status == FAILED:
        events.append(
            ResponseFailed(type="response.failed", response=response, sequence_number=next(numbers))
        )
    elif status == INCOMPLETE:
        events.append(
            ResponseIncomplete(
                type="response.incomplete", response=response, sequence_number=next(numbers)
            )
        )
    return events[after + 1 :]
