"""One turn of the Responses API: history, tools, the upstream model, the events a streaming
client sees, and the record of the whole turn. Plain asyncio, no web framework.

`prepare` does everything that can fail because of the request (unknown conversation or
vector store, a context too long, a function result that answers no call) before a single
event is sent, so those stay HTTP errors; `Turn.events` then yields OpenAI's stream events in
order and records the turn when it ends: completed, incomplete (the reply was cut off:
max_output_tokens, or the client went away), cancelled (a background turn), or failed (the
upstream failed: a failed response keeps the user's input, out of the conversation, so that a
retried request is not recorded twice).

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

from services.common.vocabulary import (
    CANCELLED,
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    INCOMPLETE,
    PENDING_RESPONSE_STATUSES,
    QUEUED,
)
from services.gateway import errors, objects_chat
from services.gateway.chat import context
from services.gateway.chat.context import Passage
from services.gateway.chat.events import (
    Error,
    Event,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseQueued,
)
from services.gateway.chat.items import ChatItem, check_calls, stored
from services.gateway.chat.outputs import Call, Outputs, Round
from services.gateway.chat.record import in_background, record
from services.gateway.chat.retrieval import file_search, question, user_query
from services.gateway.chat.settings import Failure, Incomplete, Usage, settings
from services.gateway.chat.tools import FILE_SEARCH, Tools, search_queries
from services.gateway.chat.upstream import ChatUpstream
from services.gateway.clients import Store
from services.gateway.embedders import Embedders
from services.gateway.search import Deadlines
from services.pb import store_pb2

log = logging.getLogger(__name__)

LOGPROBS = "message.output_text.logprobs"
# file_search calls in one turn at most, whatever max_tool_calls allows.
MAX_SEARCHES = 4


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
    outputs: Outputs = field(init=False)
    usage: Usage | None = None
    status: str = IN_PROGRESS
    error: Failure | None = None
    incomplete: Incomplete | None = None
    recorded: bool = False
    failure: errors.ApiError | None = None
    # Why a background turn was stopped: "cancelled", "deleted" (nothing is recorded; a
    # streamed turn deleted goes on to its client, unrecorded), or "shutdown" (the gateway
    # stops: it ends as failed); "" for a turn whose client went away.
    stop: str = ""
    # Every passage the model read in this turn, numbered for citations.
    passages: list[Passage] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    completed_at: float | None = None
    # The first round's limit on the reply, echoed as max_output_tokens.
    reply_tokens: int = 0
    # The store holds the response while the turn runs (chat/lease.py).
    started: bool = False

    def __post_init__(self) -> None:
        self.messages = list(self.prompt.messages)
        self.reply_tokens = self._reply_limit()
        self.passages = list(self.prompt.passages)
        self.outputs = Outputs(self.request.include, FILE_SEARCH if self.hosted else "")
        if self.request.background:
            self.status = QUEUED

    def response(self) -> dict[str, Any]:
        return objects_chat.response(
            id=self.id,
            created_at=self.created_at,
            status=self.status,
            model=self.request.model,
            settings=settings(self.request, self.prompt.dropped_items, self.reply_tokens),
            previous_response_id=self.request.previous_response_id,
            conversation_id=self.request.conversation_id,
            outputs=self.outputs.items,
            usage=self.usage,
            error=self.error,
            incomplete=self.incomplete,
            completed_at=self.completed_at,
        )

    async def events(self, stream: bool) -> AsyncGenerator[Event]:
        """OpenAI's stream events of this turn, and the turn recorded when it ends. A failure
        of the upstream ends the stream with `error` and `response.failed`, and is kept in
        `failure` for a caller that does not stream."""
        outputs = self.outputs
        try:
            yield ResponseCreated(
                type="response.created",
                sequence_number=outputs.number(),
                response=self.response(),
            )
            if self.status == QUEUED:
                yield ResponseQueued(
                    type="response.queued",
                    sequence_number=outputs.number(),
                    response=self.response(),
                )
                self.status = IN_PROGRESS
            yield ResponseInProgress(
                type="response.in_progress",
                sequence_number=outputs.number(),
                response=self.response(),
            )
            for event in self._search_events():
                yield event
            async with contextlib.aclosing(self._rounds(stream)) as rounds:
                async for event in rounds:
                    yield event
            await self._record()
            if self.status == COMPLETED:
                yield ResponseCompleted(
                    type="response.completed",
                    sequence_number=outputs.number(),
                    response=self.response(),
                )
            else:
                yield ResponseIncomplete(
                    type="response.incomplete",
                    sequence_number=outputs.number(),
                    response=self.response(),
                )
        except errors.ApiError as error:
            self.failure = error
            self.status = FAILED
            self.error = Failure(code=error.code or "server_error", message=error.message)
            # A reply cut off by a failure is not kept: the input and the failure are.
            self.outputs.items = [item for item in self.outputs.items if item["type"] != "message"]
            await self._record()
            shown = objects_chat.response_error(error.code, error.message)
            yield Error(
                type="error",
                sequence_number=outputs.number(),
                param=error.param,
                code=shown["code"],
                message=shown["message"],
            )
            yield ResponseFailed(
                type="response.failed",
                sequence_number=outputs.number(),
                response=self.response(),
            )
        finally:
            if self.stop == "deleted":
                self.recorded = True
            if not self.recorded and self.status in PENDING_RESPONSE_STATUSES:
                # The client went away mid-reply, or a background turn was stopped: keep what
                # was made, as incomplete (cancelled; failed at shutdown).
                if self.stop == "cancelled":
                    self.status = CANCELLED
                elif self.stop == "shutdown":
                    self.status = FAILED
                    self.error = Failure(
                        code="server_error",
                        message="the gateway stopped during this turn; send it again",
                    )
                else:
                    self.status = INCOMPLETE
                    self.incomplete = Incomplete(reason="client_disconnected")
                self.outputs.interrupted()
                in_background(self._record())

    def _search_events(self) -> Iterator[Event]:
        """The file_search ragd ran before the model (an upstream that does not call tools)."""
        if self.searched is None:
            return
        body = self.searched.body
        item = self.outputs.search(body["queries"])
        yield from self.outputs.search_started(item)
        yield from self.outputs.search_done(item, body["results"], body["ragd_degraded"])

    async def _rounds(self, stream: bool) -> AsyncGenerator[Event]:
        tools = self.request.tools
        limit = min(MAX_SEARCHES, tools.max_calls or MAX_SEARCHES)
        searches, first = 0, True
        while True:
            offered = tools.offered(self.hosted and searches < limit)
            if not self.upstream.settings.tools:
                offered = []
            body = self._body(offered, tools.upstream_choice(first) if offered else None)
            current = Round()
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
                self.status = INCOMPLETE if cut else COMPLETED
                if cut:
                    self.incomplete = Incomplete(reason="max_output_tokens")
                if not current.wrote and not cut:
                    for event in self.outputs.empty_answer(current):
                        yield event
                return
            first = False

    def _body(self, offered: list[dict[str, Any]], choice: Any) -> dict[str, Any]:
        request, upstream = self.request, self.upstream
        params = {
            "model": request.model,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": self._reply_limit(),
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
        self, body: dict[str, Any], stream: bool, current: Round
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
                        for event in self.outputs.text(current, piece, logprobs):
                            yield event
                    for call in delta.get("tool_calls") or []:
                        if isinstance(call, dict):
                            cited = self._cited()
                            for event in self.outputs.call_delta(current, call, *cited):
                                yield event
        for event in self.outputs.close(current, *self._cited()):
            yield event

    def _cited(self) -> tuple[list[Passage], str]:
        """What citations are matched against: the passages read, and the question."""
        return self.passages, question(self.request.inputs) if self.passages else ""

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
        added = Usage.upstream(raw)
        self.usage = added if self.usage is None else self.usage + added

    async def _run_searches(self, calls: Sequence[Call]) -> AsyncGenerator[Event]:
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
        fallback = question(self.request.inputs)
        for call in calls:
            item = self.outputs.search(search_queries(call.arguments, fallback))
            for event in self.outputs.search_started(item):
                yield event
            found, degraded = await file_search(
                self.request.tools.searches,
                item["queries"],
                self.embedders,
                self.store,
                self.deadlines,
                first=len(self.passages) + 1,
            )
            message, read = context.search_result(call.call_id, found, self._room())
            self.messages.append(message)
            self.passages += read
            results = [passage.result() for passage in found]
            for event in self.outputs.search_done(item, results, degraded):
                yield event

    def _reply_limit(self) -> int:
        """The request's max_output_tokens, or RAGD_CHAT_DEFAULT_OUTPUT_TOKENS, or else what
        the upstream's context leaves after the prompt (as an upstream does by itself), never
        less than the reserve (RAGD_CHAT_MAX_OUTPUT_TOKENS, which the prompt leaves free)."""
        settings_ = self.upstream.settings
        if self.request.max_output_tokens or settings_.default_output_tokens:
            return self.request.max_output_tokens or settings_.default_output_tokens
        # The prompt's size is estimated: a tenth more keeps an upstream that refuses a
        # prompt plus reply over its context (vLLM) from refusing this one.
        prompt = int(context.estimate(self.messages) * 1.1)
        return max(settings_.max_output_tokens, settings_.context_tokens - prompt)

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
        self.completed_at = self.completed_at or time.time()
        # A response deleted while its turn ran stays deleted.
        if self.recorded or not self.request.store or self.stop == "deleted":
            self.recorded = True
            return
        self.recorded = True
        await record(self.store, self.record_request())

    def record_request(self) -> store_pb2.RecordResponseRequest:
        return store_pb2.RecordResponseRequest(
            id=self.id,
            created_at=self.created_at,
            completed_at=self.completed_at or time.time(),
            status=self.status,
            model=self.request.model,
            settings_json=settings(
                self.request, self.prompt.dropped_items, self.reply_tokens
            ).json_text(),
            usage_json=self.usage.json_text() if self.usage else "{}",
            error_json=json.dumps(self.error or self.incomplete or {}),
            conversation_id=self.request.conversation_id,
            previous_response_id=self.request.previous_response_id,
            inputs=[item.message() for item in self.request.inputs],
            outputs=[item.message() for item in self.outputs.stored()],
            started=self.started,
        )


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
                store.GetVectorStore(store_pb2.GetVectorStoreRequest(id=vector_store_id))
                for tool in searches
                for vector_store_id in tool.vector_store_ids
            )
        )
    elif searches and request.tools.choice.mode != "none":
        queries = [user_query(request.inputs)]
        passages, degraded = await file_search(searches, queries, embedders, store, deadlines)
        results = [passage.result() for passage in passages]
        searched = ChatItem(
            "file_search_call",
            body={"queries": queries, "results": results, "ragd_degraded": degraded},
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
