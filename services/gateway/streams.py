"""A streamed HTTP response that always closes its source: when the client goes away, the
generator behind it is closed at once (its `finally` records what was sent), not whenever the
garbage collector gets to it."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

from starlette.responses import StreamingResponse
from starlette.types import Send

from services.gateway.chat.events import Event

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClosingStream(StreamingResponse):
    def __init__(self, source: AsyncGenerator[bytes], media_type: str) -> None:
        super().__init__(source, media_type=media_type, headers=SSE_HEADERS)
        self._source = source

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except OSError:
            pass  # the client disconnected; the source's finally keeps what it had sent
        finally:
            await self._source.aclose()


async def server_sent_events(events: AsyncGenerator[Event]) -> AsyncGenerator[bytes]:
    """OpenAI's Responses stream: `event: <type>` and the event as JSON, per event."""
    try:
        async for event in events:
            data = json.dumps(event, separators=(",", ":"))
            yield f"event: {event['type']}\ndata: {data}\n\n".encode()
    finally:
        await events.aclose()
