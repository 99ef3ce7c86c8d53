"""Conversations, responses and chat completions through the official openai SDK, against the
real stack and a real chat upstream (llama_cpp.server on SmolLM2-135M-Instruct).

The model is small and often wrong: these tests assert structure, citations and persistence,
with temperature 0 so that its answers are the same from run to run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import httpx
import openai
import pytest
from click.testing import CliRunner, Result
from openai.types.responses import ResponseError

from services.cli.main import cli
from services.launcher import Stack
from tests.chat_fixtures import CHAT_CONTEXT, chat_upstream, check_event, facts_store
from tests.harness import started_stack, wait_ready
from tests.store_fixtures import check_conversation_invariants

QUESTION = "What is the secret code word of the Zorblatt reactor?"
MAX_REPLY = 48


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with chat_upstream(tmp_path_factory.mktemp("chat-logs")) as url:
        yield url


@pytest.fixture(scope="module")
def chat_stack(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("chat-stack"),
        RAGD_CHAT_BASE_URL=upstream,
        RAGD_CHAT_MODEL="smollm2",
        RAGD_CHAT_CONTEXT_TOKENS=str(CHAT_CONTEXT),
        RAGD_CHAT_MAX_OUTPUT_TOKENS=str(MAX_REPLY),
        RAGD_CHAT_DEFAULT_OUTPUT_TOKENS=str(MAX_REPLY),
        # ragd searches with the user's words here (an upstream that does not call tools);
        # tests/test_function_tools.py has the model drive file_search.
        RAGD_CHAT_TOOLS="off",
        # Programs written for OpenAI name OpenAI's models (issue 30).
        RAGD_CHAT_MODEL_ALIASES="gpt-4o-mini=smollm2",
        RAGD_EMBEDDING_MODEL_ALIASES="text-embedding-3-small=all-MiniLM-L6-v2",
    )


@pytest.fixture(scope="module")
def sdk(chat_stack: Stack) -> Iterator[openai.OpenAI]:
    # Closed at the end: a client left to the garbage collector warns of its socket in
    # whichever later test it is collected.
    base_url = f"{chat_stack.gateway_url}/v1"
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def http(chat_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=chat_stack.gateway_url, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="module")
def vector_store(sdk: openai.OpenAI) -> str:
    return facts_store(sdk)


def file_search(store_id: str, **options: Any) -> dict[str, Any]:
    return {"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2, **options}


def test_version_names_the_chat_model(http: httpx.Client) -> None:
    assert http.get("/version").json()["chat"] == {
        "model": "smollm2",
        "context_tokens": CHAT_CONTEXT,
    }


def test_openai_model_names_run_on_the_served_models(sdk: openai.OpenAI) -> None:
    listed = [model.id for model in sdk.models.list()]
    assert listed == ["all-MiniLM-L6-v2", "text-embedding-3-small", "smollm2", "gpt-4o-mini"]
    assert sdk.models.retrieve("GPT-4o-mini").id == "gpt-4o-mini"
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.models.retrieve("gpt-5")
    assert missing.value.code == "model_not_found"

    embedded = sdk.embeddings.create(model="text-embedding-3-small", input="seaweed")
    assert embedded.model == "all-MiniLM-L6-v2" and len(embedded.data[0].embedding) == 384
    with pytest.raises(openai.NotFoundError):
        sdk.embeddings.create(model="text-embedding-3-large", input="seaweed")

    answer = sdk.responses.create(model="gpt-4o-mini", input="Say hi.", max_output_tokens=16)
    assert answer.model == "smollm2" and answer.status in ("completed", "incomplete")
    completion = sdk.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
    )
    assert completion.choices[0].message.content is not None


def test_conversations_and_items_through_the_sdk(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(
        metadata={"topic": "test"},
        items=[{"type": "message", "role": "user", "content": "First question\nmore lines"}],
    )
    assert conversation.id.startswith("conv_")
    assert sdk.conversations.retrieve(conversation.id).metadata == {"topic": "test"}
    updated = sdk.conversations.update(conversation.id, metadata={"topic": "renamed"})
    assert updated.metadata == {"topic": "renamed"}
    new_items: list[Any] = [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A1"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Q2"}]},
        {
            "type": "message",
            "role": "user",
            # A part of a type ragd does not know is kept as it was sent.
            "content": [{"type": "input_text", "text": "Q3"}, {"type": "x_custom", "n": 1}],
        },
    ]
    added: Any = sdk.conversations.items.create(conversation.id, items=new_items)
    assert [item.type for item in added.data] == ["message"] * 3
    first: Any = sdk.conversations.items.list(conversation.id, limit=2, order="asc")
    assert first.has_more
    rest: Any = sdk.conversations.items.list(
        conversation.id, limit=2, order="asc", after=first.data[-1].id
    )
    texts = [item.content[0].text for item in [*first.data, *rest.data]]
    assert texts == ["First question\nmore lines", "A1", "Q2", "Q3"]
    everything = list(sdk.conversations.items.list(conversation.id, limit=1))
    assert [item.id for item in everything] == [
        item.id for item in reversed([*first.data, *rest.data])
    ]
    raw = sdk.conversations.items.with_raw_response.retrieve(
        added.data[2].id, conversation_id=conversation.id
    )
    assert raw.http_response.json()["content"][1] == {"type": "x_custom", "n": 1}
    sdk.conversations.items.delete(added.data[1].id, conversation_id=conversation.id)
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.retrieve(added.data[1].id, conversation_id=conversation.id)
    sdk.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.retrieve(conversation.id)


def test_the_list_of_conversations_and_their_titles(http: httpx.Client) -> None:
    made = http.post(
        "/v1/conversations",
        json={"items": [{"role": "user", "content": "Planning a trip to Porto\nDetails..."}]},
    ).json()
    assert made["title"] == "Planning a trip to Porto"
    named = http.post("/v1/conversations", json={"title": "Named"}).json()
    listed = http.get("/v1/conversations", params={"limit": 100}).json()
    ids = [item["id"] for item in listed["data"]]
    assert ids.index(named["id"]) < ids.index(made["id"])  # most recently active first
    assert (
        http.post(f"/v1/conversations/{named['id']}", json={"title": "Renamed"}).json()["title"]
        == "Renamed"
    )


def test_a_response_with_file_search_cites_the_file(sdk: openai.OpenAI, vector_store: str) -> None:
    response = sdk.responses.create(
        model="smollm2",
        input=QUESTION,
        tools=[file_search(vector_store)],  # type: ignore[list-item]
        include=["file_search_call.results"],
        temperature=0,
    )
    assert response.status in ("completed", "incomplete")
    call, answer = response.output[0], response.output[-1]
    assert call.type == "file_search_call"
    assert call.queries == [QUESTION]
    assert call.results and call.results[0].filename == "zorblatt.txt"
    assert call.model_extra and call.model_extra["ragd_degraded"] is False
    assert answer.type == "message"
    text = answer.content[0]
    assert text.type == "output_text" and text.text
    assert response.output_text == text.text
    cited = {annotation.filename for annotation in text.annotations}  # type: ignore[union-attr]
    assert cited == {"zorblatt.txt"}, text
    assert response.usage and response.usage.input_tokens > 0
    stored: Any = sdk.responses.retrieve(response.id)
    assert stored.output_text == response.output_text
    # Results are shown only when asked for.
    assert stored.output[0].results is None
    shown: Any = sdk.responses.retrieve(response.id, include=["file_search_call.results"])
    assert shown.output[0].results
    inputs: Any = sdk.responses.input_items.list(response.id)
    assert [item.content[0].text for item in inputs.data] == [QUESTION]


def test_a_lexical_file_search_in_a_turn_says_so(
    chat_stack: Stack, sdk: openai.OpenAI, http: httpx.Client, vector_store: str
) -> None:
    """Issue 30.9: with the embedder down the turn's search is lexical, and its
    file_search_call says so (extension ragd_degraded), in the reply and when read back."""
    chat_stack.children["embedder"].kill()
    try:
        response = sdk.responses.create(
            model="smollm2",
            input=QUESTION,
            tools=[file_search(vector_store)],  # type: ignore[list-item]
            max_output_tokens=16,
        )
        call = response.output[0]
        assert call.type == "file_search_call"
        assert call.model_extra and call.model_extra["ragd_degraded"] is True
        stored = sdk.responses.retrieve(response.id).output[0]
        assert stored.model_extra and stored.model_extra["ragd_degraded"] is True
    finally:
        chat_stack.start_service("embedder")
        wait_ready(http)


def test_each_file_search_tool_keeps_its_own_max_num_results(
    sdk: openai.OpenAI, vector_store: str
) -> None:
    """Issue 30.9: max_num_results applies per tool, not the largest of all tools."""
    other = sdk.vector_stores.create(name="more-facts")
    for n in range(3):
        sdk.vector_stores.files.upload_and_poll(
            vector_store_id=other.id,
            file=(f"reactor{n}.txt", f"Reactor note {n}: the Zorblatt reactor hums.".encode()),
            poll_interval_ms=50,
        )
    answer = sdk.responses.create(
        model="smollm2",
        input=QUESTION,
        max_output_tokens=16,
        tools=[
            {"type": "file_search", "vector_store_ids": [vector_store], "max_num_results": 1},
            {
                "type": "file_search",
                "vector_store_ids": [other.id],
                "max_num_results": 3,
                "ranking_options": {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}},
            },
        ],
        include=["file_search_call.results"],
    )
    call = next(item for item in answer.output if item.type == "file_search_call")
    assert call.results is not None
    files = [result.filename for result in call.results]
    assert len(files) == 4 and files.count("zorblatt.txt") + files.count("granite.txt") == 1


def test_a_streamed_response_sends_openai_events_in_order(
    sdk: openai.OpenAI, vector_store: str
) -> None:
    # The SDK's stream holds its connection until closed: a context manager closes it.
    stream = sdk.responses.create(
        model="smollm2",
        input=QUESTION,
        tools=[file_search(vector_store)],  # type: ignore[list-item]
        temperature=0,
        stream=True,
    )
    assert isinstance(stream, openai.Stream)
    with stream:
        events: list[Any] = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:7] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.output_item.done",
    ]
    assert kinds[7:9] == ["response.output_item.added", "response.content_part.added"]
    assert "response.output_text.delta" in kinds
    done_at = kinds.index("response.output_text.done")
    assert set(kinds[9:done_at]) == {"response.output_text.delta"}
    assert set(kinds[done_at + 1 : -3]) <= {"response.output_text.annotation.added"}
    assert kinds[-3:] == [
        "response.content_part.done",
        "response.output_item.done",
        kinds[-1],
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    done = next(event for event in events if event.type == "response.output_text.done")
    assert done.text == deltas
    final = events[-1].response
    assert final.output_text == deltas
    assert sdk.responses.retrieve(final.id).output_text == deltas


def test_a_streamed_response_is_in_progress_until_it_ends(sdk: openai.OpenAI) -> None:
    """Issue 30.7: GET shows a streaming response in progress (not a 404), then as it ended
    with the output ids the stream sent; its turn joins the conversation only at its end."""
    conversation = sdk.conversations.create().id
    stream = sdk.responses.create(
        model="smollm2",
        input="Count from one to fifty in words.",
        conversation=conversation,
        temperature=0,
        stream=True,
    )
    assert isinstance(stream, openai.Stream)
    during = None
    with stream:
        events: list[Any] = []
        for event in stream:
            events.append(event)
            if event.type == "response.output_text.delta" and during is None:
                response_id = events[0].response.id
                during = sdk.responses.retrieve(response_id)
                assert sdk.conversations.items.list(conversation).data == []
                with pytest.raises(openai.ConflictError):
                    sdk.responses.retrieve(response_id, stream=True).close()
    assert during is not None
    assert during.status == "in_progress" and during.output == [] and during.usage is None
    assert during.completed_at is None and during.conversation
    assert during.conversation.id == conversation
    assert during.model == events[0].response.model
    final = events[-1].response
    after = sdk.responses.retrieve(response_id)
    assert after.status == final.status and after.status in ("completed", "incomplete")
    streamed = [e.item.id for e in events if e.type == "response.output_item.added"]
    assert [item.id for item in after.output] == [item.id for item in final.output] == streamed
    items: list[Any] = list(sdk.conversations.items.list(conversation, order="asc"))
    assert [item.role for item in items] == ["user", "assistant"]
    assert items[1].id == after.output[-1].id


def test_a_response_deleted_while_it_streams_is_not_recorded(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create().id
    stream = sdk.responses.create(
        model="smollm2",
        input="Say hello.",
        conversation=conversation,
        max_output_tokens=16,
        stream=True,
    )
    assert isinstance(stream, openai.Stream)
    with stream:
        events: list[Any] = []
        for event in stream:
            events.append(event)
            if event.type == "response.created":
                sdk.responses.delete(event.response.id)
    # The client reads its whole reply; nothing of it is kept.
    assert events[-1].type in ("response.completed", "response.incomplete")
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(events[0].response.id)
    assert sdk.conversations.items.list(conversation).data == []


def test_responses_use_the_sdk_types_fields(sdk: openai.OpenAI) -> None:
    """Issue 30.7: completed_at as OpenAI sets it, the usage counts ResponseUsage requires."""
    for limit in (16, None):
        answer = sdk.responses.create(
            model="smollm2", input="Say only: OK.", temperature=0, max_output_tokens=limit
        )
        read = sdk.responses.retrieve(answer.id)
        for shown in (answer, read):
            assert shown.usage and shown.usage.input_tokens_details.cache_write_tokens == 0
            if shown.status == "completed":
                assert shown.completed_at and shown.completed_at >= shown.created_at
            else:
                assert shown.completed_at is None
                assert shown.incomplete_details
                assert shown.incomplete_details.reason == "max_output_tokens"
        assert read.completed_at == answer.completed_at
        assert answer.max_output_tokens == read.max_output_tokens == (limit or MAX_REPLY)


def test_a_reply_without_a_limit_may_take_what_the_context_leaves(
    upstream: str, tmp_path: Path
) -> None:
    """Issue 30.6: without max_output_tokens (and RAGD_CHAT_DEFAULT_OUTPUT_TOKENS) a reply is
    not cut at RAGD_CHAT_MAX_OUTPUT_TOKENS, only a reserve, and the response says what
    applied."""
    unlimited: Any = started_stack(
        tmp_path,
        RAGD_CHAT_BASE_URL=upstream,
        RAGD_CHAT_MODEL="smollm2",
        RAGD_CHAT_CONTEXT_TOKENS=str(CHAT_CONTEXT),
        RAGD_CHAT_MAX_OUTPUT_TOKENS=str(MAX_REPLY),
    )
    stack = next(unlimited)
    try:
        with openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="unused") as client:
            answer = client.responses.create(model="smollm2", input="Say only: OK.", temperature=0)
            applied = answer.max_output_tokens
            assert applied and MAX_REPLY < applied < CHAT_CONTEXT
            assert client.responses.retrieve(answer.id).max_output_tokens == applied
            assert answer.usage and answer.usage.output_tokens <= applied
    finally:
        unlimited.close()


def test_previous_response_id_carries_the_history(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(
        model="smollm2", input="My favourite colour is teal. Remember it.", temperature=0
    )
    alone = sdk.responses.create(
        model="smollm2", input="What is my favourite colour?", temperature=0
    )
    second = sdk.responses.create(
        model="smollm2",
        input="What is my favourite colour?",
        previous_response_id=first.id,
        temperature=0,
    )
    assert second.previous_response_id == first.id
    assert second.usage and alone.usage
    # The model read the first turn too.
    assert second.usage.input_tokens > alone.usage.input_tokens + 10
    inputs = sdk.responses.input_items.list(second.id)
    assert len(inputs.data) == 1


def test_a_conversation_collects_its_turns(sdk: openai.OpenAI, vector_store: str) -> None:
    conversation = sdk.conversations.create()
    first = sdk.responses.create(
        model="smollm2",
        input=QUESTION,
        conversation=conversation.id,
        tools=[file_search(vector_store)],  # type: ignore[list-item]
        temperature=0,
    )
    second = sdk.responses.create(
        model="smollm2",
        input="Who designed it?",
        conversation={"id": conversation.id},
        temperature=0,
    )
    assert first.conversation and first.conversation.id == conversation.id
    assert second.usage and first.usage
    items: list[Any] = list(sdk.conversations.items.list(conversation.id, order="asc"))
    kinds = [(item.type, getattr(item, "role", None)) for item in items]
    assert kinds == [
        ("message", "user"),
        ("file_search_call", None),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert items[-1].content[0].text == second.output_text
    assert sdk.conversations.retrieve(conversation.id).model_dump()["title"] == QUESTION
    sdk.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(first.id)
    # The conversation keeps its items: they are its history, not the response's.
    assert len(list(sdk.conversations.items.list(conversation.id))) == 5


def test_chat_completions_pass_through_and_persist(sdk: openai.OpenAI, http: httpx.Client) -> None:
    plain = sdk.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Say yes."}], max_tokens=8
    )
    assert plain.choices[0].message.content
    conversation = sdk.conversations.create()
    header = {"X-Ragd-Conversation": conversation.id}
    history: list[Any] = [{"role": "user", "content": "Name a fruit."}]
    reply = sdk.chat.completions.create(
        model="smollm2", messages=history, max_tokens=12, temperature=0, extra_headers=header
    )
    history += [{"role": "assistant", "content": reply.choices[0].message.content}]
    history += [{"role": "user", "content": "Name another one."}]
    with sdk.chat.completions.create(
        model="smollm2",
        messages=history,
        max_tokens=12,
        temperature=0,
        stream=True,
        extra_headers=header,
    ) as stream:
        chunks = list(stream)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    items: list[Any] = list(sdk.conversations.items.list(conversation.id, order="asc"))
    texts = [(item.role, item.content[0].text) for item in items]
    # Each turn once: the re-sent history is not added again.
    assert texts == [
        ("user", "Name a fruit."),
        ("assistant", reply.choices[0].message.content),
        ("user", "Name another one."),
        ("assistant", streamed),
    ]
    unknown = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Ragd-Conversation": "conv_missing"},
    )
    assert unknown.status_code == 404, unknown.text


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            check_event(event)
            yield event


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({}, 400, "input"),
        (
            {"input": "x", "conversation": "conv_x", "previous_response_id": "resp_x"},
            400,
            "conversation",
        ),
        ({"input": "x", "conversation": "conv_x", "store": False}, 400, "store"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, 400, "tools"),
        # Function tools need an upstream that calls tools (RAGD_CHAT_TOOLS is off here).
        ({"input": "x", "tools": [{"type": "function", "name": "f"}]}, 400, "tools"),
        ({"input": "x", "tools": [{"type": "file_search"}]}, 400, "tools"),
        ({"input": "x", "temperature": 3}, 400, "temperature"),
        ({"input": "x", "include": ["nonsense"]}, 400, "include"),
        ({"input": "x", "stream": "yes"}, 400, "stream"),
        ({"input": "x", "conversation": "conv_missing"}, 404, None),
        ({"input": "x", "previous_response_id": "resp_missing"}, 404, None),
        (
            {"input": "x", "tools": [{"type": "file_search", "vector_store_ids": ["vs_missing"]}]},
            404,
            None,
        ),
    ],
)
def test_bad_response_requests_are_refused_before_the_model_runs(
    http: httpx.Client, body: dict[str, Any], status: int, param: str | None
) -> None:
    reply = http.post("/v1/responses", json=body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param:
        assert error["param"] == param


def test_the_context_window_is_kept(http: httpx.Client) -> None:
    long = "word " * (CHAT_CONTEXT * 2)
    refused = http.post("/v1/responses", json={"input": long, "truncation": "disabled"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    conversation = http.post("/v1/conversations", json={}).json()["id"]
    chunk = "history " * 700
    items = [{"role": "user", "content": f"{n} {chunk}"} for n in range(8)]
    http.post(f"/v1/conversations/{conversation}/items", json={"items": items})
    kept = http.post(
        "/v1/responses",
        json={
            "input": "Hello",
            "conversation": conversation,
            "truncation": "auto",
            "max_output_tokens": 16,
        },
    )
    assert kept.status_code == 200, kept.text
    assert kept.json()["truncated_input_items"] > 0
    assert (
        http.post("/v1/responses", json={"input": "Hello", "conversation": conversation}).json()[
            "error"
        ]["code"]
        == "context_length_exceeded"
    )


def test_history_search_finds_turns_by_words_and_by_meaning(http: httpx.Client) -> None:
    def conversation(text: str) -> str:
        made = http.post("/v1/conversations", json={"items": [{"role": "user", "content": text}]})
        return str(made.json()["id"])

    quokka = conversation("The quokka population on Rottnest island")
    seaside = conversation("My dog loves chasing seagulls along the beach")
    conversation("Fixing a flat bicycle tyre with a patch kit")
    lexical = http.post("/v1/conversations/search", json={"query": "quokka", "mode": "lexical"})
    assert lexical.json()["data"][0]["conversation_id"] == quokka
    assert lexical.json()["data"][0]["item"]["content"][0]["text"].startswith("The quokka")
    inside = http.post(f"/v1/conversations/{quokka}/search", json={"query": "rottnest"})
    assert [hit["conversation_id"] for hit in inside.json()["data"]] == [quokka]
    # No word in common: found once the background embedding has reached it.
    body = {"query": "a puppy playing by the ocean", "mode": "vector", "max_num_results": 3}
    deadline = time.monotonic() + 30
    while True:
        found = http.post("/v1/conversations/search", json=body).json()
        ids = [hit["conversation_id"] for hit in found["data"]]
        if ids[:1] == [seaside] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert found["mode"] == "vector" and ids[0] == seaside, found
    # Hybrid (the default) fuses both rankings: other tests' turns share "a" and "the" with
    # the query, so the meaning match need only stay near the top.
    hybrid = http.post("/v1/conversations/search", json={"query": body["query"]}).json()
    assert hybrid["mode"] == "hybrid"
    assert seaside in [hit["conversation_id"] for hit in hybrid["data"][:3]], hybrid
    named = http.post("/v1/conversations/search", json={"query": "quokka"}).json()
    assert named["data"][0]["conversation_id"] == quokka


def test_an_upstream_that_is_down_gives_503_and_a_failed_response(
    chat_stack: Stack, http: httpx.Client, tmp_path: Path
) -> None:
    dead: Any = started_stack(
        tmp_path,
        RAGD_CHAT_BASE_URL="http://127.0.0.1:9/v1",
        RAGD_CHAT_TIMEOUT="5",
    )
    stack = next(dead)
    retrying = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="unused")
    try:
        # The SDK's default retries (2) send the turn three times: the conversation holds it
        # none (a failed turn stays out of it; each failed response keeps its input).
        conversation = retrying.conversations.create().id
        with pytest.raises(openai.InternalServerError) as down:
            retrying.responses.create(input="hi", conversation=conversation)
        assert down.value.status_code == 503 and "127.0.0.1:9" in down.value.message
        assert retrying.conversations.items.list(conversation).data == []
        with httpx.Client(base_url=stack.gateway_url, timeout=60) as client:
            with client.stream(
                "POST",
                "/v1/responses",
                json={"input": "again", "stream": True, "conversation": conversation},
            ) as streamed:
                events = list(sse_events(streamed))
            assert [event["type"] for event in events][-2:] == ["error", "response.failed"]
            failed_id = events[0]["response"]["id"]
            failed = client.get(f"/v1/responses/{failed_id}").json()
            assert failed["status"] == "failed"
            # OpenAI's code, ours in the message (issue 30.7).
            assert failed["error"]["code"] == "server_error"
            assert failed["error"]["message"].startswith("service_unavailable: ")
            assert events[-2]["code"] == "server_error"
            read = retrying.responses.retrieve(failed_id)
            assert read.error and read.error.code in get_args(
                ResponseError.model_fields["code"].annotation
            )
            assert failed["conversation"] == {"id": conversation}
            kept = client.get(f"/v1/responses/{failed_id}/input_items").json()["data"]
            assert [item["content"][0]["text"] for item in kept] == ["again"]
            items = client.get(f"/v1/conversations/{conversation}/items").json()["data"]
            assert items == []
            # Where a retry cannot help, the SDK is told not to.
            unconfigured = client.post("/v1/responses", json={"input": ""})
            assert unconfigured.headers["x-should-retry"] == "false"
    finally:
        retrying.close()
        dead.close()


def test_a_store_killed_mid_stream_leaves_a_whole_turn(
    chat_stack: Stack, http: httpx.Client
) -> None:
    conversation = http.post("/v1/conversations", json={}).json()["id"]
    body = {
        "input": "Tell me a long story about a fox.",
        "conversation": conversation,
        "stream": True,
    }
    with http.stream("POST", "/v1/responses", json=body) as streamed:
        events = []
        for event in sse_events(streamed):
            events.append(event)
            if event["type"] == "response.output_text.delta" and len(events) == 6:
                chat_stack.children["store"].kill()
                time.sleep(0.5)
                chat_stack.start_service("store")
    wait_ready(http)
    # Completed, or cut at max_output_tokens: either way the whole reply the client saw.
    final = events[-1]["response"]
    assert events[-1]["type"] in ("response.completed", "response.incomplete"), final
    assert final["status"] == "completed" or final["incomplete_details"] == {
        "reason": "max_output_tokens"
    }
    stored = http.get(f"/v1/responses/{final['id']}").json()
    assert stored["status"] == final["status"]
    items = http.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"}).json()
    assert [item["role"] for item in items["data"]] == ["user", "assistant"]
    assert items["data"][1]["content"][0]["text"] == stored["output"][0]["content"][0]["text"]
    check_conversation_invariants(Path(chat_stack.env["RAGD_DB_PATH"]))


def test_a_client_that_leaves_mid_stream_keeps_an_incomplete_reply(http: httpx.Client) -> None:
    conversation = http.post("/v1/conversations", json={}).json()["id"]
    body = {
        "input": "Count from one to fifty in words.",
        "conversation": conversation,
        "stream": True,
        "max_output_tokens": 200,
    }
    with http.stream("POST", "/v1/responses", json=body) as streamed:
        for event in sse_events(streamed):
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            if event["type"] == "response.output_text.delta":
                break
    # In progress until the gateway records what was sent.
    deadline = time.monotonic() + 30
    while (stored := http.get(f"/v1/responses/{response_id}")).json()["status"] == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert stored.json()["status"] == "incomplete"
    # OpenAI has no reason for it: null, ours in an extension field.
    assert stored.json()["incomplete_details"] == {
        "reason": None,
        "ragd_reason": "client_disconnected",
    }
    items = http.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"}).json()
    assert [(item["role"], item["status"]) for item in items["data"]] == [
        ("user", "completed"),
        ("assistant", "incomplete"),
    ]


def test_without_an_upstream_responses_say_which_setting_to_set(client: httpx.Client) -> None:
    reply = client.post("/v1/responses", json={"input": "hi"})
    assert reply.status_code == 501
    assert reply.json()["error"]["code"] == "chat_upstream_not_configured"
    assert "RAGD_CHAT_BASE_URL" in reply.json()["error"]["message"]
    chat = client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert chat.status_code == 501
    # Conversations are storage: they work without a model.
    assert client.post("/v1/conversations", json={}).status_code == 200


# `ragd chat`


def ragd(stack: Stack, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        cli, ["--url", stack.gateway_url, "chat", *args], input=input, catch_exceptions=False
    )


def test_ragd_chat_asks_resumes_lists_and_searches(chat_stack: Stack, vector_store: str) -> None:
    asked = ragd(chat_stack, "-n", vector_store, "-q", QUESTION, "--json")
    assert asked.exit_code == 0, asked.output
    response = json.loads(asked.stdout)
    conversation = response["conversation"]["id"]
    assert response["output"][0]["type"] == "file_search_call"
    assert response["output"][0]["results"], "--json asks for the search results"
    # The index is remembered: the resumed turn searches it again without -n.
    resumed = ragd(chat_stack, "--resume", conversation, "-q", "Who designed it?")
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming {conversation}" in resumed.stdout
    assert "sources: [1]" in resumed.stdout and "zorblatt.txt" in resumed.stdout
    listed = ragd(chat_stack, "--list", "--json", "-k", "100")
    [mine] = [row for row in json.loads(listed.stdout) if row["id"] == conversation]
    assert mine["turn_count"] == 2 and mine["title"] == QUESTION
    table = ragd(chat_stack, "--list")
    assert conversation in table.stdout and "TURNS" in table.stdout
    found = ragd(chat_stack, "--search", "Zorblatt", "--json", "-k", "100")
    assert conversation in {hit["conversation_id"] for hit in json.loads(found.stdout)}
    missing = ragd(chat_stack, "--resume", "conv_nosuch", "-q", "hi")
    assert missing.exit_code != 0 and "conv_nosuch" in missing.output


def test_ragd_chat_session_commands(chat_stack: Stack, http: httpx.Client) -> None:
    session = ragd(chat_stack, input="Say hello.\n/sources\n/regen\n/bogus\n/quit\n")
    assert session.exit_code == 0, session.output
    out = session.stdout
    assert "assistant>" in out and "no sources: this answer searched nothing" in out
    assert "asking again: Say hello." in out and "unknown command /bogus" in out
    conversation = out.rsplit("ragd chat --resume ", 1)[1].split()[0]
    # /regen replaced the first exchange: one question, one answer.
    items = http.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"}).json()
    assert [item["role"] for item in items["data"]] == ["user", "assistant"], items
    # The answer may be cut at the test's reply limit: the CLI does not set a temperature.
    assert items["data"][1]["status"] in ("completed", "incomplete")
