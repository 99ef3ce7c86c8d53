"""One turn of the Responses API: history, tools, the upstream model, the events a streaming
client sees, and the record of the whole turn. Plain asyncio, no web framework.

`prepare` does everything that can fail because of the request (unknown conversation or
vector store, a context too long, a function result that answers no call) before a single
event is sent, so those stay HTTP errors; `Turn.events` then yields OpenAI's stream events in
order and records the turn when it ends: completed, incomplete (the reply was cut off:
max_output_tokens, or the client went away), cancelled (a background turn), or failed (the
upstream failed: the user's input and a failed response are kept).

A turn is one or more rounds with the upstream. The model's text becomes a message item; its
calls of the client's functions become function_call items and end the turn (the client
runs them and sends their output in its next request); its calls of file_search are run
here, shown as file_search_call items, and handed back to it in another round, up to
`max_tool_calls` and MAX_SEARCHES.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.vocabulary import DEFAULT_SEARCH_MODE
from services.gateway import errors
from services.gateway.attributes import attributes_python
from services.gateway.chat import context
from services.gateway.chat.context import Passage
from services.gateway.chat.items import HEAD, ChatItem, check_calls, stored
from services.gateway.chat.record import in_background, record, usage
from services.gateway.chat.response import response_object, settings
from services.gateway.chat.tools import FILE_SEARCH, FileSearchTool, Tools, search_queries
from services.gateway.chat.upstream import ChatUpstream
from services.gateway.clients import Store
from services.gateway.embedders import Embedders
from services.gateway.search import Deadlines, Search, search_many
from services.pb import store_pb2

log = logging.getLogger(__name__)

RESULTS = "file_search_call.results"
LOGPROBS = "message.output_text.logprobs"
# file_search calls in one turn at most, whatever max_tool_calls allows.
MAX_SEARCHES = 4

Event = dict[str, Any]


@dataclass(frozen=True)
class TurnRequest:
    model: str
    inputs: list[ChatItem]
    instructions: str | None = None
    previous_response_id: str = ""
    conversation_id: str = ""
    store: bool = True
    tools: Tools = field(default_factory=Tools)
    include: list[str] = field(default_factory=list)
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    truncation: str = "disabled"
    metadata: dict[str, str] = field(default_factory=dict)
    # OpenAI's `text`: the answer's format, echoed.
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    reasoning: dict[str, Any] | None = None
    top_logprobs: int | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    background: bool = False


@dataclass
class _Call:
    """A tool call the model is making in this round."""

    call_id: str
    name: str
    hosted: bool
    arguments: str = ""
    # The function_call output item (a call of the client's function).
    item: dict[str, Any] | None = None
    index: int = -1


@dataclass
class _Round:
    """What one upstream reply is making: at most one open message, and tool calls."""

    message: dict[str, Any] | None = None
    index: int = -1
    finish: str = ""
    reasoning: str = ""
    wrote: bool = False
    calls: dict[int, _Call] = field(default_factory=dict)


@dataclass
class Turn:
    """A prepared turn: its id, the prompt, the file_search call already made (when the
    upstream does not call tools)."""

    request: TurnRequest
    id: str
    created_at: float
    prompt: context.Prompt
    upstream: ChatUpstream
    store: Store
    embedders: Embedders
    deadlines: Deadlines
    # The model drives file_search (the upstream calls tools).
    hosted: bool = False
    searched: ChatItem | None = None
    sequence: int = 0
    outputs: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    status: str = "in_progress"
    error: dict[str, Any] | None = None
    incomplete: dict[str, Any] | None = None
    recorded: bool = False
    failure: errors.ApiError | None = None
    # Why a background turn was stopped: "cancelled", "deleted" (nothing is recorded), or
    # "shutdown" (the gateway stops: it ends as failed); "" for a turn whose client went away.
    stop: str = ""
    # Every passage the model read in this turn, numbered for citations.
    passages: list[Passage] = field(default_factory=list)
    # file_search results by item id: stored whether or not the response shows them.
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    search_id: str = field(default_factory=lambda: "fs_" + secrets.token_hex(16))

    def __post_init__(self) -> None:
        self.messages = list(self.prompt.messages)
        self.passages = list(self.prompt.passages)
        if self.request.background:
            self.status = "queued"

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
            if self.status == "queued":
                yield self._event("response.queued", response=self.response())
                self.status = "in_progress"
            yield self._event("response.in_progress", response=self.response())
            for event in self._search_events():
                yield event
            async with contextlib.aclosing(self._rounds(stream)) as rounds:
                async for event in rounds:
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
            if self.stop == "deleted":
                self.recorded = True
            if not self.recorded and self.status in ("queued", "in_progress"):
                # The client went away mid-reply, or a background turn was stopped: keep what
                # was made, as incomplete (cancelled; failed at shutdown).
                if self.stop == "cancelled":
                    self.status = "cancelled"
                elif self.stop == "shutdown":
                    self.status = "failed"
                    self.error = {
                        "code": "server_error",
                        "message": "the gateway stopped during this turn; send it again",
                    }
                else:
                    self.status = "incomplete"
                    self.incomplete = {"reason": "client_disconnected"}
                for item in self.outputs:
                    if item["status"] in ("in_progress", "searching"):
                        item["status"] = "incomplete"
                in_background(self._record())

    def _search_events(self) -> Iterator[Event]:
        """The file_search ragd ran before the model (an upstream that does not call tools)."""
        if self.searched is None:
            return
        body = self.searched.body
        item = self._search_item(self.search_id, body["queries"])
        self.results[self.search_id] = body["results"]
        yield from self._search_started(item)
        yield from self._search_done(item)

    def _search_item(self, item_id: str, queries: list[str]) -> dict[str, Any]:
        item = {
            "id": item_id,
            "type": "file_search_call",
            "status": "in_progress",
            "queries": queries,
            "results": None,
        }
        self.outputs.append(item)
        return item

    def _search_started(self, item: dict[str, Any]) -> Iterator[Event]:
        index = self.outputs.index(item)
        yield self._event("response.output_item.added", output_index=index, item=dict(item))
        for phase in ("in_progress", "searching"):
            yield self._event(
                f"response.file_search_call.{phase}", output_index=index, item_id=item["id"]
            )

    def _search_done(self, item: dict[str, Any]) -> Iterator[Event]:
        index = self.outputs.index(item)
        item["status"] = "completed"
        if RESULTS in self.request.include:
            item["results"] = self.results[item["id"]]
        yield self._event(
            "response.file_search_call.completed", output_index=index, item_id=item["id"]
        )
        yield self._event("response.output_item.done", output_index=index, item=dict(item))

    async def _rounds(self, stream: bool) -> AsyncGenerator[Event]:
        tools = self.request.tools
        limit = min(MAX_SEARCHES, tools.max_calls or MAX_SEARCHES)
        searches, first = 0, True
        while True:
            offered = tools.offered(self.hosted and searches < limit)
            if not self.upstream.settings.tools:
                offered = []
            body = self._body(offered, tools.upstream_choice(first) if offered else None)
            current = _Round()
            async with contextlib.aclosing(self._round(body, stream, current)) as round_events:
                async for event in round_events:
                    yield event
            hosted = [call for call in current.calls.values() if call.hosted]
            if hosted:
                async with contextlib.aclosing(self._run_searches(hosted)) as found:
                    async for event in found:
                        yield event
                searches += len(hosted)
            cut = current.finish == "length"
            client_calls = len(hosted) < len(current.calls)
            if cut or client_calls or not hosted:
                self.status = "incomplete" if cut else "completed"
                if cut:
                    self.incomplete = {"reason": "max_output_tokens"}
                if not current.wrote and not cut:
                    for event in self._empty_answer(current):
                        yield event
                return
            first = False

    def _body(self, offered: list[dict[str, Any]], choice: Any) -> dict[str, Any]:
        request, upstream = self.request, self.upstream
        params = {
            "model": request.model,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_output_tokens or upstream.settings.max_output_tokens,
        }
        body = upstream.body(self.messages, params)
        if offered:
            body["tools"] = offered
            body["tool_choice"] = choice
            body["parallel_tool_calls"] = request.tools.parallel
        wanted = request.text["format"]
        if wanted["type"] == "json_object":
            body["response_format"] = {"type": "json_object"}
        elif wanted["type"] == "json_schema":
            fields = ("name", "schema", "strict", "description")
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {key: wanted[key] for key in fields if key in wanted},
            }
        if request.text.get("verbosity"):
            body["verbosity"] = request.text["verbosity"]
        if request.reasoning and request.reasoning.get("effort"):
            body["reasoning_effort"] = request.reasoning["effort"]
        if request.top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = request.top_logprobs
        for name in ("user", "safety_identifier", "prompt_cache_key"):
            if getattr(request, name):
                body[name] = getattr(request, name)
        return body

    async def _round(
        self, body: dict[str, Any], stream: bool, current: _Round
    ) -> AsyncGenerator[Event]:
        """One upstream reply, streamed or whole, as output items and their events."""
        chunks = self.upstream.stream(body) if stream else self._whole(body)
        async with contextlib.aclosing(chunks) as pieces:
            async for chunk in pieces:
                if chunk.get("usage"):
                    self._count(chunk["usage"])
                for choice in chunk.get("choices") or []:
                    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                        continue
                    current.finish = str(choice.get("finish_reason") or current.finish)
                    delta = choice.get("delta") or {}
                    current.reasoning += str(delta.get("reasoning_content") or "")
                    piece = str(delta.get("content") or "")
                    logprobs = (choice.get("logprobs") or {}).get("content") or []
                    if piece or logprobs:
                        for event in self._text(current, piece, logprobs):
                            yield event
                    for call in delta.get("tool_calls") or []:
                        if isinstance(call, dict):
                            for event in self._call_delta(current, call):
                                yield event
        for event in self._close(current):
            yield event

    async def _whole(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any]]:
        """A whole completion as one chunk of a stream (one path for both)."""
        whole = await self.upstream.complete(body)
        choice = whole["choices"][0]
        message = dict(choice.get("message") or {})
        calls = message.get("tool_calls") or []
        message["tool_calls"] = [
            {"index": index, **call} for index, call in enumerate(calls) if isinstance(call, dict)
        ]
        yield {
            "usage": whole.get("usage"),
            "choices": [
                {
                    "index": 0,
                    "delta": message,
                    "finish_reason": choice.get("finish_reason"),
                    "logprobs": choice.get("logprobs"),
                }
            ],
        }

    def _count(self, raw: dict[str, Any]) -> None:
        """Token usage summed over the turn's rounds."""
        added = usage(raw)
        if not self.usage:
            self.usage = added
            return
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            self.usage[key] += added[key]
        for details, name in (
            ("input_tokens_details", "cached_tokens"),
            ("output_tokens_details", "reasoning_tokens"),
        ):
            self.usage[details][name] += added[details][name]

    def _text(self, current: _Round, piece: str, logprobs: list[Any]) -> Iterator[Event]:
        if current.message is None:
            item: dict[str, Any] = {
                "id": "msg_" + secrets.token_hex(16),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            current.message, current.index, current.wrote = item, len(self.outputs), True
            self.outputs.append(item)
            yield self._event(
                "response.output_item.added", output_index=current.index, item=dict(item)
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"].append(part)
            yield self._part_event(
                "response.content_part.added", item, current.index, part=dict(part)
            )
        item = current.message
        part = item["content"][0]
        part["text"] += piece
        shown = [_logprob(entry) for entry in logprobs if isinstance(entry, dict)]
        part["logprobs"] += shown
        yield self._part_event(
            "response.output_text.delta", item, current.index, delta=piece, logprobs=shown
        )

    def _close_message(self, current: _Round, status: str) -> Iterator[Event]:
        item, index = current.message, current.index
        if item is None:
            return
        current.message = None
        part = item["content"][0]
        text = part["text"]
        question = _question(self.request.inputs) if self.passages else ""
        part["annotations"] = context.citations(text, self.passages, question)
        item["status"] = status
        yield self._part_event(
            "response.output_text.done", item, index, text=text, logprobs=part["logprobs"]
        )
        for number, annotation in enumerate(part["annotations"]):
            yield self._part_event(
                "response.output_text.annotation.added",
                item,
                index,
                annotation_index=number,
                annotation=annotation,
            )
        yield self._part_event("response.content_part.done", item, index, part=part)
        yield self._event("response.output_item.done", output_index=index, item=item)

    def _call_delta(self, current: _Round, delta: dict[str, Any]) -> Iterator[Event]:
        position = delta.get("index", len(current.calls))
        function = delta.get("function") or {}
        call = current.calls.get(position)
        if call is None:
            yield from self._close_message(current, "completed")
            name = str(function.get("name") or "")
            call = _Call(
                call_id=str(delta.get("id") or "call_" + secrets.token_hex(12)),
                name=name,
                hosted=self.hosted and name == FILE_SEARCH,
            )
            current.calls[position] = call
            current.wrote = True
            if not call.hosted:
                call.item = {
                    "id": "fc_" + secrets.token_hex(16),
                    "type": "function_call",
                    "status": "in_progress",
                    "arguments": "",
                    "call_id": call.call_id,
                    "name": name,
                }
                call.index = len(self.outputs)
                self.outputs.append(call.item)
                yield self._event(
                    "response.output_item.added", output_index=call.index, item=dict(call.item)
                )
        piece = str(function.get("arguments") or "")
        if not piece:
            return
        call.arguments += piece
        if call.item is not None:
            call.item["arguments"] = call.arguments
            yield self._event(
                "response.function_call_arguments.delta",
                item_id=call.item["id"],
                output_index=call.index,
                delta=piece,
            )

    def _close(self, current: _Round) -> Iterator[Event]:
        """The round's items done: its message, the calls of the client's functions, and
        the upstream's reasoning."""
        status = "incomplete" if current.finish == "length" else "completed"
        yield from self._close_message(current, status)
        for call in current.calls.values():
            if call.item is None:
                continue
            call.item["status"] = status
            yield self._event(
                "response.function_call_arguments.done",
                item_id=call.item["id"],
                output_index=call.index,
                name=call.name,
                arguments=call.arguments,
            )
            yield self._event("response.output_item.done", output_index=call.index, item=call.item)
        if current.reasoning:
            # Upstreams that think aloud send it apart from the answer (reasoning_content).
            thought = {
                "id": "rs_" + secrets.token_hex(16),
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": current.reasoning}],
                "status": "completed",
            }
            index = len(self.outputs)
            self.outputs.append(thought)
            for kind in ("response.output_item.added", "response.output_item.done"):
                yield self._event(kind, output_index=index, item=thought)

    def _empty_answer(self, current: _Round) -> Iterator[Event]:
        """A reply with neither text nor calls is still an (empty) assistant message."""
        for event in self._text(current, "", []):
            if event["type"] != "response.output_text.delta":
                yield event
        yield from self._close_message(current, "completed")

    async def _run_searches(self, calls: Sequence[_Call]) -> AsyncGenerator[Event]:
        """The model's file_search calls run here; their results go back to it."""
        self.messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments or "{}"},
                    }
                    for call in calls
                ],
            }
        )
        fallback = _question(self.request.inputs)
        for call in calls:
            item = self._search_item("fs_" + secrets.token_hex(16), [])
            item["queries"] = search_queries(call.arguments, fallback)
            for event in self._search_started(item):
                yield event
            found = await file_search(
                self.request.tools.searches,
                item["queries"],
                self.embedders,
                self.store,
                self.deadlines,
                first=len(self.passages) + 1,
            )
            self.results[item["id"]] = [passage.result() for passage in found]
            room = self._room()
            message, read = context.search_result(call.call_id, found, room)
            self.messages.append(message)
            self.passages += read
            for event in self._search_done(item):
                yield event

    def _room(self) -> int:
        """Tokens the results of one more search may take of the prompt."""
        settings_ = self.upstream.settings
        reply = self.request.max_output_tokens or settings_.max_output_tokens
        budget = max(0, settings_.context_tokens - reply)
        left = budget - context.estimate(self.messages)
        return max(0, min(left, int(budget * context.PASSAGE_SHARE)))

    async def _record(self) -> None:
        """The whole turn in one store transaction (retried for a while if the store is down:
        a kill of the store mid-stream must not lose the turn)."""
        if self.recorded or not self.request.store:
            self.recorded = True
            return
        self.recorded = True
        await record(self.store, self.record_request())

    def record_request(self) -> store_pb2.RecordResponseRequest:
        return store_pb2.RecordResponseRequest(
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
            outputs=[self._stored(item).message() for item in self.outputs],
        )

    def _stored(self, item: dict[str, Any]) -> ChatItem:
        body = {key: value for key, value in item.items() if key not in HEAD}
        if item["type"] == "file_search_call":
            # Stored with its results, whether or not this response showed them.
            body = {"queries": item["queries"], "results": self.results.get(item["id"])}
        return ChatItem(
            item["type"], str(item.get("role") or ""), item["status"], body, id=item["id"]
        )


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
    check_calls(history, request.inputs)
    searches = request.tools.searches
    hosted = bool(searches) and upstream.settings.tools and request.tools.choice.mode != "none"
    passages: list[Passage] = []
    searched = None
    if hosted:
        # An unknown vector store is a 404 now, not a failure in the middle of the turn.
        await asyncio.gather(
            *(
                store.GetCollection(store_pb2.GetCollectionRequest(id=store_id))
                for tool in searches
                for store_id in tool.vector_store_ids
            )
        )
    elif searches and request.tools.choice.mode != "none":
        queries = [_query(request.inputs)]
        passages = await file_search(searches, queries, embedders, store, deadlines)
        searched = ChatItem(
            "file_search_call",
            body={"queries": queries, "results": [passage.result() for passage in passages]},
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
        upstream=upstream,
        store=store,
        embedders=embedders,
        deadlines=deadlines,
        hosted=hosted,
        searched=searched,
    )


def _question(inputs: Sequence[ChatItem]) -> str:
    """The text of the last user message of the input ('' if it has none)."""
    for item in reversed(inputs):
        if item.type == "message" and item.role == "user" and item.text.strip():
            return item.text.strip()[:4000]
    return ""


def _query(inputs: Sequence[ChatItem]) -> str:
    """The search query when ragd searches before the model: the user's last message."""
    question = _question(inputs)
    if not question:
        raise errors.InvalidRequest(
            "file_search needs a user message in 'input' to search for", param="input"
        )
    return question


async def file_search(
    tools: Sequence[FileSearchTool],
    queries: list[str],
    embedders: Embedders,
    store: Store,
    deadlines: Deadlines,
    first: int = 1,
) -> list[Passage]:
    """The best passages for the queries over the tools' vector stores, numbered from
    `first`."""
    asked = [
        Search(
            store_id,
            queries,
            tool.max_num_results,
            DEFAULT_SEARCH_MODE,
            tool.score_threshold,
            tool.filter,
        )
        for tool in tools
        for store_id in tool.vector_store_ids
    ]
    # One embedding of the queries per model for every store (lexical where it is down).
    found = await search_many(embedders, store, asked, deadlines)
    best_of: dict[tuple[str, str], Any] = {}
    for result in found:
        for hit in result.hits:
            key = (hit.file_id, hit.text)
            if key not in best_of or hit.score > best_of[key].score:
                best_of[key] = hit
    limit = max(tool.max_num_results for tool in tools)
    best = sorted(best_of.values(), key=lambda hit: hit.score, reverse=True)[:limit]
    return [
        Passage(
            n,
            hit.file_id,
            hit.filename,
            hit.text,
            round(float(hit.score), 6),
            attributes_python(hit.attributes),
        )
        for n, hit in enumerate(best, start=first)
    ]
