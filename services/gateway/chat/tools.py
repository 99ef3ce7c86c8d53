"""The tools of a turn: file_search, which ragd runs (a hosted tool, as OpenAI runs it), and
function tools, which the model calls and the client runs. Read from the request here, and
offered to the upstream as chat-completions tools. Plain functions, no I/O.

When the upstream calls tools (RAGD_CHAT_TOOLS, on by default), file_search is offered to the
model as a function named `file_search` that takes the queries it wants searched; ragd runs
each call and hands the results back. Otherwise ragd searches with the user's own words
before the model runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
)

from services.common.vocabulary import MAX_SEARCH_RESULTS
from services.gateway.requests import Param, RequestModel, Text, fail
from services.gateway.search_body import FilterBody, RankingOptions
from services.pb import store_pb2

# The function the model calls to search; a client's function may not take the name.
FILE_SEARCH = "file_search"
TOOL_CHOICES = ("auto", "none", "required")
# OpenAI's function names: letters, digits, underscores and dashes, at most 64.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TOOLS = 128
MAX_DESCRIPTION_CHARS = 16 * 1024
# Queries the model may send in one file_search call.
MAX_QUERIES = 8
# The hosted tool's description and parameters as the model reads them.
_SEARCH_FUNCTION = {
    "type": "function",
    "function": {
        "name": FILE_SEARCH,
        "description": "Search the user's files for passages that answer the question. "
        "Give one or more short search queries.",
        "parameters": {
            "type": "object",
            "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
            "required": ["queries"],
            "additionalProperties": False,
        },
    },
}


def _named(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise fail("invalid_value", "'{path}' must be 1-64 letters, digits, underscores or dashes")
    return name


# A function's name (also a structured output's, chat/requests.py).
FunctionName = Annotated[
    str,
    AfterValidator(_named),
    WithJsonSchema({"type": "string", "pattern": f"^{_NAME.pattern}$"}),
]
JsonSchema = Annotated[dict[str, Any], Field(description="a JSON Schema")]


class FileSearchTool(RequestModel):
    """The hosted tool: ragd searches the vector stores (one or two, as OpenAI allows)."""

    type: Literal["file_search"]
    vector_store_ids: Annotated[
        list[Annotated[Text, Field(min_length=1, max_length=256)]],
        Field(min_length=1, max_length=2),
    ]
    max_num_results: Annotated[int, Field(ge=1, le=MAX_SEARCH_RESULTS)] = 10
    filters: FilterBody | None = None
    ranking_options: RankingOptions = RankingOptions()

    @property
    def filter(self) -> store_pb2.Filter | None:
        return self.filters

    @property
    def score_threshold(self) -> float:
        return self.ranking_options.score_threshold

    @property
    def vector_weight(self) -> float | None:
        """hybrid_search's share of the vector ranking; None: the store's default."""
        return self.ranking_options.vector_weight()


class FunctionTool(RequestModel):
    """A function the model may call and the client runs."""

    type: Literal["function"]
    name: FunctionName
    description: Annotated[Text | None, Field(max_length=MAX_DESCRIPTION_CHARS)] = None
    parameters: JsonSchema | None = None
    strict: bool | None = None

    def upstream(self) -> dict[str, Any]:
        """As a chat-completions tool."""
        function: dict[str, Any] = {"name": self.name}
        for key in ("description", "parameters", "strict"):
            if getattr(self, key) is not None:
                function[key] = getattr(self, key)
        return {"type": "function", "function": function}


_KINDS = ("file_search", "function")


def _known(raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise fail("invalid_type", "'{path}' must be an object")
    kind = raw.get("type")
    if kind not in _KINDS:
        raise fail(
            "unsupported_tool",
            "'{path}': ragd runs file_search itself and passes function tools to the model; "
            f"it has no {str(kind)[:40]!r} tool",
        )
    return raw


def _kind(raw: Any) -> Any:
    return raw.get("type") if isinstance(raw, dict) else None


Tool = Annotated[
    Annotated[FileSearchTool, Tag("file_search")] | Annotated[FunctionTool, Tag("function")],
    Discriminator(_kind),
    BeforeValidator(_known),
]


def _distinct(tools: list[FileSearchTool | FunctionTool]) -> list[FileSearchTool | FunctionTool]:
    names = [tool.name for tool in tools if isinstance(tool, FunctionTool)]
    for name in names:
        if names.count(name) > 1:
            raise fail("invalid_value", f"'tools' names the function {name!r} twice")
    if FILE_SEARCH in names and any(isinstance(tool, FileSearchTool) for tool in tools):
        raise fail(
            "invalid_value",
            f"a function tool may not be named {FILE_SEARCH!r} next to the file_search tool",
        )
    return tools


ToolList = Annotated[
    list[Tool],
    Field(
        max_length=MAX_TOOLS,
        description="file_search runs in ragd; function tools go to the model, and its calls "
        "come back as function_call items for the client to run",
    ),
    AfterValidator(_distinct),
    # Every error of a tool names the tools array; the message says where.
    Param("tools", whole=True),
]


class HostedChoice(RequestModel):
    type: Literal["file_search"]


class FunctionChoice(RequestModel):
    type: Literal["function"]
    name: str


class AllowedTools(RequestModel):
    """A mode and the tools it covers ({"type": "file_search"}, {"type": "function",
    "name": ...})."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"] = "auto"
    tools: list[dict[str, Any]]


def _choice_kind(raw: Any) -> Any:
    if isinstance(raw, str):
        return "mode" if raw in TOOL_CHOICES else None
    kind = raw.get("type") if isinstance(raw, dict) else None
    return kind if kind in ("file_search", "function", "allowed_tools") else None


ChoiceBody = Annotated[
    Annotated[Literal[TOOL_CHOICES], Tag("mode")]  # type: ignore[valid-type]
    | Annotated[HostedChoice, Tag("file_search")]
    | Annotated[FunctionChoice, Tag("function")]
    | Annotated[AllowedTools, Tag("allowed_tools")],
    Discriminator(
        _choice_kind,
        custom_error_type="invalid_value",
        custom_error_message=f"'tool_choice' must be one of {', '.join(TOOL_CHOICES)}, "
        "{'type': 'function', 'name': ...}, {'type': 'file_search'} or {'type': "
        "'allowed_tools', ...}",
    ),
]


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
    # Calls of the hosted tool in one turn at most (OpenAI's max_tool_calls).
    max_calls: int | None = None
    # The tools as the client sent them (unknown members and all), echoed.
    echo: list[dict[str, Any]] = field(default_factory=list)

    def offered(self, search: bool) -> list[dict[str, Any]]:
        """The chat-completions tools of a round: the client's functions, and file_search
        while `search` (the model may search again)."""
        allowed = self.choice.allowed
        tools = [tool.upstream() for tool in self.functions]
        if search and self.searches:
            tools.append(_SEARCH_FUNCTION)
        if allowed is not None:
            tools = [tool for tool in tools if tool["function"]["name"] in allowed]
        return [] if self.choice.mode == "none" else tools

    def upstream_choice(self, first: bool) -> Any:
        """The chat-completions tool_choice of a round: a forced or required call is asked
        for in the first round only (then the model answers from what its calls returned)."""
        if self.choice.name and first:
            return {"type": "function", "function": {"name": self.choice.name}}
        if self.choice.mode == "required" and first:
            return "required"
        return "auto"


def tools(
    listed: list[FileSearchTool | FunctionTool],
    choice: str | HostedChoice | FunctionChoice | AllowedTools | None,
    parallel: bool | None,
    max_calls: int | None,
    sent: Any,
) -> Tools:
    """A request's tools, read (ToolList, ChoiceBody) from `sent`, the body as the client
    sent it (its tools and tool_choice are echoed so): the choice must name tools the
    request has (a PydanticCustomError naming tool_choice otherwise)."""
    searches = [tool for tool in listed if isinstance(tool, FileSearchTool)]
    functions = [tool for tool in listed if isinstance(tool, FunctionTool)]
    raw = list(zip(listed, sent.get("tools") or [], strict=True))
    return Tools(
        searches=searches,
        functions=functions,
        choice=_choice(
            choice, sent.get("tool_choice"), {tool.name for tool in functions}, bool(searches)
        ),
        parallel=True if parallel is None else parallel,
        max_calls=max_calls,
        echo=[r for t, r in raw if isinstance(t, FileSearchTool)]
        + [r for t, r in raw if isinstance(t, FunctionTool)],
    )


def _choice(
    choice: str | HostedChoice | FunctionChoice | AllowedTools | None,
    sent: Any,
    functions: set[str],
    searches: bool,
) -> ToolChoice:
    if choice is None:
        return ToolChoice()
    if isinstance(choice, str):
        return ToolChoice(mode=choice, raw=sent)
    if isinstance(choice, HostedChoice):
        if not searches:
            raise _lacking("'tool_choice' asks for file_search, which 'tools' lacks")
        return ToolChoice(mode="required", name=FILE_SEARCH, raw=sent)
    if isinstance(choice, FunctionChoice):
        if choice.name not in functions:
            raise _lacking(
                f"'tool_choice' names the function {choice.name[:64]!r}, which 'tools' lacks"
            )
        return ToolChoice(mode="required", name=choice.name, raw=sent)
    allowed = set()
    for tool in choice.tools:
        kind = tool.get("type")
        if kind == "file_search" and searches:
            allowed.add(FILE_SEARCH)
        elif kind == "function" and tool.get("name") in functions:
            allowed.add(str(tool["name"]))
        else:
            raise _lacking(
                f"'tool_choice.tools' lists {json.dumps(tool)[:80]}, which 'tools' lacks"
            )
    return ToolChoice(mode=choice.mode, allowed=frozenset(allowed), raw=sent)


def _lacking(message: str) -> Exception:
    return fail("invalid_value", message, "tool_choice")


def search_queries(arguments: str, fallback: str) -> list[str]:
    """The queries of the model's file_search call; the user's words if it sent none that
    read (a small model's arguments can be empty)."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = {}
    raw = parsed.get("queries") if isinstance(parsed, dict) else None
    if isinstance(parsed, dict) and isinstance(parsed.get("query"), str):
        raw = [parsed["query"]]
    queries = [q.strip()[:4000] for q in raw or [] if isinstance(q, str) and q.strip()]
    return queries[:MAX_QUERIES] or ([fallback] if fallback else [])
