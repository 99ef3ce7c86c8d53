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
from typing import Any

from services.common.vocabulary import MAX_SEARCH_RESULTS
from services.gateway.errors import InvalidRequest, invalid
from services.gateway.filters import parse_filter
from services.gateway.params import check_text, optional_int
from services.gateway.requests import parse as parse_body
from services.gateway.search_body import RankingOptions
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

    def upstream(self) -> dict[str, Any]:
        """As a chat-completions tool."""
        function: dict[str, Any] = {"name": self.name}
        for key in ("description", "parameters", "strict"):
            if self.raw.get(key) is not None:
                function[key] = self.raw[key]
        return {"type": "function", "function": function}


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

    @property
    def echo(self) -> list[dict[str, Any]]:
        return [tool.raw for tool in self.searches] + [tool.raw for tool in self.functions]

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


def parse(raw_tools: Any, raw_choice: Any, parallel: Any, max_calls: Any, can_call: bool) -> Tools:
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
        choice=_choice(raw_choice, names, bool(searches)),
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


def _choice(raw: Any, functions: set[str], searches: bool) -> ToolChoice:
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
