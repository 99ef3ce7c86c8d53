"""Bad input is a 4xx with a stable code, never a 500 (the shared stack): nesting bombs, numbers
that are not JSON's or that Python will not convert, cost bounds on searches, embeddings and
recorded chat turns, numbers and text protobuf cannot carry, names without bounds, and odd
paths; a refused write stores nothing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from services.common.json_text import MAX_INT_DIGITS
from services.common.vocabulary import (
    MAX_FILENAME_CHARS,
    MAX_NAME_CHARS,
    MAX_NEW_ITEMS,
    MAX_QUERY_CHARS,
    MAX_REQUEST_TOKENS,
    MAX_SEARCH_QUERIES,
)
from services.gateway.params import MAX_JSON_BYTES, MAX_JSON_DEPTH


@pytest.fixture(scope="module")
def store_id(client: httpx.Client) -> str:
    reply = client.post("/v1/vector_stores", json={"name": "bad-input"})
    assert reply.status_code == 200, reply.text
    value: str = reply.json()["id"]
    return value


@pytest.fixture(scope="module")
def conversation_id(client: httpx.Client) -> str:
    reply = client.post(
        "/v1/conversations", json={"items": [{"role": "user", "content": "the only item"}]}
    )
    assert reply.status_code == 200, reply.text
    value: str = reply.json()["id"]
    return value


def item_count(client: httpx.Client, conversation_id: str) -> int:
    reply = client.get(f"/v1/conversations/{conversation_id}/items", params={"limit": 100})
    assert reply.status_code == 200, reply.text
    return len(reply.json()["data"])


def refused(reply: httpx.Response, status: int = 400, code: str | None = None) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()["error"]
    assert error["code"], error  # every refusal says which one it is
    if code is not None:
        assert error["code"] == code, error
    return error


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """JSON as clients may send it: ASCII, lone surrogates as \\u escapes."""
    return client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


JSON_ROUTES = [
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/vector_stores"),
    ("POST", "/v1/vector_stores/{store}"),
    ("POST", "/v1/vector_stores/{store}/search"),
    ("POST", "/v1/vector_stores/{store}/files"),
    ("POST", "/v1/vector_stores/{store}/file_batches"),
    ("POST", "/v1/conversations"),
    ("POST", "/v1/conversations/{conversation}"),
    ("POST", "/v1/conversations/{conversation}/items"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/admin/backup"),
    ("POST", "/admin/vacuum"),
]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 2_000, 100_000])
@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_nesting_bombs_are_400_on_every_json_route(
    client: httpx.Client, store_id: str, conversation_id: str, method: str, path: str, depth: int
) -> None:
    reply = client.request(
        method,
        path.format(store=store_id, conversation=conversation_id),
        content=nested(depth),
        headers={"Content-Type": "application/json"},
    )
    error = refused(reply, code="too_deep")
    assert str(MAX_JSON_DEPTH) in error["message"]


# One digit more than Python's json converts (it raised a bare ValueError, and the connection
# was dropped); NaN and the infinities, which it reads but JSON has not (SQLite's json_valid
# refused them as the store wrote them: a 500, or a reply acknowledged and never stored).
HUGE = b"9" * (MAX_INT_DIGITS + 1)
NOT_JSON_NUMBERS = {
    "a long integer": (b'{"input": "x", "n": ' + HUGE + b"}", f"{MAX_INT_DIGITS + 1} digits at n"),
    "a long negative integer deep inside": (
        b'{"a": [{"b": [-' + HUGE + b"]}]}",
        "digits at a[0].b[0]",
    ),
    "NaN": (b'{"a": {"b": NaN}}', "NaN at a.b"),
    "Infinity": (b'{"a": [Infinity]}', "Infinity at a[0]"),
    "-Infinity": (b'{"a": -Infinity}', "-Infinity at a"),
    "a float that overflows": (b'{"a": 1e999}', "1e999 at a"),
}


@pytest.mark.parametrize("case", NOT_JSON_NUMBERS)
@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_numbers_json_has_not_are_400_on_every_json_route(
    client: httpx.Client, store_id: str, conversation_id: str, method: str, path: str, case: str
) -> None:
    body, named = NOT_JSON_NUMBERS[case]
    reply = client.request(
        method,
        path.format(store=store_id, conversation=conversation_id),
        content=body,
        headers={"Content-Type": "application/json"},
    )
    error = refused(reply, code="invalid_number")
    assert error["message"].startswith("the request body has") and named in error["message"]
    # The parameter is the body's member that holds the number.
    assert error["param"] == named.split(" at ")[1].split(".")[0].split("[")[0], error


CHAT = "/v1/chat/completions"
CONVERSATION = "X-Ragd-Conversation"


def test_refused_chat_writes_store_nothing(client: httpx.Client, conversation_id: str) -> None:
    """Each refused before anything is stored: the conversation keeps its one item."""
    at = f"/v1/conversations/{conversation_id}/items"
    nan = float("nan")
    for path, body in (
        ("/v1/conversations", {"items": [{"role": "user", "content": [{"type": "x", "n": nan}]}]}),
        (at, {"items": [{"role": "user", "content": "hi", "extra": {"n": float("inf")}}]}),
        (
            "/v1/responses",
            {
                "input": "what is in the notes?",
                "conversation": conversation_id,
                "tools": [{"type": "function", "name": "f", "parameters": {"maximum": nan}}],
            },
        ),
        (
            "/v1/responses",
            {
                "input": [{"role": "user", "content": "x", "n": -nan}],
                "conversation": conversation_id,
            },
        ),
    ):
        error = refused(post(client, path, body), code="invalid_number")
        assert error["param"] in {"items", "tools", "input"}, error
    reply = client.post(
        CHAT,
        content=json.dumps({"messages": [{"role": "user", "content": "x", "weight": nan}]}),
        headers={"Content-Type": "application/json", CONVERSATION: conversation_id},
    )
    assert refused(reply, code="invalid_number")["param"] == "messages"
    assert item_count(client, conversation_id) == 1


def messages(count: int, assistant_at: int | None = None) -> list[dict[str, str]]:
    return [
        {"role": "assistant" if index == assistant_at else "user", "content": f"message {index}"}
        for index in range(count)
    ]


def test_a_recorded_chat_turn_adds_at_most_20_messages(
    client: httpx.Client, conversation_id: str
) -> None:
    header = {CONVERSATION: conversation_id}
    # 100,000 messages were once stored from one request.
    for count in (MAX_NEW_ITEMS + 1, 100_000):
        reply = client.post(CHAT, json={"messages": messages(count)}, headers=header)
        error = refused(reply)
        assert error["param"] == "messages" and str(MAX_NEW_ITEMS) in error["message"], error
    assert item_count(client, conversation_id) == 1
    # Within the bound, or not recorded, or with the earlier ones answered already: the
    # request goes on (to a 501, this stack having no chat model).
    for body, headers in (
        ({"messages": messages(MAX_NEW_ITEMS)}, header),
        ({"messages": messages(MAX_NEW_ITEMS + 1)}, {}),
        ({"messages": messages(MAX_NEW_ITEMS + 5, assistant_at=4)}, header),
    ):
        reply = client.post(CHAT, json=body, headers=headers)
        assert reply.status_code == 501, reply.text


@pytest.mark.parametrize("field", ["attributes", "chunking_strategy"])
@pytest.mark.parametrize(
    ("value", "code"),
    [
        (b'{"n": ' + HUGE + b"}", "invalid_number"),
        (b'{"n": NaN}', "invalid_number"),
        (nested(2_000), "too_deep"),
        (nested(MAX_JSON_DEPTH + 1), "too_deep"),
        (b"{not json", "invalid_json"),
    ],
)
def test_json_form_fields_are_read_as_json_bodies_are(
    client: httpx.Client, store_id: str, field: str, value: bytes, code: str
) -> None:
    before = client.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]["total"]
    reply = client.post(
        f"/v1/vector_stores/{store_id}/files",
        files={"file": ("form.txt", b"a file sent with a form")},
        data={field: value.decode()},
    )
    error = refused(reply, code=code)
    assert error["param"] == field and error["message"].startswith(f"'{field}'"), error
    assert client.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]["total"] == before


def test_a_body_over_the_route_limit_is_413(client: httpx.Client, store_id: str) -> None:
    body = b'{"query": "' + b"x" * MAX_JSON_BYTES + b'"}'
    reply = client.post(
        f"/v1/vector_stores/{store_id}/search",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert str(MAX_JSON_BYTES) in refused(reply, 413, "request_too_large")["message"]


@pytest.mark.parametrize(
    ("body", "code", "named"),
    [
        ({"query": ["q"] * (MAX_SEARCH_QUERIES + 1)}, "too_many_queries", str(MAX_SEARCH_QUERIES)),
        ({"query": "x" * (MAX_QUERY_CHARS + 1)}, "query_too_long", str(MAX_QUERY_CHARS)),
        # Within the characters, beyond the model's 256 tokens: refused, not silently cut.
        ({"query": "word " * 400}, "context_length_exceeded", "256"),
        ({"query": "word " * 400, "mode": "hybrid"}, "context_length_exceeded", "256"),
        (
            {"query": "x", "filters": {"type": "eq", "key": "n", "value": 10**400}},
            "invalid_value",
            "finite",
        ),
        (
            {"query": "x", "filters": {"type": "eq", "key": "\ud800", "value": 1}},
            "invalid_value",
            "Unicode",
        ),
    ],
)
def test_searches_are_bounded(
    client: httpx.Client, store_id: str, body: dict[str, Any], code: str, named: str
) -> None:
    reply = post(client, f"/v1/vector_stores/{store_id}/search", body)
    assert named in refused(reply, code=code)["message"]


def test_a_long_lexical_query_within_the_characters_is_searched(
    client: httpx.Client, store_id: str
) -> None:
    reply = client.post(
        f"/v1/vector_stores/{store_id}/search", json={"query": "word " * 400, "mode": "lexical"}
    )
    assert reply.status_code == 200, reply.text


def test_embeddings_hold_at_most_300k_tokens_per_request(client: httpx.Client) -> None:
    # 1300 inputs of 250 tokens each: every one fits the model, all of them do not.
    text = " ".join(["lighthouse"] * 248)
    reply = client.post("/v1/embeddings", json={"input": [text] * 1300})
    error = refused(reply, code="max_tokens_per_request")
    assert str(MAX_REQUEST_TOKENS) in error["message"] and error["param"] == "input"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/vector_stores", {"name": "x" * (MAX_NAME_CHARS + 1)}, "name"),
        ("/v1/vector_stores", {"name": "bad \ud800"}, "name"),
        ("/v1/vector_stores", {"metadata": {"k": "\udfff"}}, "metadata"),
        ("/v1/vector_stores", {"metadata": {"\ud800": "v"}}, "metadata"),
        (
            "/v1/vector_stores/{store}/files",
            {"text": "hello", "filename": "f" * (MAX_FILENAME_CHARS + 1) + ".txt"},
            "filename",
        ),
        (
            "/v1/vector_stores/{store}/files",
            {"text": "hello", "filename": "a.txt", "attributes": {"year": 10**400}},
            "attributes",
        ),
        (
            "/v1/vector_stores/{store}/files",
            {"text": "hello", "filename": "a.txt", "attributes": {"k": "\ud800"}},
            "attributes",
        ),
    ],
)
def test_values_protobuf_cannot_carry_are_400(
    client: httpx.Client, store_id: str, path: str, body: dict[str, Any], param: str
) -> None:
    reply = post(client, path.format(store=store_id), body)
    assert refused(reply)["param"] == param


def test_a_file_purpose_must_be_one_of_openais(client: httpx.Client) -> None:
    reply = client.post(
        "/v1/files", files={"file": ("a.txt", b"hello")}, data={"purpose": "anything"}
    )
    assert "assistants" in refused(reply)["message"]


def test_vacuum_refuses_a_body_that_is_not_json(client: httpx.Client) -> None:
    refused(client.post("/admin/vacuum", content=b"not json"), code="invalid_json")


@pytest.mark.parametrize(
    "name",
    ["bad\nname.db", "tab\tname.db", "x" * 300 + ".db", "/abs/olute.db", "../up.db", "no-suffix"],
)
def test_backup_names_are_plain_and_bounded(client: httpx.Client, name: str) -> None:
    refused(client.post("/admin/backup", json={"path": name}))


@pytest.mark.parametrize("path", ["/v1/files/%2e%2e%2f", "/v1/vector_stores/", "/v1/files/"])
def test_odd_paths_are_json_404s_not_redirects(client: httpx.Client, path: str) -> None:
    reply = client.get(path, follow_redirects=False)
    refused(reply, 404)
