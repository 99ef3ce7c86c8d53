"""OpenAI's conversation and response items: read from requests, rendered from the store,
and turned into the chat messages an upstream model reads. No web framework here.

Items are kept as OpenAI sent them: a message's content parts of any type (text, files,
images, and types this server does not know) are stored as JSON and given back unchanged;
only their text reaches the model and the full-text index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.vocabulary import COMPLETED, ITEM_STATUSES, MAX_ITEM_BYTES, ROLES
from services.gateway.errors import invalid
from services.gateway.params import check_text
from services.pb import store_pb2

# Text part types: what a model reads of a message.
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text", "refusal")
# Fields every item has; the rest is its body.
HEAD = ("id", "type", "role", "status")
# The string fields a tool call and its result must have (an output may also be parts).
_CALL_FIELDS = {
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
}


@dataclass(frozen=True)
class ChatItem:
    """An item to store: OpenAI's fields besides id/type/role/status in `body`."""

    type: str
    role: str = ""
    status: str = COMPLETED
    body: dict[str, Any] = field(default_factory=dict)
    # The id a response's output was streamed under (kept by the store); "" for new items.
    id: str = ""

    @property
    def text(self) -> str:
        return item_text(self.type, self.body)

    def message(self) -> store_pb2.NewItem:
        return store_pb2.NewItem(
            type=self.type,
            role=self.role,
            status=self.status,
            body_json=json.dumps(self.body),
            text=self.text,
            id=self.id,
        )


def item_text(kind: str, body: dict[str, Any]) -> str:
    """The searchable and readable text of an item. A file_search_call has none: ragd's
    queries are the user's own words, already in the message."""
    if kind == "message" or kind == "reasoning":
        parts = [*body.get("summary", []), *body.get("content", [])]
        return "\n".join(
            str(part.get("text", "") or part.get("refusal", ""))
            for part in parts
            if isinstance(part, dict) and part.get("type") in TEXT_PARTS
        )
    if kind == "function_call_output":
        output = body.get("output", "")
        if isinstance(output, list):
            # Content parts (input_text, input_image, ...): their text.
            return "\n".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
        return output if isinstance(output, str) else json.dumps(output)
    if kind == "function_call":
        return f"{body.get('name', '')}({body.get('arguments', '')})"
    return ""


def message(role: str, text: str, status: str = COMPLETED) -> ChatItem:
    part = "output_text" if role == "assistant" else "input_text"
    content: dict[str, Any] = {"type": part, "text": text}
    if part == "output_text":
        content["annotations"] = []
        content["logprobs"] = []
    return ChatItem("message", role, status, {"content": [content]})


def parse_items(raw: Any, param: str) -> list[ChatItem]:
    """OpenAI's `input`/`items`: a string (one user message) or an array of items, where a
    message may carry its content as a string or as parts."""
    if isinstance(raw, str):
        return [message("user", check_text(raw, param))]
    if not isinstance(raw, list) or not raw:
        raise invalid(f"'{param}' must be a string or a non-empty array of items", param=param)
    return [_item(entry, f"{param}[{index}]", param) for index, entry in enumerate(raw)]


def _item(raw: Any, name: str, param: str) -> ChatItem:
    if not isinstance(raw, dict):
        raise invalid(f"'{name}' must be an object", param=param)
    if len(json.dumps(raw)) > MAX_ITEM_BYTES:
        raise invalid(f"'{name}' is larger than {MAX_ITEM_BYTES} bytes", param=param)
    kind = raw.get("type", "message")
    if not isinstance(kind, str) or not kind:
        raise invalid(f"'{name}.type' must be a string", param=param)
    status = raw.get("status") or COMPLETED
    if status not in ITEM_STATUSES:
        raise invalid(f"'{name}.status' must be one of {', '.join(ITEM_STATUSES)}", param=param)
    body = {key: value for key, value in raw.items() if key not in HEAD}
    _check_strings(body, name, param)
    content = body.get("content")
    if content is not None:
        _check_content(content, name, param)
    if kind in _CALL_FIELDS:
        for key in _CALL_FIELDS[kind]:
            value = body.get(key)
            if not isinstance(value, str) and not (key == "output" and isinstance(value, list)):
                raise invalid(f"'{name}.{key}' is required for a {kind} item", param=param)
    if kind != "message":
        return ChatItem(kind, str(raw.get("role") or ""), status, body)
    role = raw.get("role")
    if role not in ROLES:
        raise invalid(f"'{name}.role' must be one of {', '.join(ROLES)}", param=param)
    if content is None:
        raise invalid(f"'{name}.content' is required for a message", param=param)
    if isinstance(content, str):
        part = "output_text" if role == "assistant" else "input_text"
        body["content"] = [{"type": part, "text": content}]
    return ChatItem("message", role, status, body)


def _check_content(content: Any, name: str, param: str) -> None:
    """A string, or parts that each have a type (of any name: unknown ones are kept) and, if
    they carry `text`, a string there."""
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not all(
        isinstance(part, dict)
        and isinstance(part.get("type"), str)
        and isinstance(part.get("text", ""), str)
        for part in content
    ):
        raise invalid(
            f"'{name}.content' must be a string or an array of parts, each with a 'type' (and "
            "a string 'text', if any)",
            param=param,
        )


def _check_strings(value: Any, name: str, param: str) -> None:
    """Every string valid Unicode (no lone surrogates), at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(item, name, param=param)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def stored(item: store_pb2.ConversationItem) -> ChatItem:
    """A stored item back as a ChatItem (to build a model's context from history)."""
    return ChatItem(item.type, item.role, item.status, json.loads(item.body_json or "{}"))


def paired(items: Sequence[ChatItem]) -> set[str]:
    """The call ids with both their function_call and its function_call_output in `items`."""
    calls = {_call_id(item) for item in items if item.type == "function_call"}
    return calls & {_call_id(item) for item in items if item.type == "function_call_output"}


def chat_messages(items: Sequence[ChatItem], pairs: set[str] | None = None) -> list[dict[str, Any]]:
    """What a chat-completions model reads of the items: messages with their text, the
    model's function calls as an assistant message's tool_calls and their results as tool
    messages. Items with no text for the model (file_search calls, reasoning) are left out,
    and so are calls without their result and results without their call (a conversation
    may hold either: a call the user moved on from, a result recorded through chat
    completions, or history cut at its 500 items). `pairs`: the call ids that have both,
    when `items` are a part of what the model reads (`paired` of the whole).
    """
    whole = paired(items) if pairs is None else pairs
    messages: list[dict[str, Any]] = []
    for item in items:
        if item.type in _CALL_FIELDS and _call_id(item) not in whole:
            continue  # a call left unanswered, or a result of no call: an upstream refuses it
        text = item.text.strip()
        if item.type == "message" and text:
            role = "system" if item.role == "developer" else item.role
            messages.append({"role": role, "content": text})
        elif item.type == "function_call":
            call = {
                "id": str(item.body.get("call_id", "")),
                "type": "function",
                "function": {
                    "name": str(item.body.get("name", "")),
                    "arguments": str(item.body.get("arguments", "")),
                },
            }
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # calls made together stay together
            else:
                messages.append({"role": "assistant", "tool_calls": [call]})
        elif item.type == "function_call_output":
            call_id = str(item.body.get("call_id", ""))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": item.text})
    return messages


def check_calls(history: Sequence[ChatItem], inputs: Sequence[ChatItem]) -> None:
    """The input's function results answer calls (of the history or the input), and the
    input's calls have their results, as OpenAI requires (an upstream refuses either)."""
    calls = {_call_id(item): item for item in [*history, *inputs] if item.type == "function_call"}
    answered = set()
    for item in inputs:
        if item.type == "function_call_output":
            call_id = _call_id(item)
            if call_id not in calls:
                raise invalid(
                    f"no function call found for the function_call_output of call_id "
                    f"{call_id[:80]!r}",
                    param="input",
                )
            answered.add(call_id)
    for item in inputs:
        if item.type == "function_call" and _call_id(item) not in answered:
            raise invalid(
                f"no output found for the function call {_call_id(item)[:80]!r} "
                f"({str(item.body.get('name', ''))[:64]}): send its function_call_output",
                param="input",
            )


def _call_id(item: ChatItem) -> str:
    return str(item.body.get("call_id", ""))
