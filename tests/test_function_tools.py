"""Function tools, the file_search the model drives and structured output, through the
official openai SDK by hand, against the real stack and a real upstream that calls tools
(llama_cpp.server on SmolLM2-135M-Instruct with services/local_chat_tools.py's format).

A forced tool_choice is grammar-constrained, so the calls are real and their arguments valid
JSON even from a 135M model; the tests assert structure, order and persistence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest

from services.launcher import Stack
from tests.chat_fixtures import chat_stack, chat_upstream, facts_store

MAX_REPLY = 24
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
FORCE_WEATHER: Any = {"type": "function", "name": "get_weather"}
QUESTION = "What is the secret code word of the Zorblatt reactor?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with chat_upstream(tmp_path_factory.mktemp("chat-logs")) as url:
        yield from chat_stack(tmp_path_factory.mktemp("tools-stack"), url, MAX_REPLY)


@pytest.fixture(scope="module")
def sdk(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="unused", max_retries=0) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.gateway_url, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="module")
def vector_store(sdk: openai.OpenAI) -> str:
    return facts_store(sdk)


def output_of(call: Any, text: str) -> Any:
    return {"type": "function_call_output", "call_id": call.call_id, "output": text}


def test_a_function_call_round_trip_with_previous_response_id(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(
        model="smollm2",
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice=FORCE_WEATHER,
        temperature=0,
    )
    assert first.status == "completed"
    [call] = first.output
    assert call.type == "function_call"
    assert str(call.id).startswith("fc_") and call.call_id and call.status == "completed"
    assert call.name == "get_weather"
    assert isinstance(json.loads(call.arguments)["city"], str)
    assert first.tools[0].type == "function" and first.tool_choice.type == "function"  # type: ignore[union-attr]
    second = sdk.responses.create(
        model="smollm2",
        input=[output_of(call, "Sunny, 21 degrees.")],
        previous_response_id=first.id,
        tools=[WEATHER],
        temperature=0,
    )
    assert second.status in ("completed", "incomplete")
    assert [item.type for item in second.output] == ["message"]
    assert second.output_text
    stored: Any = sdk.responses.retrieve(first.id)
    assert stored.output[0].model_dump() == call.model_dump()
    inputs: Any = sdk.responses.input_items.list(second.id)
    assert [(item.type, item.call_id) for item in inputs.data] == [
        ("function_call_output", call.call_id)
    ]
    # The model read the call and its result: more input than the question alone.
    assert second.usage and first.usage
    assert second.usage.input_tokens > first.usage.input_tokens - 60


def test_a_streamed_function_call_round_trip_in_a_conversation(
    sdk: openai.OpenAI, http: httpx.Client
) -> None:
    conversation = sdk.conversations.create()
    stream: Any = sdk.responses.create(
        model="smollm2",
        input="What is the weather in Oslo?",
        conversation=conversation.id,
        tools=[WEATHER],
        tool_choice=FORCE_WEATHER,
        temperature=0,
        stream=True,
    )
    with stream:
        events: list[Any] = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(kinds[3:-3]) == {"response.function_call_arguments.delta"}
    assert [event.sequence_number for event in events] == list(range(len(events)))
    added, done = events[2].item, events[-2].item
    assert added.status == "in_progress" and added.arguments == ""
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert done.arguments == deltas == events[-3].arguments
    assert done.id == added.id and done.call_id == added.call_id and done.status == "completed"
    json.loads(deltas)
    final = events[-1].response
    assert [item.type for item in final.output] == ["function_call"]
    stream = sdk.responses.create(
        model="smollm2",
        input=[output_of(done, "Snow, -3 degrees.")],
        conversation=conversation.id,
        tools=[WEATHER],
        temperature=0,
        stream=True,
    )
    with stream:
        answer: list[Any] = list(stream)
    assert answer[-1].type in ("response.completed", "response.incomplete")
    text = answer[-1].response.output_text
    items: list[Any] = list(sdk.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[1].call_id == items[2].call_id == done.call_id
    assert items[1].arguments == deltas
    assert items[3].content[0].text == text
    # Calls are searchable history like any item.
    found = http.post(
        f"/v1/conversations/{conversation.id}/search", json={"query": "Snow", "mode": "lexical"}
    ).json()
    assert [hit["item"]["type"] for hit in found["data"]] == ["function_call_output"]


def test_the_model_drives_file_search(sdk: openai.OpenAI, vector_store: str) -> None:
    response = sdk.responses.create(
        model="smollm2",
        input=QUESTION,
        tools=[{"type": "file_search", "vector_store_ids": [vector_store]}],
        tool_choice={"type": "file_search"},
        include=["file_search_call.results"],
        temperature=0,
    )
    search, answer = response.output[0], response.output[-1]
    assert [item.type for item in response.output] == ["file_search_call", "message"]
    assert search.type == "file_search_call" and search.status == "completed"
    assert search.queries and all(isinstance(query, str) and query for query in search.queries)
    assert search.results and {result.filename for result in search.results} <= {
        "zorblatt.txt",
        "granite.txt",
    }
    assert answer.type == "message" and answer.content[0].type == "output_text"
    stored: Any = sdk.responses.retrieve(response.id)
    assert stored.output[0].queries == search.queries and stored.output[0].results is None


def test_a_streamed_model_driven_search(sdk: openai.OpenAI, vector_store: str) -> None:
    stream: Any = sdk.responses.create(
        model="smollm2",
        input=QUESTION,
        tools=[{"type": "file_search", "vector_store_ids": [vector_store]}],
        tool_choice="required",
        temperature=0,
        stream=True,
    )
    with stream:
        kinds = [event.type for event in stream]
    assert kinds[2:7] == [
        "response.output_item.added",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.output_item.done",
    ]
    assert kinds[7:9] == ["response.output_item.added", "response.content_part.added"]
    assert kinds[-1] in ("response.completed", "response.incomplete")


def test_function_tools_and_file_search_in_one_request(
    sdk: openai.OpenAI, vector_store: str
) -> None:
    tools: Any = [{"type": "file_search", "vector_store_ids": [vector_store]}, WEATHER]
    searched = sdk.responses.create(
        model="smollm2",
        input=QUESTION,
        tools=tools,
        tool_choice={"type": "file_search"},
        temperature=0,
    )
    assert [item.type for item in searched.output] == ["file_search_call", "message"]
    called = sdk.responses.create(
        model="smollm2",
        input="And the weather in Lisbon?",
        previous_response_id=searched.id,
        tools=tools,
        tool_choice=FORCE_WEATHER,
        temperature=0,
    )
    assert [item.type for item in called.output] == ["function_call"]
    answered = sdk.responses.create(
        model="smollm2",
        input=[output_of(called.output[0], "Warm.")],
        previous_response_id=called.id,
        tools=tools,
        temperature=0,
    )
    assert answered.output[-1].type == "message"
    assert [tool.type for tool in answered.tools] == ["file_search", "function"]


class Weather(pydantic.BaseModel):
    city: str
    degrees: int


def test_structured_output_follows_the_schema(sdk: openai.OpenAI) -> None:
    parsed = sdk.responses.parse(
        model="smollm2",
        input="Report the weather in Rome as JSON.",
        text_format=Weather,
        temperature=0,
        max_output_tokens=48,
    )
    assert isinstance(parsed.output_parsed, Weather)
    assert parsed.text and parsed.text.format and parsed.text.format.type == "json_schema"
    loose = sdk.responses.create(
        model="smollm2",
        input="Give the weather in Rome as a JSON object.",
        text={"format": {"type": "json_object"}},
        temperature=0,
        max_output_tokens=48,
    )
    assert loose.status == "completed"
    assert isinstance(json.loads(loose.output_text), dict)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{**WEATHER, "name": "has space"}]}, "tools"),
        ({"tools": [{**WEATHER, "parameters": "x"}]}, "tools"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}}, "tool_choice"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"max_tool_calls": 0}, "max_tool_calls"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
        ({"text": {"verbosity": "loud"}}, "text.verbosity"),
        ({"reasoning": {"effort": "maximal"}}, "reasoning.effort"),
        ({"top_logprobs": 99}, "top_logprobs"),
        ({"background": True, "store": False}, "background"),
        ({"background": "yes"}, "background"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"user": 5}, "user"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}]},
            "input",
        ),
        (
            {
                "input": [
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"role": "user", "content": "next"},
                ]
            },
            "input",
        ),
        ({"input": [{"type": "function_call", "call_id": "c1", "name": "f"}]}, "input"),
    ],
)
def test_bad_tool_requests_get_a_clear_400(
    http: httpx.Client, body: dict[str, Any], param: str
) -> None:
    reply = http.post("/v1/responses", json={"input": "x", **body})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error" and error["message"]
