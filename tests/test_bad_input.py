"""Bad input is a 4xx with a stable code, never a 500 (the shared stack): nesting bombs, cost
bounds on searches and embeddings, numbers and text protobuf cannot carry, names without
bounds, and odd paths."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from services.common.vocabulary import (
    MAX_FILENAME_CHARS,
    MAX_NAME_CHARS,
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
    ("POST", "/admin/backup"),
    ("POST", "/admin/vacuum"),
]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 2_000, 100_000])
@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_nesting_bombs_are_400_on_every_json_route(
    client: httpx.Client, store_id: str, method: str, path: str, depth: int
) -> None:
    reply = client.request(
        method,
        path.format(store=store_id),
        content=nested(depth),
        headers={"Content-Type": "application/json"},
    )
    error = refused(reply, code="too_deep")
    assert str(MAX_JSON_DEPTH) in error["message"]


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
