"""JSON Schemas of the conversations, responses and chat-completions bodies (openapi.py),
with the limits the routes validate with."""

from __future__ import annotations

from services.common import vocabulary as v
from services.gateway.chat.requests import (
    EFFORTS,
    INCLUDABLES,
    MAX_TOP_LOGPROBS,
    SUMMARIES,
    TRUNCATIONS,
    VERBOSITIES,
)
from services.gateway.chat.tools import TOOL_CHOICES
from services.gateway.schemas import (
    BOOL,
    COUNT,
    METADATA,
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
_INPUT_ITEM = {
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
NEW_ITEMS = {"type": "array", "minItems": 1, "maxItems": v.MAX_NEW_ITEMS, "items": _INPUT_ITEM}
_RESULT = obj(
    ["file_id", "filename", "score", "text", "attributes"],
    file_id=STRING,
    filename=STRING,
    score=NUMBER,
    text=STRING,
    attributes={"type": "object"},
)
_FILE_SEARCH = obj(
    ["type", "vector_store_ids"],
    type={"const": "file_search"},
    vector_store_ids={"type": "array", "minItems": 1, "maxItems": 2, "items": STRING},
    max_num_results={"type": "integer", "minimum": 1, "maximum": v.MAX_SEARCH_RESULTS},
    filters=ref("Filter"),
    ranking_options=ref("RankingOptions"),
)

_FUNCTION = obj(
    ["type", "name"],
    type={"const": "function"},
    name={"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
    description=STRING,
    parameters={"description": "a JSON Schema of the arguments", "type": "object"},
    strict=BOOL,
)
_TOOL_CHOICE = {
    "oneOf": [
        {"enum": list(TOOL_CHOICES)},
        obj(["type"], type={"const": "file_search"}),
        obj(["type", "name"], type={"const": "function"}, name=STRING),
        obj(
            ["type", "mode", "tools"],
            type={"const": "allowed_tools"},
            mode={"enum": ["auto", "required"]},
            tools={"type": "array", "items": {"type": "object"}},
        ),
    ]
}
_TEXT = obj(
    format={
        "oneOf": [
            obj(["type"], type={"enum": ["text", "json_object"]}),
            obj(
                ["type", "name", "schema"],
                type={"const": "json_schema"},
                name={"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                schema={"type": "object"},
                strict=BOOL,
                description=STRING,
            ),
        ]
    },
    verbosity={"enum": list(VERBOSITIES)},
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
    "ResponseCreate": obj(
        ["input"],
        model={"type": "string", "maxLength": 256},
        input={
            "oneOf": [
                {"type": "string", "pattern": r"\S"},
                {"type": "array", "minItems": 1, "items": _INPUT_ITEM},
            ]
        },
        instructions=nullable(STRING),
        previous_response_id=STRING,
        conversation={"oneOf": [STRING, obj(["id"], id=STRING)]},
        store={"description": "must stay true with a conversation", "type": "boolean"},
        tools={
            "description": "file_search runs in ragd; function tools go to the model, and its "
            "calls come back as function_call items for the client to run",
            "type": "array",
            "items": {"oneOf": [_FILE_SEARCH, _FUNCTION]},
        },
        tool_choice=_TOOL_CHOICE,
        parallel_tool_calls=BOOL,
        max_tool_calls={"type": "integer", "minimum": 1, "maximum": 1000},
        text=_TEXT,
        reasoning=nullable(
            obj(
                effort=nullable({"enum": list(EFFORTS)}),
                summary=nullable({"enum": list(SUMMARIES)}),
            )
        ),
        top_logprobs={"type": "integer", "minimum": 0, "maximum": MAX_TOP_LOGPROBS},
        user={"type": "string", "maxLength": 256},
        safety_identifier={"type": "string", "maxLength": 64},
        prompt_cache_key={"type": "string", "maxLength": 256},
        background={"description": "answer at once (queued) and run the turn apart", **BOOL},
        include={"type": "array", "items": {"enum": list(INCLUDABLES)}},
        max_output_tokens={"type": "integer", "minimum": 16},
        temperature={"type": "number", "minimum": 0, "maximum": 2},
        top_p={"type": "number", "minimum": 0, "maximum": 1},
        truncation={"enum": list(TRUNCATIONS)},
        metadata=METADATA,
        stream=BOOL,
    )
    | {"not": {"required": ["conversation", "previous_response_id"]}},
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
    "ChatCompletionRequest": {
        "description": "passed to the chat upstream as sent; send the header "
        "X-Ragd-Conversation: <conversation id> to record the turn in a conversation (the "
        f"messages after the last assistant message, at most {v.MAX_NEW_ITEMS})",
        "type": "object",
        "required": ["messages"],
        "properties": {
            "model": STRING,
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "object", "required": ["role"], "properties": {"role": STRING}},
            },
            "stream": BOOL,
        },
    },
    "ChatCompletion": {"description": "the upstream's chat completion", "type": "object"},
}
