"""Background responses through the official openai SDK, against the real stack and a real
chat upstream: queued at once and polled, followed and resumed by sequence number, cancelled,
surviving the client that started them, and left failed (never in progress forever) by a
gateway killed with SIGKILL mid-turn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from services.launcher import Stack
from tests.chat_fixtures import chat_stack, chat_upstream
from tests.harness import wait_ready

MAX_REPLY = 24
# Renewed every 2 s: a killed gateway's response fails within about 6 s.
LEASE_SECONDS = 6
LONG = "Count from one to two hundred in words, one number per line."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with chat_upstream(tmp_path_factory.mktemp("chat-logs")) as url:
        yield from chat_stack(
            tmp_path_factory.mktemp("background-stack"),
            url,
            MAX_REPLY,
            RAGD_CHAT_BACKGROUND_LEASE_SECONDS=str(LEASE_SECONDS),
        )


@pytest.fixture(scope="module")
def sdk(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{stack.gateway_url}/v1", api_key="unused", max_retries=0
    ) as client:
        yield client


def until_done(sdk: openai.OpenAI, response_id: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while (response := sdk.responses.retrieve(response_id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, response
        time.sleep(0.2)
    return response


def test_a_background_response_is_queued_at_once_and_polled(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create()
    started = sdk.responses.create(
        model="smollm2",
        input="Say hello.",
        background=True,
        conversation=conversation.id,
        temperature=0,
    )
    assert started.status == "queued" and started.background is True
    assert started.output == []
    done = until_done(sdk, started.id)
    assert done.status in ("completed", "incomplete") and done.background is True
    assert done.output[-1].type == "message" and done.output_text
    items: list[Any] = list(sdk.conversations.items.list(conversation.id, order="asc"))
    assert [item.role for item in items] == ["user", "assistant"]
    assert items[1].id == done.output[-1].id
    # Cancelling an ended response changes nothing.
    assert sdk.responses.cancel(started.id).status == done.status


def test_a_streamed_background_response_outlives_its_client_and_resumes(
    sdk: openai.OpenAI,
) -> None:
    stream: Any = sdk.responses.create(
        model="smollm2",
        input=LONG,
        background=True,
        stream=True,
        temperature=0,
        max_output_tokens=64,
    )
    with stream:
        seen: list[Any] = []
        for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta":
                break  # the client goes away
    assert [event.type for event in seen[:3]] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    assert seen[0].response.status == "queued"
    response_id = seen[0].response.id
    done = until_done(sdk, response_id)
    assert done.status in ("completed", "incomplete")
    after = seen[-1].sequence_number
    resumed: Any = sdk.responses.retrieve(response_id, stream=True, starting_after=after)
    with resumed:
        rest = list(resumed)
    assert [event.sequence_number for event in rest] == list(
        range(after + 1, after + 1 + len(rest))
    )
    assert rest[-1].type in ("response.completed", "response.incomplete")
    deltas = [*seen, *rest]
    text = "".join(e.delta for e in deltas if e.type == "response.output_text.delta")
    assert text == done.output_text


def test_a_background_response_is_cancelled(sdk: openai.OpenAI, stack: Stack) -> None:
    started = sdk.responses.create(
        model="smollm2", input=LONG, background=True, max_output_tokens=400, temperature=0
    )
    # At once: the model may not take long over it.
    cancelled = sdk.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert sdk.responses.retrieve(started.id).status == "cancelled"
    inputs: Any = sdk.responses.input_items.list(started.id)
    assert [item.content[0].text for item in inputs.data] == [LONG]
    # Its live stream ends without a final event; the events it had are replayed.
    replay: Any = sdk.responses.retrieve(started.id, stream=True)
    with replay:
        kinds = [event.type for event in replay]
    assert kinds[0] == "response.created"
    assert "response.completed" not in kinds
    # Only background responses can be cancelled.
    plain = sdk.responses.create(model="smollm2", input="Hi.", max_output_tokens=16)
    with pytest.raises(openai.BadRequestError):
        sdk.responses.cancel(plain.id)


def test_a_gateway_killed_mid_turn_leaves_the_response_failed(
    sdk: openai.OpenAI, stack: Stack
) -> None:
    finished = sdk.responses.create(model="smollm2", input="Say yes.", background=True)
    finished = until_done(sdk, finished.id)
    started = sdk.responses.create(
        model="smollm2", input=LONG, background=True, max_output_tokens=400, temperature=0
    )
    deadline = time.monotonic() + 30
    while (status := sdk.responses.retrieve(started.id).status) != "in_progress":
        assert status == "queued" and time.monotonic() < deadline, status
        time.sleep(0.05)
    stack.children["gateway"].kill()  # SIGKILL: nothing gets to record the turn
    stack.start_service("gateway")
    with httpx.Client(base_url=stack.gateway_url, timeout=30) as http:
        wait_ready(http)
    # A new client: the old one's connections died with the gateway.
    with openai.OpenAI(
        base_url=f"{stack.gateway_url}/v1", api_key="unused", max_retries=0
    ) as fresh:
        failed = until_done(fresh, started.id, timeout=LEASE_SECONDS * 10)
        assert failed.status == "failed"
        assert failed.error and failed.error.code == "server_error"
        inputs: Any = fresh.responses.input_items.list(started.id)
        assert [item.content[0].text for item in inputs.data] == [LONG]
        # The new gateway never ran the finished one: its events are rebuilt from its record.
        replay: Any = fresh.responses.retrieve(finished.id, stream=True)
        with replay:
            events = list(replay)
    assert events[0].type == "response.created"
    assert events[-1].type == f"response.{finished.status}"
    assert events[-1].response.output_text == finished.output_text
