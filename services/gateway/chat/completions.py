"""Chat completions passed through to the upstream, and, for a request that names a
conversation, the turn recorded in it: the messages after the last assistant message (a
chat-completions client re-sends the whole history each time) and the reply, as a response
of that conversation, written once like a Responses API turn."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.common.vocabulary import COMPLETED, FAILED, INCOMPLETE, MAX_NEW_ITEMS, ROLES
from services.gateway import errors
from services.gateway.chat.items import ChatItem, message, parse_items
from services.gateway.chat.record import in_background, record
from services.gateway.chat.settings import Failure, ResponseSettings, Usage
from services.gateway.chat.upstream import ChatUpstream
from services.gateway.clients import Store
from services.pb import store_pb2

# Sampling settings kept with a recorded turn (those a response shows).
_SETTINGS = ("temperature", "top_p")


def check_recorded(messages: list[dict[str, Any]]) -> None:
    """A turn recorded into a conversation adds its new messages to it, at most
    MAX_NEW_ITEMS, as any other addition of items does (the body is a ChatCompletionRequest,
    chat/requests.py)."""
    added = len(messages) - _first_new(messages)
    if added > MAX_NEW_ITEMS:
        raise errors.InvalidRequest(
            f"a chat completion recorded into a conversation (X-Ragd-Conversation) adds the "
            f"messages after the last assistant message to it, at most {MAX_NEW_ITEMS}; this "
            f"one has {added}: add the earlier ones with POST /v1/conversations/{{id}}/items",
            param="messages",
        )


def _first_new(messages: list[dict[str, Any]]) -> int:
    """Where the turn's new messages start: after the last assistant message."""
    start = 0
    for index, entry in enumerate(messages):
        if entry["role"] == "assistant":
            start = index + 1
    return start


def new_items(messages: list[dict[str, Any]]) -> list[ChatItem]:
    """The turn's new messages as items: those after the last assistant message."""
    items: list[ChatItem] = []
    for entry in messages[_first_new(messages) :]:
        role, content = entry["role"], entry.get("content")
        if role == "tool":
            body = {"call_id": str(entry.get("tool_call_id") or ""), "output": content or ""}
            items.append(ChatItem("function_call_output", body=body))
        elif role in ROLES:
            parts = content if isinstance(content, list) else str(content or "")
            if isinstance(parts, list):
                # Chat parts ("text", "image_url", ...) as the Responses API names them.
                parts = [
                    {"type": "input_text", "text": part.get("text", "")}
                    if isinstance(part, dict) and part.get("type") == "text"
                    else part
                    for part in parts
                ]
            items += parse_items([{"type": "message", "role": role, "content": parts}], "messages")
    return items


@dataclass
class Recording:
    """A chat completion being recorded into a conversation."""

    store: Store
    conversation_id: str
    model: str
    settings: ResponseSettings
    inputs: list[ChatItem]
    id: str = field(default_factory=lambda: "resp_" + secrets.token_hex(24))
    created_at: float = field(default_factory=time.time)
    text: str = ""
    reasoning: str = ""
    finish: str = ""
    usage: Usage | None = None
    done: bool = False

    def absorb(self, completion: dict[str, Any]) -> None:
        """A whole completion, or one streamed chunk of it."""
        if completion.get("usage"):
            self.usage = Usage.upstream(completion["usage"])
        for choice in completion.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            part = choice.get("delta") or choice.get("message") or {}
            self.text += str(part.get("content") or "")
            self.reasoning += str(part.get("reasoning_content") or "")
            self.finish = str(choice.get("finish_reason") or self.finish)

    async def finish_with(self, status: str, error: Failure | None = None) -> None:
        if self.done:
            return
        self.done = True
        outputs: list[ChatItem] = []
        if status != FAILED:
            outputs.append(message("assistant", self.text, status))
            if self.reasoning:
                content = [{"type": "reasoning_text", "text": self.reasoning}]
                outputs.append(ChatItem("reasoning", body={"summary": [], "content": content}))
        await record(
            self.store,
            store_pb2.RecordResponseRequest(
                id=self.id,
                created_at=self.created_at,
                completed_at=time.time(),
                status=status,
                model=self.model,
                settings_json=self.settings.json_text(),
                usage_json=self.usage.json_text() if self.usage else "{}",
                error_json=json.dumps(error or {}),
                conversation_id=self.conversation_id,
                inputs=[item.message() for item in self.inputs],
                outputs=[item.message() for item in outputs],
            ),
        )

    async def fail(self, error: errors.ApiError) -> None:
        """Recorded as failed, with the upstream's failure."""
        code = error.code or "server_error"
        await self.finish_with(FAILED, Failure(code=code, message=error.message))

    def status(self) -> str:
        return INCOMPLETE if self.finish == "length" else COMPLETED


def recording(
    store: Store, conversation_id: str, body: dict[str, Any], messages: list[dict[str, Any]]
) -> Recording:
    return Recording(
        store=store,
        conversation_id=conversation_id,
        model=str(body.get("model") or ""),
        settings=ResponseSettings.of(
            {"api": "chat.completions", **{name: body[name] for name in _SETTINGS if name in body}}
        ),
        inputs=new_items(messages),
    )


async def complete(
    upstream: ChatUpstream, body: dict[str, Any], turn: Recording | None
) -> dict[str, Any]:
    """A whole completion, recorded (or its failure) before it is returned."""
    try:
        reply = await upstream.forward({**body, "stream": False})
        try:
            completion: dict[str, Any] = json.loads(await reply.aread())
        finally:
            await reply.aclose()
    except errors.ApiError as error:
        if turn is not None:
            await turn.fail(error)
        raise
    if turn is not None:
        turn.absorb(completion)
        await turn.finish_with(turn.status())
    return completion


async def relay(reply: httpx.Response, turn: Recording | None) -> AsyncGenerator[bytes]:
    """The upstream's event stream as it comes, recorded along the way; the turn is written
    before the final `[DONE]` reaches the client, or as incomplete if the client leaves."""
    try:
        async for line in reply.aiter_lines():
            data = line[5:].strip() if line.startswith("data:") else None
            if turn is not None and data == "[DONE]":
                await turn.finish_with(turn.status())
            elif turn is not None and data:
                # A line that is not a chunk is not ours to judge: the client gets it as it came.
                with contextlib.suppress(ValueError, AttributeError):
                    turn.absorb(json.loads(data))
            yield (line + "\n").encode()
    except httpx.HTTPError as error:
        if turn is not None:
            await turn.finish_with(FAILED, Failure(code="bad_gateway", message=str(error)))
        failure = {
            "error": {"message": f"the chat upstream failed: {error}", "type": "server_error"}
        }
        yield f"data: {json.dumps(failure)}\n\n".encode()
    finally:
        await reply.aclose()
        if turn is not None and not turn.done:
            # The client went away (or the stream ended without [DONE]): keep what came.
            status = INCOMPLETE if not turn.finish else turn.status()
            in_background(turn.finish_with(status))
