"""The Responses API: a model turn with file_search over ragd's vector stores and memory of
the conversation, answered by the operator's chat upstream; stored responses read back."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.common.vocabulary import PENDING_RESPONSE_STATUSES
from services.gateway import errors, objects, objects_chat
from services.gateway.audit import AUDIT_INFO
from services.gateway.chat.background import BackgroundRuns, replayed
from services.gateway.chat.events import Event
from services.gateway.chat.outputs import RESULTS
from services.gateway.chat.requests import ResponseCreate
from services.gateway.chat.settings import ResponseSettings
from services.gateway.chat.turn import prepare
from services.gateway.chat.upstream import ChatUpstream
from services.gateway.operations import INCLUDE_PARAM, operation, paging_params, query_param
from services.gateway.params import json_body, paging
from services.gateway.requests import parse
from services.gateway.routes import services
from services.gateway.routes.conversations import includes_results
from services.gateway.search import Deadlines
from services.gateway.state import Services
from services.gateway.streams import ClosingStream, server_sent_events
from services.pb import store_pb2

# A request's input may carry files and images inline (base64).
MAX_REQUEST_BYTES = 16 << 20


def upstream(deps: Services) -> ChatUpstream:
    if deps.chat is None:
        raise errors.NotImplementedHere(
            "no chat model is configured: set RAGD_CHAT_BASE_URL to an OpenAI-compatible "
            "endpoint (e.g. http://127.0.0.1:8080/v1; RAGD_CHAT_MODEL names its model). "
            "Conversations work without one.",
            code="chat_upstream_not_configured",
        )
    return deps.chat


@operation(
    "Create a model response (function tools, file_search over vector stores, structured "
    "output, background runs; history kept)",
    "Response",
    ResponseCreate,
    returns={"response_id": "/id"},
    events=True,
)
async def create_response(request: Request) -> Response:
    deps = services(request)
    body = parse(ResponseCreate, await json_body(request, limit=MAX_REQUEST_BYTES))
    stream = body.stream
    settings = deps.chat.settings if deps.chat else None
    asked = body.turn(settings.model if settings else "", settings is None or settings.tools)
    if settings is not None:
        asked = replace(asked, model=settings.resolve(asked.model))
    # The audit entry names the vector stores the turn may search.
    searched = [
        vector_store_id
        for tool in asked.tools.searches
        for vector_store_id in tool.vector_store_ids
    ]
    if searched:
        request.scope[AUDIT_INFO] = {"vector_store_id": ",".join(dict.fromkeys(searched))}
    chat = upstream(deps)
    config = deps.config
    turn = await prepare(
        asked,
        upstream=chat,
        embedders=deps.embedders,
        store=deps.store,
        deadlines=Deadlines(config.search_embed_timeout, config.search_store_timeout),
    )
    if asked.background:
        runs = _runs(deps)
        await runs.start(turn)
        if stream:
            # The client follows the run; leaving stops following, not the run.
            run = runs.local(turn.id)
            assert run is not None
            return ClosingStream(server_sent_events(runs.follow(run, -1)), "text/event-stream")
        return JSONResponse(turn.response())
    if stream:
        # A stored response is readable (in progress) while it streams, as OpenAI's is.
        events = _runs(deps).leases.streamed(turn) if asked.store else turn.events(stream=True)
        return ClosingStream(server_sent_events(events), "text/event-stream")
    async for _ in turn.events(stream=False):
        pass
    if turn.failure is not None:
        # The failed response is stored; the client sees the upstream's failure as an error.
        raise turn.failure
    return JSONResponse(turn.response())


def _include(request: Request) -> list[str]:
    return [RESULTS] if includes_results(request) else []


def _runs(deps: Services) -> BackgroundRuns:
    upstream(deps)  # the same 501 without a chat model
    assert deps.background is not None
    return deps.background


@operation(
    "Retrieve a response (stream=true: its events after starting_after)",
    "Response",
    query=[
        INCLUDE_PARAM,
        query_param("stream", {"type": "boolean"}, "the response's events, followed to its end"),
        query_param(
            "starting_after",
            {"type": "integer", "minimum": 0},
            "with stream: the sequence number after which events start",
        ),
    ],
)
async def get_response(request: Request) -> Response:
    """A response; with `stream=true`, its events after `starting_after` (a background run's
    own, followed to its end, else rebuilt from the record)."""
    deps = services(request)
    response_id = request.path_params["response_id"]
    streamed = request.query_params.get("stream", "false").lower()
    if streamed not in ("true", "false"):
        raise errors.InvalidRequest("'stream' must be true or false", param="stream")
    after = _starting_after(request)
    run = deps.background.local(response_id) if deps.background is not None else None
    if streamed == "true" and run is not None:
        assert deps.background is not None
        events = deps.background.follow(run, after)
        return ClosingStream(server_sent_events(events), "text/event-stream")
    record = await deps.store.GetResponse(store_pb2.ResponseRef(id=response_id))
    shown = objects_chat.stored_response(record, _include(request))
    if streamed == "false":
        return JSONResponse(shown)
    if record.status in PENDING_RESPONSE_STATUSES:
        raise errors.Conflict(
            f"response {response_id!r} is under way and its events are not kept here (a "
            "background one's are on the gateway running it, a streamed one's go to its own "
            "client); poll GET /v1/responses/{id} until it ends, then stream it"
        )

    async def rebuilt() -> AsyncGenerator[Event]:
        for event in replayed(shown, after):
            yield event

    return ClosingStream(server_sent_events(rebuilt()), "text/event-stream")


def _starting_after(request: Request) -> int:
    raw = request.query_params.get("starting_after")
    if raw is None:
        return -1
    try:
        value = int(raw)
    except ValueError:
        value = -2
    if value < 0:
        raise errors.InvalidRequest(
            "'starting_after' must be a sequence number (0 or more)", param="starting_after"
        )
    return value


@operation("Cancel a background response", "Response")
async def cancel_response(request: Request) -> JSONResponse:
    """Ends a background response under way as cancelled; OpenAI refuses to cancel one that
    was not run in the background."""
    deps = services(request)
    response_id = request.path_params["response_id"]
    record = await deps.store.GetResponse(store_pb2.ResponseRef(id=response_id))
    if not ResponseSettings.read(record.settings_json).background:
        raise errors.InvalidRequest(
            f"response {response_id!r} was not run in the background: only background "
            "responses can be cancelled",
            param="response_id",
        )
    record = await _runs(deps).cancel(response_id)
    return JSONResponse(objects_chat.stored_response(record, _include(request)))


@operation("Delete a response", "ResponseDeleted")
async def delete_response(request: Request) -> JSONResponse:
    reply = await services(request).store.DeleteResponse(
        store_pb2.ResponseRef(id=request.path_params["response_id"])
    )
    return JSONResponse(objects_chat.deleted(reply.id, "response.deleted"))


@operation(
    "List a response's input items",
    "ItemList",
    query=[*paging_params(before=False), INCLUDE_PARAM],
)
async def list_input_items(request: Request) -> JSONResponse:
    reply = await services(request).store.ListResponseInputItems(
        store_pb2.ListResponseInputItemsRequest(
            response_id=request.path_params["response_id"],
            **paging(request, before=False),
        )
    )
    results = includes_results(request)
    data = [objects_chat.item(item, results) for item in reply.items]
    return JSONResponse(objects.page(data, reply.has_more))
