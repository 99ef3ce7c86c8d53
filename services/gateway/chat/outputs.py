"""A turn's output items and the stream events that build them, in order: the assistant's
message (text, citations, logprobs), calls of the client's functions, file_search calls and
reasoning. Fed one upstream round at a time (its deltas, or a whole reply as one delta);
plain Python, no I/O.

Each item keeps the id of its first event: the store records it under that id.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.vocabulary import COMPLETED, IN_PROGRESS, INCOMPLETE
from services.gateway.chat import context
from services.gateway.chat.context import Passage
from services.gateway.chat.events import (
    AnnotationAdded,
    ArgumentsDelta,
    ArgumentsDone,
    ContentPartAdded,
    ContentPartDone,
    Event,
    FileSearchCompleted,
    FileSearchInProgress,
    FileSearchSearching,
    OutputItemAdded,
    OutputItemDone,
    TextDelta,
    TextDone,
)
from services.gateway.chat.items import HEAD, ChatItem

RESULTS = "file_search_call.results"


@dataclass
class Call:
    """A tool call the model is making in this round."""

    call_id: str
    name: str
    # A call of the tool ragd runs (file_search), not shown as a function_call.
    hosted: bool
    arguments: str = ""
    # The function_call output item (a call of the client's function).
    item: dict[str, Any] | None = None
    index: int = -1


@dataclass
class Round:
    """What one upstream reply is making: at most one open message, and tool calls."""

    message: dict[str, Any] | None = None
    index: int = -1
    finish: str = ""
    reasoning: str = ""
    wrote: bool = False
    calls: dict[int, Call] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return INCOMPLETE if self.finish == "length" else COMPLETED


@dataclass
class Outputs:
    include: list[str]
    # The name of the hosted tool's calls ("" when the model does not drive file_search).
    hosted: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)
    sequence: int = 0
    # file_search results by item id: stored whether or not the response shows them.
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def number(self) -> int:
        """The next event's sequence number."""
        self.sequence += 1
        return self.sequence - 1

    def added(self, index: int, item: dict[str, Any]) -> OutputItemAdded:
        return OutputItemAdded(
            type="response.output_item.added",
            sequence_number=self.number(),
            output_index=index,
            item=item,
        )

    def done(self, index: int, item: dict[str, Any]) -> OutputItemDone:
        return OutputItemDone(
            type="response.output_item.done",
            sequence_number=self.number(),
            output_index=index,
            item=item,
        )

    def search(self, queries: list[str], item_id: str = "") -> dict[str, Any]:
        """A file_search_call item, in progress."""
        item = {
            "id": item_id or "fs_" + secrets.token_hex(16),
            "type": "file_search_call",
            "status": IN_PROGRESS,
            "queries": queries,
            "results": None,
        }
        self.items.append(item)
        return item

    def search_started(self, item: dict[str, Any]) -> Iterator[Event]:
        index = self.items.index(item)
        yield self.added(index, dict(item))
        yield FileSearchInProgress(
            type="response.file_search_call.in_progress",
            sequence_number=self.number(),
            output_index=index,
            item_id=item["id"],
        )
        yield FileSearchSearching(
            type="response.file_search_call.searching",
            sequence_number=self.number(),
            output_index=index,
            item_id=item["id"],
        )

    def search_done(
        self, item: dict[str, Any], results: list[dict[str, Any]], degraded: bool
    ) -> Iterator[Event]:
        index = self.items.index(item)
        self.results[item["id"]] = results
        item["status"] = COMPLETED
        # Extension: the search ran lexically only (the embedder was down), not hidden.
        item["ragd_degraded"] = degraded
        if RESULTS in self.include:
            item["results"] = results
        yield FileSearchCompleted(
            type="response.file_search_call.completed",
            sequence_number=self.number(),
            output_index=index,
            item_id=item["id"],
        )
        yield self.done(index, dict(item))

    def text(self, current: Round, piece: str, logprobs: list[Any]) -> Iterator[Event]:
        """A piece of the message's text (the message opened at its first)."""
        yield from self.open_message(current)
        item = current.message
        assert item is not None
        part = item["content"][0]
        part["text"] += piece
        shown = [_logprob(entry) for entry in logprobs if isinstance(entry, dict)]
        part["logprobs"] += shown
        yield TextDelta(
            type="response.output_text.delta",
            sequence_number=self.number(),
            item_id=item["id"],
            output_index=current.index,
            content_index=0,
            delta=piece,
            logprobs=shown,
        )

    def open_message(self, current: Round) -> Iterator[Event]:
        """The round's message and its one content part (its text) added, unless they are."""
        if current.message is None:
            item: dict[str, Any] = {
                "id": "msg_" + secrets.token_hex(16),
                "type": "message",
                "role": "assistant",
                "status": IN_PROGRESS,
                "content": [],
            }
            current.message, current.index, current.wrote = item, len(self.items), True
            self.items.append(item)
            yield self.added(current.index, dict(item))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(part)
            yield ContentPartAdded(
                type="response.content_part.added",
                sequence_number=self.number(),
                item_id=item["id"],
                output_index=current.index,
                content_index=0,
                part=dict(part),
            )

    def close_message(
        self, current: Round, status: str, passages: Sequence[Passage], question: str
    ) -> Iterator[Event]:
        """The message done, with citations of the passages the model read."""
        item, index = current.message, current.index
        if item is None:
            return
        current.message = None
        part = item["content"][0]
        text = part["text"]
        part["annotations"] = context.citations(text, passages, question)
        item["status"] = status
        yield TextDone(
            type="response.output_text.done",
            sequence_number=self.number(),
            item_id=item["id"],
            output_index=index,
            content_index=0,
            text=text,
            logprobs=part["logprobs"],
        )
        for number, annotation in enumerate(part["annotations"]):
            yield AnnotationAdded(
                type="response.output_text.annotation.added",
                sequence_number=self.number(),
                item_id=item["id"],
                output_index=index,
                content_index=0,
                annotation_index=number,
                annotation=annotation,
            )
        yield ContentPartDone(
            type="response.content_part.done",
            sequence_number=self.number(),
            item_id=item["id"],
            output_index=index,
            content_index=0,
            part=part,
        )
        yield self.done(index, item)

    def call_delta(
        self, current: Round, delta: dict[str, Any], passages: Sequence[Passage], question: str
    ) -> Iterator[Event]:
        """A piece of a tool call: a call of the client's function is a function_call item
        (a message before it is done first); a hosted call is kept to run."""
        position = delta.get("index", len(current.calls))
        function = delta.get("function") or {}
        call = current.calls.get(position)
        if call is None:
            yield from self.close_message(current, COMPLETED, passages, question)
            name = str(function.get("name") or "")
            call = Call(
                call_id=str(delta.get("id") or "call_" + secrets.token_hex(12)),
                name=name,
                hosted=bool(self.hosted) and name == self.hosted,
            )
            current.calls[position] = call
            current.wrote = True
            if not call.hosted:
                call.item = {
                    "id": "fc_" + secrets.token_hex(16),
                    "type": "function_call",
                    "status": IN_PROGRESS,
                    "arguments": "",
                    "call_id": call.call_id,
                    "name": name,
                }
                call.index = len(self.items)
                self.items.append(call.item)
                yield self.added(call.index, dict(call.item))
        piece = str(function.get("arguments") or "")
        if not piece:
            return
        call.arguments += piece
        if call.item is not None:
            call.item["arguments"] = call.arguments
            yield ArgumentsDelta(
                type="response.function_call_arguments.delta",
                sequence_number=self.number(),
                item_id=call.item["id"],
                output_index=call.index,
                delta=piece,
            )

    def close(self, current: Round, passages: Sequence[Passage], question: str) -> Iterator[Event]:
        """The round's items done: its message, the calls of the client's functions, and
        the upstream's reasoning."""
        status = current.status
        yield from self.close_message(current, status, passages, question)
        for call in current.calls.values():
            if call.item is None:
                continue
            call.item["status"] = status
            yield ArgumentsDone(
                type="response.function_call_arguments.done",
                sequence_number=self.number(),
                item_id=call.item["id"],
                output_index=call.index,
                name=call.name,
                arguments=call.arguments,
            )
            yield self.done(call.index, call.item)
        if current.reasoning:
            # Upstreams that think aloud send it apart from the answer (reasoning_content).
            thought = {
                "id": "rs_" + secrets.token_hex(16),
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": current.reasoning}],
                "status": COMPLETED,
            }
            index = len(self.items)
            self.items.append(thought)
            yield self.added(index, thought)
            yield self.done(index, thought)

    def empty_answer(self, current: Round) -> Iterator[Event]:
        """A reply with neither text nor calls is still an (empty) assistant message."""
        yield from self.open_message(current)
        yield from self.close_message(current, COMPLETED, [], "")

    def interrupted(self) -> None:
        """What was under way when the turn stopped is incomplete."""
        for item in self.items:
            if item["status"] == IN_PROGRESS:
                item["status"] = INCOMPLETE

    def stored(self) -> list[ChatItem]:
        """The items as the store records them (file_search calls with their results)."""
        kept = []
        for item in self.items:
            body = {key: value for key, value in item.items() if key not in HEAD}
            if item["type"] == "file_search_call":
                body = {"queries": item["queries"], "results": self.results.get(item["id"])}
                if "ragd_degraded" in item:
                    body["ragd_degraded"] = item["ragd_degraded"]
            role = str(item.get("role") or "")
            kept.append(ChatItem(item["type"], role, item["status"], body, id=item["id"]))
        return kept


def _logprob(entry: dict[str, Any]) -> dict[str, Any]:
    """A chat completion's token logprob as the Responses API's."""
    return {
        "token": entry.get("token", ""),
        "logprob": entry.get("logprob", 0.0),
        "bytes": entry.get("bytes") or [],
        "top_logprobs": [
            {"token": t.get("token", ""), "logprob": t.get("logprob", 0.0), "bytes": t.get("bytes")}
            for t in entry.get("top_logprobs") or []
            if isinstance(t, dict)
        ],
    }
