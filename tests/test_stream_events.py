"""The Responses stream's events are typed (chat/events.py) and none loses a field: each kind
ragd emits declares every field of the official SDK's type for it, and the events a turn's
outputs and a replay make have exactly their type's fields, in order, and parse as the SDK's
types. No server: the live streams' events are checked too, by tests/test_chat_api.py's
sse_events (check_event)."""

from __future__ import annotations

import typing

import pytest

from services.gateway.chat.background import replayed
from services.gateway.chat.context import Passage
from services.gateway.chat.events import KINDS
from services.gateway.chat.outputs import RESULTS, Outputs, Round
from tests.chat_fixtures import SDK_EVENT, SDK_EVENTS, check_event


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_has_every_field_of_the_sdks_type(kind: str) -> None:
    ours = set(typing.get_type_hints(KINDS[kind]))
    theirs = set(SDK_EVENTS[kind].model_fields)
    assert theirs <= ours, f"{kind} lacks {sorted(theirs - ours)}"
    # Beyond the SDK's type: only what OpenAI sends though the SDK does not declare it.
    assert ours - theirs <= ({"name"} if kind.endswith("arguments.done") else set())


def test_the_events_of_a_turns_outputs_are_whole_and_numbered_in_order() -> None:
    outputs = Outputs([RESULTS, "message.output_text.logprobs"], hosted="file_search")
    passages = [Passage(1, "file-1", "a.txt", "the reactor runs on seaweed", 0.9)]
    search = outputs.search(["reactor"])
    events = [
        *outputs.search_started(search),
        *outputs.search_done(search, [passages[0].result()], degraded=False),
    ]
    current = Round()
    logprob = {"token": "It", "logprob": -0.1, "bytes": [73, 116], "top_logprobs": []}
    events += outputs.text(current, "It runs on seaweed [1].", [logprob])
    events += outputs.call_delta(
        current,
        {"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": "{}"}},
        passages,
        "What does the reactor run on?",
    )
    current.reasoning, current.finish = "Thinking.", "tool_calls"
    events += outputs.close(current, passages, "What does the reactor run on?")
    events += outputs.empty_answer(Round())
    kinds = {event["type"] for event in events}
    assert kinds == set(KINDS) - {
        "error",
        *(kind for kind in KINDS if kind.startswith("response.") and kind.count(".") == 1),
    }
    for event in events:
        check_event(dict(event))
    # An empty answer skips no number.
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


@pytest.mark.parametrize("status", ["completed", "incomplete", "failed", "cancelled"])
def test_a_replayed_response_has_whole_events(status: str) -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hi.", "annotations": [], "logprobs": []}],
    }
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1.0,
        "status": status,
        "model": "smollm2",
        "output": [message],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    events = replayed(response, -1)
    for event in events:
        kind = KINDS[event["type"]]
        # Numbered last, as before the events were typed.
        assert set(event) == set(typing.get_type_hints(kind)), event
        SDK_EVENT.validate_python(event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
