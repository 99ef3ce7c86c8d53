"""A real chat upstream for tests and benchmarks: services/local_chat.py's llama_cpp.server
on the packaged SmolLM2-135M-Instruct (calling tools), on a free loopback port, logging to a
file; and a stack pointed at it."""

from __future__ import annotations

import os
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pydantic
from openai.types.responses import ResponseStreamEvent

from services import local_chat
from services.gateway.chat.events import KINDS
from services.launcher import Stack
from tests.harness import free_port, started_stack

CHAT_CONTEXT = local_chat.CONTEXT_TOKENS


@contextmanager
def chat_upstream(log_dir: Path, port: int | None = None) -> Iterator[str]:
    """Yields the server's base URL (…/v1)."""
    port = port or free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    threads = int(os.environ.get("RAGD_TEST_CHAT_THREADS", "2"))
    with (
        open(log_dir / f"chat-{port}.log", "ab") as log,
        local_chat.running(port, log, threads) as url,
    ):
        yield url


# A vector store's facts for the turns that search (the model is small: the tests assert
# structure, citations and persistence, not what it says).
FACTS = (
    "The Zorblatt reactor was designed by Mira Quenby in Lisbon. "
    "Its secret code word is PINEAPPLE. "
    "The reactor runs on compressed seaweed and produces 40 megawatts."
)
OTHER = "Granite countertops are polished with diamond pads of increasing grit."


def chat_stack(tmp: Path, upstream: str, max_reply: int, **env: str) -> Iterator[Stack]:
    """A stack whose chat upstream is `upstream`, with replies of `max_reply` tokens."""
    settings = {
        "RAGD_CHAT_BASE_URL": upstream,
        "RAGD_CHAT_MODEL": "smollm2",
        "RAGD_CHAT_CONTEXT_TOKENS": str(CHAT_CONTEXT),
        "RAGD_CHAT_MAX_OUTPUT_TOKENS": str(max_reply),
        # Short replies keep these tests quick on a small CPU (tests/test_chat_api.py runs
        # without it: a reply may take what the context leaves).
        "RAGD_CHAT_DEFAULT_OUTPUT_TOKENS": str(max_reply),
        **env,
    }
    yield from started_stack(tmp, 1, **settings)


def facts_store(sdk: openai.OpenAI) -> str:
    """A vector store holding FACTS and OTHER, ingested."""
    files = [
        sdk.files.create(file=(name, text.encode()), purpose="assistants").id
        for name, text in (("zorblatt.txt", FACTS), ("granite.txt", OTHER))
    ]
    store = sdk.vector_stores.create(name="facts", file_ids=files)
    deadline = time.monotonic() + 60
    while sdk.vector_stores.retrieve(store.id).file_counts.completed < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return store.id


# The SDK's stream event types, by their `type`.
SDK_EVENTS: dict[str, type[pydantic.BaseModel]] = {
    typing.get_args(model.model_fields["type"].annotation)[0]: model
    for model in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}
SDK_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


def check_event(event: dict[str, Any]) -> None:
    """A stream event has exactly the fields of its kind's type (services/gateway/chat/
    events.py), in their order, and the SDK reads it as its own type of that kind."""
    kind = KINDS[event["type"]]
    assert list(event) == list(typing.get_type_hints(kind)), event
    assert type(SDK_EVENT.validate_python(event)) is SDK_EVENTS[event["type"]]
