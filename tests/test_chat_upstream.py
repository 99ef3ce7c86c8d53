"""The chat upstream client against upstreams that misbehave: a real HTTP server on loopback
that stalls, breaks or refuses, in process. Each failure is the gateway error that names the
upstream (the HTTP statuses of these errors are tested in test_chat_api and test_errors)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from services.gateway import errors
from services.gateway.chat.upstream import ChatSettings, ChatUpstream
from tests.harness import free_port

BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = b'{"choices": [{"message": {"role": "assistant", "content": "hello"}}]}'


def reply(status: str, body: bytes, *headers: str) -> list[bytes]:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close", *headers]
    return [("\r\n".join(head) + "\r\n\r\n").encode() + body]


def streamed(*pieces: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return [head, *pieces]


@asynccontextmanager
async def upstream_sending(pieces: list[bytes] | None, timeout: float = 5.0) -> AsyncIterator[Any]:
    """A loopback HTTP server that reads a request and writes `pieces` one by one (None: it
    never answers); yields a ChatUpstream pointed at it."""

    handlers: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            if pieces is None:
                await asyncio.sleep(3600)
            for piece in pieces or []:
                writer.write(piece)
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = ChatUpstream(ChatSettings(f"http://127.0.0.1:{port}/v1", "m", timeout=timeout))
    try:
        yield client
    finally:
        await client.close()
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        server.close()
        await server.wait_closed()


async def collect(client: ChatUpstream) -> list[dict[str, Any]]:
    return [chunk async for chunk in client.stream(BODY)]


def run(call: Callable[[], Any]) -> Any:
    return asyncio.run(call())


@pytest.mark.parametrize(
    ("pieces", "kind", "words"),
    [
        (reply("200 OK", b"<html>not json</html>"), errors.BadGateway, "not a chat completion"),
        (reply("200 OK", b'{"choices": []}'), errors.BadGateway, "not a chat completion"),
        (reply("500 Internal Server Error", b"boom"), errors.BadGateway, "failed with 500: boom"),
        (
            reply("429 Too Many Requests", b'{"error": {"message": "busy"}}', "Retry-After: 7"),
            errors.Overloaded,
            "overloaded: busy",
        ),
        (reply("401 Unauthorized", b"no"), errors.BadGateway, "RAGD_CHAT_API_KEY"),
        (
            reply("400 Bad Request", b'{"error": {"message": "exceeds the context window"}}'),
            errors.InvalidRequest,
            "cannot take this context",
        ),
        (reply("404 Not Found", b"no such model"), errors.InvalidRequest, "no such model"),
    ],
)
def test_a_broken_or_refusing_upstream_is_named(
    pieces: list[bytes], kind: type[errors.ApiError], words: str
) -> None:
    async def call() -> errors.ApiError:
        async with upstream_sending(pieces) as client:
            with pytest.raises(kind) as caught:
                await client.complete(BODY)
            return caught.value

    failure = run(call)
    assert words in failure.message and "the chat upstream at http://127.0.0.1:" in failure.message
    if kind is errors.Overloaded:
        assert failure.retry_after == 7
    if kind is errors.InvalidRequest and "context" in words:
        assert failure.code == "context_length_exceeded"


def test_a_silent_upstream_times_out_and_a_missing_one_is_unavailable() -> None:
    async def silent() -> str:
        async with upstream_sending(None, timeout=0.3) as client:
            with pytest.raises(errors.Timeout) as caught:
                await client.complete(BODY)
            with pytest.raises(errors.Timeout):
                await collect(client)
            return caught.value.message

    assert "did not answer within 0.3 s (RAGD_CHAT_TIMEOUT)" in run(silent)

    async def missing() -> str:
        client = ChatUpstream(ChatSettings(f"http://127.0.0.1:{free_port()}/v1", "m"))
        try:
            with pytest.raises(errors.Unavailable) as caught:
                await client.complete(BODY)
            return caught.value.message
        finally:
            await client.close()

    assert "cannot be reached" in run(missing)


def test_a_stream_is_read_whatever_its_pieces_and_a_bad_line_is_named() -> None:
    text = b'data: {"choices": [{"delta": {"content": "he"}}]}\n\n'
    text += b': a comment\n\ndata: {"choices": [{"delta": {"content": "llo"}}]}\r\n\r\n'
    text += b"data: [DONE]\n\n"

    async def one_byte_at_a_time() -> list[dict[str, Any]]:
        async with upstream_sending(streamed(*(text[i : i + 1] for i in range(len(text))))) as c:
            return await collect(c)

    chunks = run(one_byte_at_a_time)
    assert [chunk["choices"][0]["delta"]["content"] for chunk in chunks] == ["he", "llo"]

    async def garbled() -> str:
        async with upstream_sending(streamed(b"data: {not json\n\n")) as client:
            with pytest.raises(errors.BadGateway) as caught:
                await collect(client)
            return caught.value.message

    assert "streamed a line that is not JSON" in run(garbled)
