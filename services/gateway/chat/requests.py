"""A Responses API request body read into a TurnRequest: every field OpenAI defines that ragd
acts on, validated with OpenAI's limits; fields that change nothing here are accepted as the
SDKs send them."""

from __future__ import annotations

import re
from typing import Any

from services.gateway.chat.items import parse_items
from services.gateway.chat.outputs import RESULTS
from services.gateway.chat.tools import parse as parse_tools
from services.gateway.chat.turn import LOGPROBS, TurnRequest
from services.gateway.errors import invalid
from services.gateway.params import (
    check_text,
    metadata,
    optional_int,
    optional_number,
    optional_str,
)

# OpenAI's includables; only file_search results change what ragd returns.
INCLUDABLES = (
    RESULTS,
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "message.input_image.image_url",
    LOGPROBS,
    "reasoning.encrypted_content",
)
TRUNCATIONS = ("auto", "disabled")
FORMATS = ("text", "json_object", "json_schema")
VERBOSITIES = ("low", "medium", "high")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = ("auto", "concise", "detailed")
MAX_TOP_LOGPROBS = 20
_FORMAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_INSTRUCTIONS_CHARS = 256 * 1024
MAX_OUTPUT_TOKENS = 1 << 20


def turn_request(body: dict[str, Any], default_model: str, can_call: bool = True) -> TurnRequest:
    """`can_call`: the upstream calls tools (function tools pass through to it)."""
    if "input" not in body or body["input"] is None:
        raise invalid("'input' is required", param="input", code="missing_required_parameter")
    inputs = parse_items(body["input"], "input")
    conversation = _conversation(body.get("conversation"))
    previous = optional_str(body, "previous_response_id", "") or ""
    if conversation and previous:
        raise invalid(
            "send 'conversation' or 'previous_response_id', not both", param="conversation"
        )
    store = _flag(body, "store", True)
    if conversation and not store:
        raise invalid(
            "a response in a conversation is stored: drop 'store': false or 'conversation'",
            param="store",
        )
    background = _flag(body, "background", False)
    if background and not store:
        raise invalid("a background response is stored: drop 'store': false", param="background")
    if body.get("prompt") is not None:
        raise invalid(
            "ragd keeps no prompt templates: send 'instructions' and 'input' instead",
            param="prompt",
        )
    tools = parse_tools(
        body.get("tools"),
        body.get("tool_choice"),
        body.get("parallel_tool_calls"),
        body.get("max_tool_calls"),
        can_call,
    )
    include = _include(body.get("include"))
    logprobs = optional_int(body, "top_logprobs", -1, 0, MAX_TOP_LOGPROBS)
    return TurnRequest(
        model=optional_str(body, "model", default_model, 256) or default_model,
        inputs=inputs,
        instructions=optional_str(body, "instructions", None, MAX_INSTRUCTIONS_CHARS),
        previous_response_id=previous,
        conversation_id=conversation,
        store=store,
        tools=tools,
        include=include,
        max_output_tokens=(
            optional_int(body, "max_output_tokens", 0, 16, MAX_OUTPUT_TOKENS) or None
        ),
        temperature=_sampling(body, "temperature", 2.0),
        top_p=_sampling(body, "top_p", 1.0),
        truncation=_choice(body, "truncation", "disabled", TRUNCATIONS),
        metadata=metadata(body),
        text=_text(body.get("text")),
        reasoning=_reasoning(body.get("reasoning")),
        top_logprobs=(logprobs if logprobs >= 0 else (0 if LOGPROBS in include else None)),
        user=optional_str(body, "user", None, 256),
        safety_identifier=optional_str(body, "safety_identifier", None, 64),
        prompt_cache_key=optional_str(body, "prompt_cache_key", None, 256),
        background=background,
    )


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"'{name}' must be a boolean", param=name)
    return value


def _text(raw: Any) -> dict[str, Any]:
    """OpenAI's `text`: the answer's `format` (text, json_object, or json_schema with a name
    and a schema) and `verbosity`, as the response echoes them."""
    if raw is None:
        return {"format": {"type": "text"}}
    if not isinstance(raw, dict):
        raise invalid("'text' must be an object with a 'format'", param="text")
    shown: dict[str, Any] = {"format": {"type": "text"}}
    wanted = raw.get("format")
    if wanted is not None:
        if not isinstance(wanted, dict) or wanted.get("type") not in FORMATS:
            raise invalid(
                f"'text.format.type' must be one of {', '.join(FORMATS)}", param="text.format"
            )
        shown["format"] = _format(wanted)
    verbosity = raw.get("verbosity")
    if verbosity is not None:
        if verbosity not in VERBOSITIES:
            raise invalid(
                f"'text.verbosity' must be one of {', '.join(VERBOSITIES)}",
                param="text.verbosity",
            )
        shown["verbosity"] = verbosity
    return shown


def _format(wanted: dict[str, Any]) -> dict[str, Any]:
    if wanted["type"] != "json_schema":
        return {"type": wanted["type"]}
    name = wanted.get("name")
    if not isinstance(name, str) or not _FORMAT_NAME.fullmatch(name):
        raise invalid(
            "'text.format.name' must be 1-64 letters, digits, underscores or dashes",
            param="text.format.name",
        )
    schema = wanted.get("schema")
    if not isinstance(schema, dict):
        raise invalid("'text.format.schema' must be a JSON Schema object", "text.format.schema")
    strict = wanted.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid("'text.format.strict' must be a boolean", param="text.format.strict")
    shown = {"type": "json_schema", "name": name, "schema": schema, "strict": bool(strict)}
    description = wanted.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise invalid("'text.format.description' must be a string", "text.format")
        shown["description"] = description
    return shown


def _reasoning(raw: Any) -> dict[str, Any] | None:
    """OpenAI's `reasoning`: its effort goes to the upstream as reasoning_effort; the
    upstream's reasoning text comes back as a reasoning item (no summaries are written)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise invalid("'reasoning' must be an object", param="reasoning")
    effort = raw.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise invalid(
            f"'reasoning.effort' must be one of {', '.join(EFFORTS)}", param="reasoning.effort"
        )
    summary = raw.get("summary", raw.get("generate_summary"))
    if summary is not None and summary not in SUMMARIES:
        raise invalid(
            f"'reasoning.summary' must be one of {', '.join(SUMMARIES)}",
            param="reasoning.summary",
        )
    return {"effort": effort, "summary": summary}


def _conversation(raw: Any) -> str:
    """OpenAI's `conversation`: an id, or an object with one."""
    if raw is None:
        return ""
    if isinstance(raw, dict):
        raw = raw.get("id")
    if not isinstance(raw, str) or not raw:
        raise invalid("'conversation' must be a conversation id or {'id': ...}", "conversation")
    return check_text(raw, "conversation", 256)


def _include(raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(value, str) for value in raw):
        raise invalid("'include' must be an array of strings", param="include")
    for value in raw:
        if value not in INCLUDABLES:
            raise invalid(
                f"'include' cannot hold {value[:60]!r}; ragd knows {', '.join(INCLUDABLES)}",
                param="include",
            )
    return list(raw)


def _sampling(body: dict[str, Any], name: str, maximum: float) -> float | None:
    if body.get(name) is None:
        return None
    return optional_number(body, name, 0.0, 0.0, maximum)


def _choice(body: dict[str, Any], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = optional_str(body, name, default) or default
    if value not in choices:
        raise invalid(f"'{name}' must be one of {', '.join(choices)}", param=name)
    return value
