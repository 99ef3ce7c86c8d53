"""What the gateway gathers in memory and sends to the store in the background, about once a
second (the audit log, API key usage): the loop, and a last brief attempt on shutdown."""

from __future__ import annotations

import asyncio
import contextlib


class Flusher:
    def __init__(self, seconds: float = 1.0) -> None:
        self._seconds = seconds
        self._task: asyncio.Task[None] | None = None

    async def flush(self, final: bool = False) -> object:
        """Sends what is gathered; keeps it for the next round if the store is away. `final`:
        the last round before the process stops."""
        raise NotImplementedError

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
            await asyncio.wait_for(self.flush(final=True), timeout=2.0)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._seconds)
            await self.flush()
