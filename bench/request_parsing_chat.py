"""The hand-written checks of the Responses and chat-completions bodies before their models
(chat/requests.py, chat/tools.py), frozen here as bench.request_parsing's baseline: the same
bodies read both ways in the same run, to the same values."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from bench.params_before import metadata, optional_int, optional_number, optional_str
from services.common.vocabulary import MAX_SEARCH_RESULTS
from services.gateway.chat.items import parse_items
from services.gateway.chat.requests import (
    EFFORTS,
    INCLUDABLES,
    MAX_INSTRUCTIONS_CHARS,
    MAX_OUTPUT_TOKENS,
    MAX_TOP_LOGPROBS,
    SUMMARIES,
    TRUNCATIONS,
    VERBOSITIES,
    ChatCompletionRequest,
    ResponseCreate,
)
from services.gateway.chat.tools import FILE_SEARCH, MAX_DESCRIPTION_CHARS, MAX_TOOLS, TOOL_CHOICES
from services.gateway.chat.tools import Tools as NewTools
from services.gateway.chat.turn import LOGPROBS, TurnRequest
from services.gateway.errors import InvalidRequest, invalid
from services.gateway.filters import parse_filter
from services.gateway.params import check_text
from services.gateway.requests import parse as parse_body
from services.gateway.search_body import RankingOptions
from services.pb import store_pb2

FORMATS = ("text", "json_object", "json_schema")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FORMAT_NAME = _NAME


@dataclass(frozen=True)
class FileSearchTool:
    vector_store_ids: list[str]
    max_num_results: int
    score_threshold: float
    filter: store_pb2.Filter | None
    # As the client sent it, echoed in the response's `tools`.
    raw: dict[str, Any]
    # hybrid_search's share of the vector ranking; None: the store's default.
    vector_weight: float | None = None


@dataclass(frozen=True)
class FunctionTool:
    name: str
    raw: dict[str, Any]


@dataclass(frozen=True)
class ToolChoice:
    """`mode` auto, none or required; `name` a function the model must call (FILE_SEARCH for
    {"type": "file_search"}); `allowed` the names it may call, when the client limited them."""

    mode: str = "auto"
    name: str = ""
    allowed: frozenset[str] | None = None
    # As the client sent it, echoed.
    raw: Any = "auto"


@dataclass(frozen=True)
class Tools:
    searches: list[FileSearchTool] = field(default_factory=list)
    functions: list[FunctionTool] = field(default_factory=list)
    choice: ToolChoice = field(default_factory=ToolChoice)
    parallel: bool = True
    max_calls: int | None = None


def parse_tools_(
    raw_tools: Any, raw_choice: Any, parallel: Any, max_calls: Any, can_call: bool
) -> Tools:
    searches, functions = _tools(raw_tools, can_call)
    names = {tool.name for tool in functions}
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid("'parallel_tool_calls' must be a boolean", param="parallel_tool_calls")
    calls = None
    if max_calls is not None:
        calls = optional_int({"max_tool_calls": max_calls}, "max_tool_calls", 1, 1, 1000)
    return Tools(
        searches=searches,
        functions=functions,
        choice=_tool_choice(raw_choice, names, bool(searches)),
        parallel=True if parallel is None else parallel,
        max_calls=calls,
    )


def _tools(raw: Any, can_call: bool) -> tuple[list[FileSearchTool], list[FunctionTool]]:
    if raw is None:
        return [], []
    if not isinstance(raw, list) or len(raw) > MAX_TOOLS:
        raise invalid(f"'tools' must be an array of at most {MAX_TOOLS} tools", param="tools")
    searches: list[FileSearchTool] = []
    functions: list[FunctionTool] = []
    for index, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise invalid(f"'tools[{index}]' must be an object", param="tools")
        kind = tool.get("type")
        if kind == "file_search":
            searches.append(_file_search(tool, index))
        elif kind == "function":
            if not can_call:
                raise invalid(
                    f"'tools[{index}]': the chat upstream does not call tools "
                    "(RAGD_CHAT_TOOLS=off), so function tools cannot run",
                    param="tools",
                    code="unsupported_tool",
                )
            functions.append(_function(tool, index))
        else:
            raise invalid(
                f"'tools[{index}]': ragd runs file_search itself and passes function tools to "
                f"the model; it has no {str(kind)[:40]!r} tool",
                param="tools",
                code="unsupported_tool",
            )
    names = [tool.name for tool in functions]
    for name in names:
        if names.count(name) > 1:
            raise invalid(f"'tools' names the function {name!r} twice", param="tools")
    if searches and FILE_SEARCH in names:
        raise invalid(
            f"a function tool may not be named {FILE_SEARCH!r} next to the file_search tool",
            param="tools",
        )
    return searches, functions


def _function(tool: dict[str, Any], index: int) -> FunctionTool:
    name = f"tools[{index}]"
    raw_name = tool.get("name")
    if not isinstance(raw_name, str) or not _NAME.fullmatch(raw_name):
        raise invalid(
            f"'{name}.name' must be 1-64 letters, digits, underscores or dashes", param="tools"
        )
    description = tool.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise invalid(f"'{name}.description' must be a string", param="tools")
        check_text(description, f"{name}.description", MAX_DESCRIPTION_CHARS, param="tools")
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid(f"'{name}.parameters' must be a JSON Schema object", param="tools")
    strict = tool.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"'{name}.strict' must be a boolean", param="tools")
    return FunctionTool(raw_name, tool)


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
    for vector_store_id in ids:
        check_text(vector_store_id, f"{name}.vector_store_ids", 256, param="tools")
    k = optional_int(tool, "max_num_results", 10, 1, MAX_SEARCH_RESULTS)
    ranking = _ranking(tool.get("ranking_options"), name)
    filters = parse_filter(tool["filters"]) if tool.get("filters") is not None else None
    return FileSearchTool(
        vector_store_ids=list(ids),
        max_num_results=k,
        score_threshold=ranking.score_threshold,
        filter=filters,
        raw=tool,
        vector_weight=ranking.vector_weight(),
    )


def _ranking(raw: Any, name: str) -> RankingOptions:
    """The tool's ranking_options, read as a search's are (search_body.RankingOptions)."""
    if raw is None:
        return RankingOptions()
    try:
        return parse_body(RankingOptions, raw, at=f"{name}.ranking_options")
    except InvalidRequest as error:
        # Every error of a tool names the tools array as its param; the message says where.
        error.param = "tools"
        raise


def _tool_choice(raw: Any, functions: set[str], searches: bool) -> ToolChoice:
    """OpenAI's tool_choice: a mode, a function or the file_search tool to call, or
    allowed_tools (a mode and the tools it covers)."""
    if raw is None:
        return ToolChoice()
    if isinstance(raw, str) and raw in TOOL_CHOICES:
        return ToolChoice(mode=raw, raw=raw)
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "file_search":
        if not searches:
            raise invalid("'tool_choice' asks for file_search, which 'tools' lacks", "tool_choice")
        return ToolChoice(mode="required", name=FILE_SEARCH, raw=raw)
    if kind == "function":
        name = raw.get("name")
        if not isinstance(name, str) or name not in functions:
            raise invalid(
                f"'tool_choice' names the function {str(name)[:64]!r}, which 'tools' lacks",
                param="tool_choice",
            )
        return ToolChoice(mode="required", name=name, raw=raw)
    if kind == "allowed_tools":
        return _allowed(raw, functions, searches)
    raise invalid(
        f"'tool_choice' must be one of {', '.join(TOOL_CHOICES)}, {{'type': 'function', "
        "'name': ...}, {'type': 'file_search'} or {'type': 'allowed_tools', ...}",
        param="tool_choice",
    )


def _allowed(raw: dict[str, Any], functions: set[str], searches: bool) -> ToolChoice:
    mode = raw.get("mode", "auto")
    listed = raw.get("tools")
    if mode not in ("auto", "required") or not isinstance(listed, list):
        raise invalid(
            "'tool_choice' of type allowed_tools needs 'mode' (auto or required) and 'tools'",
            param="tool_choice",
        )
    allowed = set()
    for tool in listed:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "file_search" and searches:
            allowed.add(FILE_SEARCH)
        elif kind == "function" and tool.get("name") in functions:
            allowed.add(str(tool["name"]))
        else:
            raise invalid(
                f"'tool_choice.tools' lists {json.dumps(tool)[:80]}, which 'tools' lacks",
                param="tool_choice",
            )
    return ToolChoice(mode=mode, allowed=frozenset(allowed), raw=raw)


def old_turn_request(
    body: dict[str, Any], default_model: str, can_call: bool = True
) -> tuple[TurnRequest, Tools]:
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
    tools = parse_tools_(
        body.get("tools"),
        body.get("tool_choice"),
        body.get("parallel_tool_calls"),
        body.get("max_tool_calls"),
        can_call,
    )
    include = _include(body.get("include"))
    logprobs = optional_int(body, "top_logprobs", -1, 0, MAX_TOP_LOGPROBS)
    turn = TurnRequest(
        model=optional_str(body, "model", default_model, 256) or default_model,
        inputs=inputs,
        instructions=optional_str(body, "instructions", None, MAX_INSTRUCTIONS_CHARS),
        previous_response_id=previous,
        conversation_id=conversation,
        store=store,
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
    return turn, tools


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


# The chat-completions route's checks (routes/chat.py and completions.check; not recorded).


def old_chat(body: dict[str, Any]) -> tuple[Any, ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    for index, entry in enumerate(messages):
        if not isinstance(entry, dict) or not isinstance(entry.get("role"), str):
            raise InvalidRequest(
                f"'messages[{index}]' must be an object with a 'role'", param="messages"
            )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    return len(messages), stream


def new_chat(body: dict[str, Any]) -> tuple[Any, ...]:
    asked = parse_body(ChatCompletionRequest, body)
    return len(asked.messages), asked.stream


def _tools_read(tools: Any) -> tuple[Any, ...]:
    """What a turn reads of its tools, either way."""
    return (
        [
            (t.vector_store_ids, t.max_num_results, t.score_threshold, t.filter, t.vector_weight)
            for t in tools.searches
        ],
        [t.name for t in tools.functions],
        (tools.choice.mode, tools.choice.name, tools.choice.allowed, tools.choice.raw),
        tools.parallel,
        tools.max_calls,
        [t.raw for t in tools.searches] + [t.raw for t in tools.functions]
        if isinstance(tools, Tools)
        else tools.echo,
    )


def old_response(body: dict[str, Any]) -> tuple[Any, ...]:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    turn, tools = old_turn_request(body, "smollm2")
    # The same steps as new_response's (its tools compared apart).
    return stream, replace(turn, tools=NewTools()), _tools_read(tools)


def new_response(body: dict[str, Any]) -> tuple[Any, ...]:
    asked = parse_body(ResponseCreate, body)
    turn = asked.turn("smollm2")
    return asked.stream, replace(turn, tools=NewTools()), _tools_read(turn.tools)


_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}

RESPONSE_BODIES: dict[str, dict[str, Any]] = {
    "response, one line": {"model": "smollm2", "input": "What is the capital of France?"},
    "response, SDK-like": {
        "model": "smollm2",
        "input": [
            {"role": "developer", "content": "Answer briefly."},
            {"role": "user", "content": [{"type": "input_text", "text": "Rotate the logs?"}]},
        ],
        "conversation": {"id": "conv_0123456789abcdef"},
        "store": True,
        "stream": True,
        "temperature": 0.2,
        "max_output_tokens": 256,
        "metadata": {"topic": "logs"},
        "include": ["file_search_call.results"],
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "reasoning": {"effort": "low"},
        "truncation": "auto",
    },
    "response, file_search and 4 functions": {
        "model": "smollm2",
        "input": "How do I rotate the logs, and what is the weather in Lisbon?",
        "previous_response_id": "resp_0123456789abcdef",
        "tools": [
            {
                "type": "file_search",
                "vector_store_ids": ["vs_handbook", "vs_manpages"],
                "max_num_results": 8,
                "filters": {"type": "eq", "key": "section", "value": "8"},
                "ranking_options": {"ranker": "auto", "score_threshold": 0.2},
            },
            *({**_WEATHER, "name": f"get_weather_{n}"} for n in range(4)),
        ],
        "tool_choice": {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "file_search"}, {"type": "function", "name": "get_weather_0"}],
        },
        "parallel_tool_calls": True,
        "max_tool_calls": 4,
        "text": {
            "format": {
                "type": "json_schema",
                "name": "answer",
                "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "strict": True,
            }
        },
    },
}

CHAT_BODIES: dict[str, dict[str, Any]] = {
    "chat completion, one message": {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
    },
    "chat completion, 20 messages and 4 tools": {
        "model": "smollm2",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            *(
                {"role": "user" if n % 2 == 0 else "assistant", "content": f"line {n} about logs"}
                for n in range(19)
            ),
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 256,
        "tools": [
            {
                "type": "function",
                "function": {k: v for k, v in _WEATHER.items() if k != "type"}
                | {"name": f"get_weather_{n}"},
            }
            for n in range(4)
        ],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
    },
}
