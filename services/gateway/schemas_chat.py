"""JSON Schemas of the conversations, responses and chat-completions objects (openapi.py),
and of the items a request may carry (kept as sent: chat/items.py checks them). The request
bodies are models (conversation_bodies.py, chat/requests.py)."""

from __future__ import annotations

from services.common import vocabulary as v
from services.gateway.schemas import (
    BOOL,
    COUNT,
    NUMBER,
    STRING,
    Schema,
    list_of,
    nullable,
    obj,
    ref,
)

_PART = {
    "description": "a content part: input_text, output_text, input_file, input_image, ... "
    "(parts of other types are kept as sent)",
    "type": "object",
    "required": ["type"],
    "properties": {"type": STRING, "text": STRING},
}
INPUT_ITEM = {
    "description": "a message (the default type), or any other item, kept as sent",
    "type": "object",
    "properties": {
        "type": {"type": "string", "minLength": 1, "default": "message"},
        "role": {"enum": list(v.ROLES)},
        "status": {"enum": list(v.ITEM_STATUSES)},
        "content": {"oneOf": [STRING, {"type": "array", "items": _PART}]},
    },
    "if": {"properties": {"type": {"const": "message"}}},
    "then": {"required": ["role", "content"]},
}
NEW_ITEMS = {"type": "array", "minItems": 1, "maxItems": v.MAX_NEW_ITEMS, "items": INPUT_ITEM}
_RESULT = obj(
    ["file_id", "filename", "score", "text", "attributes"],
    file_id=STRING,
    filename=STRING,
    score=NUMBER,
    text=STRING,
    attributes={"type": "object"},
)
CHAT_SCHEMAS: dict[str, Schema] = {
    "Conversation": obj(
        ["id", "object", "created_at", "metadata"],
        id=STRING,
        object={"const": "conversation"},
        created_at=COUNT,
        metadata={"type": "object", "additionalProperties": STRING},
        title=nullable(STRING),
        last_active_at=COUNT,
        item_count=COUNT,
        turn_count=COUNT,
    ),
    "ConversationList": list_of("Conversation"),
    "ConversationDeleted": obj(
        ["id", "object", "deleted"],
        id=STRING,
        object={"const": "conversation.deleted"},
        deleted=BOOL,
    ),
    "Item": {
        "description": "a message, file_search_call, reasoning or other item",
        "type": "object",
        "required": ["id", "type", "status"],
        "properties": {
            "id": STRING,
            "type": STRING,
            "role": STRING,
            "status": STRING,
            "content": {"oneOf": [STRING, {"type": "array", "items": _PART}]},
            "queries": {"type": "array", "items": STRING},
            "results": nullable({"type": "array", "items": _RESULT}),
            "call_id": STRING,
            "name": STRING,
            "arguments": {"description": "a function call's arguments, JSON", "type": "string"},
            "output": {"description": "a function call's result", "type": ["string", "array"]},
        },
    },
    "ItemList": list_of("Item"),
    "HistorySearchPage": obj(
        ["object", "search_query", "data", "has_more", "mode"],
        object={"const": "list"},
        search_query=STRING,
        data={
            "type": "array",
            "items": obj(
                ["object", "conversation_id", "score", "item"],
                object={"const": "conversation.search_result"},
                conversation_id=STRING,
                response_id=nullable(STRING),
                position=COUNT,
                score={"type": "number", "minimum": 0, "maximum": 1},
                created_at=COUNT,
                item=ref("Item"),
            ),
        },
        has_more=BOOL,
        mode={"enum": list(v.SEARCH_MODES)},
        degraded={
            "description": "the embedder was unavailable: searched lexically",
            "type": "boolean",
        },
    ),
    "Response": obj(
        ["id", "object", "created_at", "status", "model", "output"],
        id=STRING,
        object={"const": "response"},
        created_at=NUMBER,
        status={"enum": list(v.RESPONSE_STATUSES)},
        model=STRING,
        output={"type": "array", "items": ref("Item")},
        previous_response_id=nullable(STRING),
        conversation=nullable(obj(["id"], id=STRING)),
        completed_at=nullable(NUMBER),
        usage=nullable({"type": "object"}),
        error=nullable(
            obj(
                ["code", "message"],
                code={"enum": ["server_error", "rate_limit_exceeded", "invalid_prompt"]},
                message=STRING,
            )
        ),
        incomplete_details=nullable(
            obj(
                ["reason"],
                reason=nullable({"enum": ["max_output_tokens"]}),
                ragd_reason={
                    "description": "ragd extension: why, when OpenAI has no reason for it",
                    "enum": ["client_disconnected"],
                },
            )
        ),
        truncated_input_items={
            "description": "ragd extension: history items left out to fit the model's context",
            "type": "integer",
            "minimum": 0,
        },
    ),
    "ResponseDeleted": obj(
        ["id", "object", "deleted"], id=STRING, object={"const": "response.deleted"}, deleted=BOOL
    ),
    "ChatCompletion": {"description": "the upstream's chat completion", "type": "object"},
}
