"""A Responses API request body read into a TurnRequest: every field OpenAI defines that ragd
acts on, validated with OpenAI's limits; fields that change nothing here are accepted as the
SDKs send them."""

from __future__ import annotations

from typing import Any

from services.common.vocabulary import MAX_SEARCH_RESULTS, RANKERS
from services.gateway.chat.items import parse_items
from services.gateway.chat.turn import RESULTS, FileSearchTool, TurnRequest
from services.gateway.errors import invalid
from services.gateway.filters import parse_filter
from services.gateway.params import (
    check_text,
    metadata,
    optional_int,
    optional_number,
    optional_object,
    optional_str,
)

# OpenAI's includables; only file_search results change what ragd returns.
INCLUDABLES = (
    RESULTS,
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
)
TRUNCATIONS = ("auto", "disabled")
TOOL_CHOICES = ("auto", "none", "required")
MAX_INSTRUCTIONS_CHARS = 256 * 1024
MAX_OUTPUT_TOKENS = 1 << 20


def turn_request(body: dict[str, Any], default_model: str) -> TurnRequest:
    if "input" not in body or body["input"] is None:
        raise invalid("'input' is required", param="input", code="missing_required_parameter")
    inputs = parse_items(body["input"], "input")
    conversation = _conversation(body.get("conversation"))
    previous = optional_str(body, "previous_response_id", "") or ""
    if conversation and previous:
        raise invalid(
            "send 'conversation' or 'previous_response_id', not both", param="conversation"
        )
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise invalid("'store' must be a boolean", param="store")
    if conversation and not store:
        raise invalid(
            "a response in a conversation is stored: drop 'store': false or 'conversation'",
            param="store",
        )
    if body.get("background"):
        raise invalid("background responses are not supported; stream instead", param="background")
    choice = _tool_choice(body.get("tool_choice"))
    tools = _tools(body.get("tools"))
    return TurnRequest(
        model=optional_str(body, "model", default_model, 256) or default_model,
        inputs=inputs,
        instructions=optional_str(body, "instructions", None, MAX_INSTRUCTIONS_CHARS),
        previous_response_id=previous,
        conversation_id=conversation,
        store=store,
        tools=[] if choice == "none" else tools,
        tool_choice=choice,
        include=_include(body.get("include")),
        max_output_tokens=(
            optional_int(body, "max_output_tokens", 0, 16, MAX_OUTPUT_TOKENS) or None
        ),
        temperature=_sampling(body, "temperature", 2.0),
        top_p=_sampling(body, "top_p", 1.0),
        truncation=_choice(body, "truncation", "disabled", TRUNCATIONS),
        metadata=metadata(body),
    )


def _conversation(raw: Any) -> str:
    """OpenAI's `conversation`: an id, or an object with one."""
    if raw is None:
        return ""
    if isinstance(raw, dict):
        raw = raw.get("id")
    if not isinstance(raw, str) or not raw:
        raise invalid("'conversation' must be a conversation id or {'id': ...}", "conversation")
    return check_text(raw, "conversation", 256)


def _tool_choice(raw: Any) -> str:
    if raw is None:
        return "auto"
    if isinstance(raw, str) and raw in TOOL_CHOICES:
        return raw
    if isinstance(raw, dict) and raw.get("type") == "file_search":
        return "required"
    raise invalid(
        f"'tool_choice' must be one of {', '.join(TOOL_CHOICES)} or {{'type': 'file_search'}}",
        param="tool_choice",
    )


def _tools(raw: Any) -> list[FileSearchTool]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid("'tools' must be an array", param="tools")
    tools = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise invalid(f"'tools[{index}]' must be an object", param="tools")
        if tool.get("type") != "file_search":
            raise invalid(
                f"'tools[{index}]': ragd runs the file_search tool only, not "
                f"{str(tool.get('type'))[:40]!r}",
                param="tools",
                code="unsupported_tool",
            )
        tools.append(_file_search(tool, index))
    return tools


def _file_search(tool: dict[str, Any], index: int) -> FileSearchTool:
    name = f"tools[{index}]"
    ids = tool.get("vector_store_ids")
    if (
        not isinstance(ids, list)
        or not ids
        or len(ids) > 2
        or not all(isinstance(i, str) and i for i in ids)
    ):
        # OpenAI: one or two vector stores per file_search tool.
        raise invalid(f"'{name}.vector_store_ids' must list 1 or 2 vector store ids", "tools")
    for store_id in ids:
        check_text(store_id, f"{name}.vector_store_ids", 256, param="tools")
    k = optional_int(tool, "max_num_results", 10, 1, MAX_SEARCH_RESULTS)
    ranking = optional_object(tool, "ranking_options") or {}
    ranker = optional_str(ranking, "ranker", "auto")
    if ranker not in RANKERS:
        raise invalid(f"'{name}.ranking_options.ranker' must be one of {', '.join(RANKERS)}")
    threshold = optional_number(ranking, "score_threshold", 0.0, 0.0, 1.0)
    # Accepted and checked; ranking is ragd's default (hybrid) whether it is sent or not.
    hybrid = optional_object(ranking, "hybrid_search")
    if hybrid is not None:
        for weight in ("embedding_weight", "text_weight"):
            optional_number(hybrid, weight, 1.0, 0.0, 1e6)
    filters = parse_filter(tool["filters"]) if tool.get("filters") is not None else None
    return FileSearchTool(
        vector_store_ids=list(ids),
        max_num_results=k,
        score_threshold=threshold,
        filter=filters,
        raw=tool,
    )


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
