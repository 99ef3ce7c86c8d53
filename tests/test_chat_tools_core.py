"""The plain core of tool calling: items to the upstream's messages, the request's tools and
tool_choice, the queries of a model's search. No server."""

from __future__ import annotations

from typing import Any

import pytest

from services.gateway.chat import context
from services.gateway.chat.items import ChatItem, chat_messages, check_calls, message
from services.gateway.chat.requests import ResponseCreate
from services.gateway.chat.tools import FILE_SEARCH, Tools, search_queries
from services.gateway.errors import InvalidRequest
from services.gateway.requests import parse

FUNCTION = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
SEARCH = {"type": "file_search", "vector_store_ids": ["vs_1"]}


def read(
    tools: list[dict[str, Any]],
    choice: Any = None,
    parallel: bool | None = None,
    max_calls: int | None = None,
    *,
    can_call: bool = True,
) -> Tools:
    """A request's tools as a Responses body reads them."""
    body = {
        "input": "x",
        "tools": tools,
        "tool_choice": choice,
        "parallel_tool_calls": parallel,
        "max_tool_calls": max_calls,
    }
    return parse(ResponseCreate, body).turn("m", can_call).tools


def call(call_id: str, name: str = "get_weather") -> ChatItem:
    return ChatItem(
        "function_call", body={"call_id": call_id, "name": name, "arguments": '{"city":"Rome"}'}
    )


def output(call_id: str, text: str = "Sunny.") -> ChatItem:
    return ChatItem("function_call_output", body={"call_id": call_id, "output": text})


def test_a_call_in_the_history_and_its_output_in_the_input_reach_the_model_in_order() -> None:
    prompt = context.build(
        instructions=None,
        history=[message("user", "Weather in Rome?"), call("c1"), call("c2")],
        inputs=[output("c1"), output("c2", "Windy.")],
        passages=[],
        budget=1000,
        truncation="disabled",
    )
    assert prompt.messages == [
        {"role": "user", "content": "Weather in Rome?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                }
                for call_id in ("c1", "c2")
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny."},
        {"role": "tool", "tool_call_id": "c2", "content": "Windy."},
    ]


def test_calls_and_results_without_their_pair_are_left_out_of_the_history() -> None:
    messages = chat_messages([output("gone"), message("user", "hi"), call("left")])
    assert messages == [{"role": "user", "content": "hi"}]


def test_the_requests_calls_and_results_must_pair() -> None:
    check_calls([call("c1")], [output("c1")])
    with pytest.raises(InvalidRequest, match="no function call found"):
        check_calls([], [output("c1")])
    with pytest.raises(InvalidRequest, match="no output found"):
        check_calls([], [call("c1"), message("user", "next")])
    # A call the history left unanswered is not the request's fault.
    check_calls([call("old")], [message("user", "something else")])


def test_tools_offered_to_the_model_and_tool_choice() -> None:
    tools = read([SEARCH, FUNCTION], {"type": "file_search"}, None, 2, can_call=True)
    names = [tool["function"]["name"] for tool in tools.offered(search=True)]
    assert names == ["get_weather", FILE_SEARCH]
    assert [tool["function"]["name"] for tool in tools.offered(search=False)] == ["get_weather"]
    assert tools.upstream_choice(first=True) == {
        "type": "function",
        "function": {"name": FILE_SEARCH},
    }
    assert tools.upstream_choice(first=False) == "auto"
    assert tools.max_calls == 2 and tools.parallel is True
    assert tools.echo == [SEARCH, FUNCTION]
    limited = read(
        [SEARCH, FUNCTION],
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "file_search"}]},
        False,
        None,
        can_call=True,
    )
    assert [tool["function"]["name"] for tool in limited.offered(True)] == [FILE_SEARCH]
    assert limited.upstream_choice(first=True) == "required" and limited.parallel is False
    assert read([FUNCTION], "none", None, None, can_call=True).offered(True) == []
    with pytest.raises(InvalidRequest):
        read([FUNCTION], None, None, None, can_call=False)


@pytest.mark.parametrize(
    ("arguments", "queries"),
    [
        ('{"queries": ["reactor code", " "]}', ["reactor code"]),
        ('{"query": "reactor"}', ["reactor"]),
        ("{}", ["the question"]),
        ("not json", ["the question"]),
    ],
)
def test_the_queries_of_a_models_search(arguments: str, queries: list[str]) -> None:
    assert search_queries(arguments, "the question") == queries
