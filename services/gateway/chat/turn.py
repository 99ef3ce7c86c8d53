"""One turn of the Responses API: history, file_search, the upstream model, the events a
streaming client sees, and the record of the whole turn. Plain asyncio, no web framework.

`prepare` does everything that can fail because of the request (unknown conversation or
vector store, a context too long) before a single event is sent, so those stay HTTP errors;
`Turn.events` then yields OpenAI's stream events in order and records the turn when it ends:
completed, incomplete (the reply was cut off: max_output_tokens, or the client went away) or
failed (the upstream failed: the user's input and a failed response are kept).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.vocabulary import DEFAULT_SEARCH_MODE
from services.gateway import errors
from services.gateway.attributes import attributes_python
from services.gateway.chat import context
from services.gateway.chat.context import Passage
from services.gateway.chat.items import HEAD, ChatItem, stored
from services.gateway.chat.record import in_background, record, usage
from services.gateway.chat.upstream import ChatUpstream
from services.gateway.clients import Store
from services.gateway.embedders import Embedders
from services.gateway.search import Deadlines, Search, search_many
from services.pb import store_pb2

log = logging.getLogger(__name__)

RESULTS = "file_search_call.results"

Event = dict[str, Any]


@dataclass(frozen=True)
class FileSearchTool:
    vector_store_ids: list[str]
    max_num_results: int
    score_threshold: float
    filter: store_pb2.Filter | None
    # As the client sent it, echoed in the response's `tools`.
    raw: dict[str, Any]


@dataclass(frozen=True)
class TurnRequest:
    model: str
    inputs: list[ChatItem]
    instructions: str | None = None
    previous_response_id: str = ""
    conversation_id: str = ""
    store: bool = True
    tools: list[FileSearchTool] = field(default_factory=list)
    tool_choice: str = "auto"
    include: list[str] = field(default_factory=list)
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    truncation: str = "disabled"
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class _Reply:
    text: str = ""
    reasoning: str = ""
    finish: str = ""


@dataclass
class Turn:
    """A prepared turn: its id, the prompt, the file_search call already made."""

    request: TurnRequest
    id: str
    created_at: float
    prompt: context.Prompt
    queries: list[str]
    upstream: ChatUpstream
    store: Store
    searched: ChatItem | None = None
    sequence: int = 0
    outputs: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    status: str = "in_progress"
    error: dict[str, Any] | None = None
    incomplete: dict[str, Any] | None = None
    recorded: bool = False
    failure: errors.ApiError | None = None
    search_id: str = field(default_factory=lambda: "fs_" + secrets.token_hex(16))

    def _event(self, kind: str, **fields: Any) -> Event:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence - 1, **fields}

    def _part_event(self, kind: str, item: dict[str, Any], index: int, **fields: Any) -> Event:
        """An event about the message's one content part (its text)."""
        return self._event(kind, item_id=item["id"], output_index=index, content_index=0, **fields)

    def response(self) -> dict[str, Any]:
        return response_object(
            id=self.id,
            created_at=self.created_at,
            status=self.status,
            model=self.request.model,
            settings=settings(self.request, self.prompt.dropped_items),
            previous_response_id=self.request.previous_response_id,
            conversation_id=self.request.conversation_id,
            outputs=self.outputs,
            usage=self.usage or None,
            error=self.error,
            incomplete=self.incomplete,
        )

    async def events(self, stream: bool) -> AsyncGenerator[Event]:
        """OpenAI's stream events of this turn, and the turn recorded when it ends. A failure
        of the upstream ends the stream with `error` and `response.failed`, and is kept in
        `failure` for a caller that does not stream."""
        try:
            yield self._event("response.created", response=self.response())
            yield self._event("response.in_progress", response=self.response())
            async for event in self._search_events():
                yield event
            async with contextlib.aclosing(self._answer(stream)) as answer:
                async for event in answer:
                    yield event
            final = "response.completed" if self.status == "completed" else "response.incomplete"
            await self._record()
            yield self._event(final, response=self.response())
        except errors.ApiError as error:
            self.failure = error
            self.status = "failed"
            self.error = {"code": error.code or "server_error", "message": error.message}
            # A reply cut off by a failure is not kept: the input and the failure are.
            self.outputs = [item for item in self.outputs if item["type"] != "message"]
            await self._record()
            yield self._event(
                "error", code=self.error["code"], message=error.message, param=error.param
            )
            yield self._event("response.failed", response=self.response())
        finally:
            if not self.recorded and self.status == "in_progress":
                # The client went away mid-reply: keep what it received, as incomplete.
                self.status = "incomplete"
                self.incomplete = {"reason": "client_disconnected"}
                for item in self.outputs:
                    if item["status"] == "in_progress":
                        item["status"] = "incomplete"
                in_background(self._record())

    async def _search_events(self) -> AsyncGenerator[Event]:
        if self.searched is None:
            return
        item = self._render_searched("in_progress")
        index = len(self.outputs)
        self.outputs.append(item)
        yield self._event("response.output_item.added", output_index=index, item=dict(item))
        for phase in ("in_progress", "searching", "completed"):
            yield self._event(
                f"response.file_search_call.{phase}", output_index=index, item_id=item["id"]
            )
        self.outputs[index] = self._render_searched("completed")
        yield self._event("response.output_item.done", output_index=index, item=self.outputs[index])

    def _render_searched(self, status: str) -> dict[str, Any]:
        assert self.searched is not None
        body = self.searched.body
        results = body["results"] if RESULTS in self.request.include else None
        return {
            "id": self.search_id,
            "type": "file_search_call",
            "status": status,
            "queries": body["queries"],
            "results": results if status == "completed" else None,
        }

    async def _answer(self, stream: bool) -> AsyncGenerator[Event]:
        upstream = self.upstream
        params = {
            "model": self.request.model,
            "temperature": self.request.temperature,
            "top_p": self.request.top_p,
            "max_tokens": self.request.max_output_tokens or upstream.settings.max_output_tokens,
        }
        body = upstream.body(self.prompt.messages, params)
        index = len(self.outputs)
        item: dict[str, Any] = {
            "id": "msg_" + secrets.token_hex(16),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        reply = _Reply()
        if stream:
            self.outputs.append(item)
            yield self._event("response.output_item.added", output_index=index, item=dict(item))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(part)
            yield self._part_event(
                "response.content_part.added",
                item,
                index,
                part=dict(part),
            )
            async with contextlib.aclosing(self._pieces(body, reply)) as pieces:
                async for piece in pieces:
                    part["text"] = reply.text
                    yield self._part_event(
                        "response.output_text.delta",
                        item,
                        index,
                        delta=piece,
                        logprobs=[],
                    )
        else:
            whole = await upstream.complete(body)
            choice = whole["choices"][0]
            reply.text = str(choice["message"].get("content") or "")
            reply.reasoning = str(choice["message"].get("reasoning_content") or "")
            reply.finish = str(choice.get("finish_reason") or "")
            self.usage = usage(whole.get("usage") or {})
            item["content"].append(
                {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
            )
            self.outputs.append(item)
        text, reasoning = reply.text, reply.reasoning
        part = item["content"][0]
        part["text"] = text
        question = _query(self.request.inputs) if self.request.tools else ""
        part["annotations"] = context.citations(text, self.prompt.passages, question)
        cut = reply.finish == "length"
        item["status"] = "incomplete" if cut else "completed"
        self.status = "incomplete" if cut else "completed"
        if cut:
            self.incomplete = {"reason": "max_output_tokens"}
        if stream:
            yield self._part_event(
                "response.output_text.done",
                item,
                index,
                text=text,
                logprobs=[],
            )
            for number, annotation in enumerate(part["annotations"]):
                yield self._part_event(
                    "response.output_text.annotation.added",
                    item,
                    index,
                    annotation_index=number,
                    annotation=annotation,
                )
            yield self._part_event(
                "response.content_part.done",
                item,
                index,
                part=part,
            )
            yield self._event("response.output_item.done", output_index=index, item=item)
        if reasoning:
            # Upstreams that think aloud send it apart from the answer (reasoning_content).
            thought = {
                "id": "rs_" + secrets.token_hex(16),
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning}],
                "status": "completed",
            }
            self.outputs.append(thought)
            if stream:
                for kind in ("response.output_item.added", "response.output_item.done"):
                    yield self._event(kind, output_index=index + 1, item=thought)

    async def _pieces(self, body: dict[str, Any], reply: _Reply) -> AsyncGenerator[str]:
        """The text of a streamed completion piece by piece, gathered in `reply`."""
        async with contextlib.aclosing(self.upstream.stream(body)) as chunks:
            async for chunk in chunks:
                if chunk.get("usage"):
                    self.usage = usage(chunk["usage"])
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    reply.reasoning += str(delta.get("reasoning_content") or "")
                    reply.finish = str(choice.get("finish_reason") or reply.finish)
                    piece = str(delta.get("content") or "")
                    if piece:
                        reply.text += piece
                        yield piece

    async def _record(self) -> None:
        """The whole turn in one store transaction (retried for a while if the store is down:
        a kill of the store mid-stream must not lose the turn)."""
        if self.recorded or not self.request.store:
            self.recorded = True
            return
        self.recorded = True
        request = store_pb2.RecordResponseRequest(
            id=self.id,
            created_at=self.created_at,
            completed_at=time.time(),
            status=self.status,
            model=self.request.model,
            settings_json=json.dumps(settings(self.request, self.prompt.dropped_items)),
            usage_json=json.dumps(self.usage),
            error_json=json.dumps(self.error or self.incomplete or {}),
            conversation_id=self.request.conversation_id,
            previous_response_id=self.request.previous_response_id,
            inputs=[item.message() for item in self.request.inputs],
            outputs=[_stored_output(item, self.searched).message() for item in self.outputs],
        )
        await record(self.store, request)


def _stored_output(item: dict[str, Any], searched: ChatItem | None) -> ChatItem:
    body = {key: value for key, value in item.items() if key not in HEAD}
    if item["type"] == "file_search_call" and searched is not None:
        # Stored with its results, whether or not this response showed them.
        body = {"queries": searched.body["queries"], "results": searched.body["results"]}
    return ChatItem(item["type"], str(item.get("role") or ""), item["status"], body)


def settings(request: TurnRequest, dropped: int) -> dict[str, Any]:
    """What the stored response keeps of its request (rendered back by GET)."""
    return {
        "instructions": request.instructions,
        "tools": [tool.raw for tool in request.tools],
        "tool_choice": request.tool_choice,
        "include": request.include,
        "max_output_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "truncation": request.truncation,
        "metadata": request.metadata,
        "store": request.store,
        "truncated_input_items": dropped,
    }


def response_object(
    *,
    id: str,
    created_at: float,
    status: str,
    model: str,
    settings: dict[str, Any],
    previous_response_id: str,
    conversation_id: str,
    outputs: Sequence[dict[str, Any]],
    usage: dict[str, Any] | None,
    error: dict[str, Any] | None,
    incomplete: dict[str, Any] | None,
) -> dict[str, Any]:
    """OpenAI's response object, for a turn under way and for one read back from the store."""
    return {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "model": model,
        "output": list(outputs),
        "instructions": settings.get("instructions"),
        "metadata": settings.get("metadata") or {},
        "temperature": settings.get("temperature"),
        "top_p": settings.get("top_p"),
        "max_output_tokens": settings.get("max_output_tokens"),
        "previous_response_id": previous_response_id or None,
        "conversation": {"id": conversation_id} if conversation_id else None,
        "tools": settings.get("tools") or [],
        "tool_choice": settings.get("tool_choice") or "auto",
        "parallel_tool_calls": False,
        "truncation": settings.get("truncation") or "disabled",
        "text": {"format": {"type": "text"}},
        "store": settings.get("store", True),
        "usage": usage,
        "error": error,
        "incomplete_details": incomplete,
        # Extension: history items left out to fit the model's context (truncation "auto").
        "truncated_input_items": settings.get("truncated_input_items", 0),
    }


async def prepare(
    request: TurnRequest,
    *,
    upstream: ChatUpstream,
    embedders: Embedders,
    store: Store,
    deadlines: Deadlines,
) -> Turn:
    """Everything that can fail because of the request, before any event is sent."""
    history: list[ChatItem] = []
    if request.conversation_id or request.previous_response_id:
        reply = await store.GetHistory(
            store_pb2.GetHistoryRequest(
                conversation_id=request.conversation_id,
                previous_response_id=request.previous_response_id,
            )
        )
        history = [stored(item) for item in reply.items]
    passages: list[Passage] = []
    queries: list[str] = []
    searched = None
    if request.tools:
        queries = [_query(request.inputs)]
        passages = await _file_search(request.tools, queries[0], embedders, store, deadlines)
        searched = ChatItem(
            "file_search_call",
            body={
                "queries": queries,
                "results": [passage.result() for passage in passages],
            },
        )
    settings_ = upstream.settings
    reply_tokens = request.max_output_tokens or settings_.max_output_tokens
    prompt = context.build(
        instructions=request.instructions,
        history=history,
        inputs=request.inputs,
        passages=passages,
        budget=max(0, settings_.context_tokens - reply_tokens),
        truncation=request.truncation,
    )
    return Turn(
        request=request,
        id="resp_" + secrets.token_hex(24),
        created_at=time.time(),
        prompt=prompt,
        queries=queries,
        upstream=upstream,
        store=store,
        searched=searched,
    )


def _query(inputs: Sequence[ChatItem]) -> str:
    """The search query: the text of the last user message of the input."""
    for item in reversed(inputs):
        if item.type == "message" and item.role == "user" and item.text.strip():
            return item.text.strip()[:4000]
    raise errors.InvalidRequest(
        "file_search needs a user message in 'input' to search for", param="input"
    )


async def _file_search(
    tools: Sequence[FileSearchTool],
    query: str,
    embedders: Embedders,
    store: Store,
    deadlines: Deadlines,
) -> list[Passage]:
    asked = [
        Search(
            store_id,
            [query],
            tool.max_num_results,
            DEFAULT_SEARCH_MODE,
            tool.score_threshold,
            tool.filter,
        )
        for tool in tools
        for store_id in tool.vector_store_ids
    ]
    # One embedding of the query per model for every store (lexical where it is down).
    found = await search_many(embedders, store, asked, deadlines)
    hits = [hit for result in found for hit in result.hits]
    limit = max(tool.max_num_results for tool in tools)
    best = sorted(hits, key=lambda hit: hit.score, reverse=True)[:limit]
    return [
        Passage(
            n,
            hit.file_id,
            hit.filename,
            hit.text,
            round(float(hit.score), 6),
            attributes_python(hit.attributes),
        )
        for n, hit in enumerate(best, start=1)
    ]
