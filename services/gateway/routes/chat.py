"""POST /v1/chat/completions: the operator's chat model, and persistence for the clients
that name a conversation (X-Ragd-Conversation)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.gateway import errors
from services.gateway.chat import completions
from services.gateway.chat.requests import ChatCompletionRequest
from services.gateway.operations import operation
from services.gateway.params import check_text, json_body
from services.gateway.requests import parse
from services.gateway.routes import services
from services.gateway.routes.responses import MAX_REQUEST_BYTES, upstream
from services.gateway.streams import ClosingStream
from services.pb import store_pb2

CONVERSATION_HEADER = "X-Ragd-Conversation"
RESPONSE_HEADER = "X-Ragd-Response-Id"


@operation(
    "Chat completion from the chat upstream (recorded with X-Ragd-Conversation)",
    "ChatCompletion",
    ChatCompletionRequest,
    events=True,
)
async def chat_completions(request: Request) -> Response:
    deps = services(request)
    body = await json_body(request, limit=MAX_REQUEST_BYTES)
    # Checked, then passed to the upstream as sent.
    stream = parse(ChatCompletionRequest, body).stream
    conversation = request.headers.get(CONVERSATION_HEADER, "").strip()
    messages: list[dict[str, Any]] = body["messages"]
    if conversation:
        completions.check_recorded(messages)
    chat = upstream(deps)
    body["model"] = chat.settings.resolve(body.get("model"))
    turn = None
    if conversation:
        check_text(conversation, CONVERSATION_HEADER)
        # Unknown conversations are a 404 before the model is asked anything.
        await deps.store.GetConversation(store_pb2.ConversationRef(id=conversation))
        turn = completions.recording(deps.store, conversation, body, messages)
    headers = {RESPONSE_HEADER: turn.id} if turn else {}
    if not stream:
        completion = await completions.complete(chat, body, turn)
        return JSONResponse(completion, headers=headers)
    try:
        reply = await chat.forward(body)
    except errors.ApiError as error:
        if turn is not None:
            await turn.fail(error)
        raise
    response = ClosingStream(completions.relay(reply, turn), "text/event-stream")
    response.headers.update(headers)
    return response
