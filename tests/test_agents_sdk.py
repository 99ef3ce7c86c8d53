"""The OpenAI Agents SDK (`openai-agents`), unmodified, against ragd as its Responses API: an
agent with a function tool the SDK runs, one with FileSearchTool (ragd runs it), one with
both, a handoff, structured output (output_type), Runner.run and Runner.run_streamed, and
the SDK's conversation and response chaining. The upstream is llama_cpp.server on
SmolLM2-135M-Instruct calling tools (services/local_chat_tools.py); the agents force their
first call with tool_choice (grammar-constrained, so real calls), and the tests assert the
items and their order, not the model's wisdom."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pydantic
import pytest
from agents import (
    Agent,
    FileSearchTool,
    ModelSettings,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from services.launcher import Stack
from tests.chat_fixtures import chat_stack, chat_upstream, facts_store

MAX_REPLY = 24
# The agents' replies: long enough for the model to end on its own (the SDK refuses a
# response cut at max_output_tokens).
AGENT_REPLY = 160
QUESTION = "What is the secret code word of the Zorblatt reactor?"
# What the SDK's function tool was called with, in order.
CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLS.append(city)
    return f"Sunny and 21 degrees in {city}."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with chat_upstream(tmp_path_factory.mktemp("chat-logs")) as url:
        yield from chat_stack(tmp_path_factory.mktemp("agents-stack"), url, MAX_REPLY)


@pytest.fixture(scope="module")
def base_url(stack: Stack) -> Iterator[str]:
    """The SDK's default client pointed at the gateway, for the whole module."""
    url = f"{stack.gateway_url}/v1"
    set_tracing_disabled(True)
    set_default_openai_api("responses")
    yield url


@pytest.fixture(scope="module")
def vector_store(stack: Stack) -> str:
    with openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="unused") as sdk:
        return facts_store(sdk)


def run(base_url: str, work: Any) -> Any:
    """`work(client)` on a fresh event loop with its own AsyncOpenAI client, set as the SDK's
    default (an httpx client belongs to the loop that opened it)."""

    async def main() -> Any:
        async with AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
            set_default_openai_client(client, use_for_tracing=False)
            return await work(client)

    return asyncio.run(main())


def settings(**more: Any) -> ModelSettings:
    return ModelSettings(temperature=0, max_tokens=AGENT_REPLY, **more)


def kinds(result: Any) -> list[str]:
    return [item.type for item in result.new_items]


def test_an_agent_with_a_function_tool(base_url: str) -> None:
    agent = Agent(
        name="Weather",
        instructions="Answer questions about the weather in one short sentence.",
        model="smollm2",
        tools=[get_weather],
        model_settings=settings(tool_choice="get_weather"),
    )
    CALLS.clear()

    async def work(client: AsyncOpenAI) -> Any:
        return await Runner.run(agent, "What is the weather in Paris?")

    result = run(base_url, work)
    assert kinds(result) == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert len(CALLS) == 1 and CALLS[0]
    call, output = result.new_items[0].raw_item, result.new_items[1].raw_item
    assert call.name == "get_weather" and output["call_id"] == call.call_id
    assert output["output"] == f"Sunny and 21 degrees in {CALLS[0]}."
    assert isinstance(result.final_output, str) and result.final_output
    assert len(result.raw_responses) == 2


def test_an_agent_with_file_search(base_url: str, vector_store: str) -> None:
    agent = Agent(
        name="Librarian",
        instructions="Answer from the files in one short sentence.",
        model="smollm2",
        tools=[FileSearchTool(vector_store_ids=[vector_store], include_search_results=True)],
        model_settings=settings(tool_choice="file_search"),
    )

    async def work(client: AsyncOpenAI) -> Any:
        return await Runner.run(agent, QUESTION)

    result = run(base_url, work)
    assert kinds(result) == ["tool_call_item", "message_output_item"]
    search = result.new_items[0].raw_item
    assert search.type == "file_search_call" and search.queries
    assert search.results and search.results[0].filename in ("zorblatt.txt", "granite.txt")
    assert len(result.raw_responses) == 1


def test_an_agent_with_both_tools_streamed(base_url: str, vector_store: str) -> None:
    agent = Agent(
        name="Both",
        instructions="Answer from the files, or look up the weather. Answer in one short sentence.",
        model="smollm2",
        tools=[FileSearchTool(vector_store_ids=[vector_store]), get_weather],
        model_settings=settings(tool_choice="get_weather"),
    )
    CALLS.clear()

    async def work(client: AsyncOpenAI) -> Any:
        streamed = Runner.run_streamed(agent, "What is the weather in Lisbon?")
        events = [event async for event in streamed.stream_events()]
        return streamed, events

    streamed, events = run(base_url, work)
    assert kinds(streamed) == [
        "tool_call_item",
        "tool_call_output_item",
        "message_output_item",
    ]
    assert len(CALLS) == 1
    raw = [event.data.type for event in events if event.type == "raw_response_event"]
    assert "response.function_call_arguments.delta" in raw
    assert "response.output_text.delta" in raw or "response.output_text.done" in raw
    assert raw.count("response.completed") + raw.count("response.incomplete") == 2
    named = [event.name for event in events if event.type == "run_item_stream_event"]
    assert named == ["tool_called", "tool_output", "message_output_created"]
    assert streamed.final_output


def test_a_handoff_between_two_agents(base_url: str) -> None:
    expert = Agent(
        name="Expert",
        instructions="You are the expert. Answer in one short sentence.",
        model="smollm2",
        model_settings=settings(),
    )
    triage = Agent(
        name="Triage",
        instructions="Hand the user over to the expert.",
        model="smollm2",
        handoffs=[expert],
        model_settings=settings(tool_choice="transfer_to_expert"),
    )

    async def work(client: AsyncOpenAI) -> Any:
        return await Runner.run(triage, "I need an expert on reactors.")

    result = run(base_url, work)
    assert result.last_agent is expert
    assert kinds(result) == ["handoff_call_item", "handoff_output_item", "message_output_item"]
    assert result.new_items[0].raw_item.name == "transfer_to_expert"
    assert result.final_output


class Forecast(pydantic.BaseModel):
    city: str
    degrees: int


def test_structured_output_with_output_type(base_url: str) -> None:
    agent = Agent(
        name="Forecaster",
        instructions="Give a forecast for the city the user names.",
        model="smollm2",
        output_type=Forecast,
        model_settings=settings(),
    )

    async def work(client: AsyncOpenAI) -> Any:
        result = await Runner.run(agent, "Forecast for Rome, please.")
        stored = await client.responses.retrieve(str(result.raw_responses[0].response_id))
        return result, stored

    result, stored = run(base_url, work)
    assert isinstance(result.final_output, Forecast)
    assert stored.text.format.type == "json_schema"
    assert stored.text.format.name == "final_output" and stored.text.format.strict


def test_the_sdk_keeps_its_turns_in_a_conversation(base_url: str) -> None:
    agent = Agent(
        name="Weather",
        instructions="Answer questions about the weather in one short sentence.",
        model="smollm2",
        tools=[get_weather],
        model_settings=settings(tool_choice="get_weather"),
    )

    async def work(client: AsyncOpenAI) -> Any:
        conversation = await client.conversations.create()
        result = await Runner.run(agent, "Weather in Oslo?", conversation_id=conversation.id)
        items = [item async for item in client.conversations.items.list(conversation.id)]
        return result, list(reversed(items))

    result, items = run(base_url, work)
    assert kinds(result) == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    # Each item once, in order: the SDK sends only what is new with a conversation.
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[1].id == result.new_items[0].raw_item.id
    assert items[3].content[0].text == result.final_output


def test_the_sdk_chains_responses_by_previous_response_id(base_url: str) -> None:
    agent = Agent(
        name="Weather",
        instructions="Answer questions about the weather in one short sentence.",
        model="smollm2",
        tools=[get_weather],
        model_settings=settings(tool_choice="get_weather"),
    )

    async def work(client: AsyncOpenAI) -> Any:
        return await Runner.run(agent, "Weather in Rome?", auto_previous_response_id=True)

    result = run(base_url, work)
    assert kinds(result) == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    first, second = result.raw_responses
    assert second.response_id and first.response_id
