"""Hard limits and awkward input through the REST API: clear errors or correct vectors, and
the embedder process always survives (its PID is checked after each case)."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import numpy as np
import pytest

from services.launcher import Stack

# all-MiniLM-L6-v2 takes 256 tokens, [CLS] and [SEP] included; "hello" is one token.
LIMIT = 256


def fits(tokens: int) -> str:
    return "hello " * (tokens - 2)


@pytest.fixture
def embedder_pid(stack: Stack) -> Any:
    """The embedder's PID before the test; after it, the same process must still be alive."""
    child = stack.children["embedder"]
    pid = child.pid
    assert child.alive()
    yield pid
    assert child.alive(), f"the embedder died:\n{child.log_tail()}"
    assert stack.children["embedder"].pid == pid


def post(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.post("/v1/embeddings", json=body)


def vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == list(range(len(data)))
    return np.array([item["embedding"] for item in data], dtype=np.float32)


def test_the_longest_input_is_accepted_and_one_more_token_is_not(
    client: httpx.Client, embedder_pid: int
) -> None:
    accepted = post(client, {"input": fits(LIMIT)})
    assert vectors(accepted).shape == (1, 384)
    assert accepted.json()["usage"]["prompt_tokens"] == LIMIT

    refused = post(client, {"input": ["short", fits(LIMIT + 1)]})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "input"
    assert error["type"] == "invalid_request_error"
    assert f"input 1 has {LIMIT + 1} tokens" in error["message"]
    assert f"at most {LIMIT}" in error["message"]
    assert '"truncate": true' in error["message"]


def test_truncation_is_per_request_and_reported(client: httpx.Client, embedder_pid: int) -> None:
    long = "word " * 5000
    response = post(client, {"input": [long, "short one"], "truncate": True})
    assert vectors(response).shape == (2, 384)
    body = response.json()
    assert [item["truncated"] for item in body["data"]] == [True, False]
    assert body["usage"]["prompt_tokens"] == LIMIT + 4
    # Truncation keeps the first tokens: the same vector as the input cut to the limit.
    cut = vectors(post(client, {"input": fits(LIMIT).replace("hello", "word")}))[0]
    assert float(vectors(response)[0] @ cut) > 0.9999
    # Without the flag the reply has no extension field, and the default is to refuse.
    assert "truncated" not in post(client, {"input": "short"}).json()["data"][0]
    assert post(client, {"input": long}).status_code == 400
    assert post(client, {"input": long, "truncate": False}).status_code == 400


@pytest.mark.parametrize("value", ["yes", 1, {"a": 1}])
def test_truncate_must_be_a_boolean(client: httpx.Client, value: Any) -> None:
    response = post(client, {"input": "x", "truncate": value})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "truncate"
    # JSON null means "not given", as for OpenAI's own optional parameters.
    assert post(client, {"input": fits(LIMIT + 1), "truncate": None}).status_code == 400


def test_batch_limits(client: httpx.Client, embedder_pid: int) -> None:
    # Many more inputs than a forward pass holds (32): split into passes inside, in order.
    texts = [f"item {i}" for i in range(256)]
    many = post(client, {"input": texts, "encoding_format": "base64"})
    assert many.status_code == 200, many.text
    data = many.json()["data"]
    assert [item["index"] for item in data] == list(range(256))
    got = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data])
    assert got.shape == (256, 384)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    alone = vectors(post(client, {"input": [texts[200], texts[7]]}))
    assert float(alone[0] @ got[200]) > 0.9999 and float(alone[1] @ got[7]) > 0.9999
    # Beyond OpenAI's 2048 inputs per request: a 400 before any work.
    too_many = post(client, {"input": ["x"] * 2049})
    assert too_many.status_code == 400
    assert "2048" in too_many.json()["error"]["message"]


@pytest.mark.parametrize(
    "inputs",
    [
        [""],
        ["fine", ""],
        [],
    ],
    ids=["empty-string", "one-empty-string", "empty-array"],
)
def test_empty_input_is_a_clear_400(
    client: httpx.Client, embedder_pid: int, inputs: list[str]
) -> None:
    response = post(client, {"input": inputs})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input"
    assert "empty" in response.json()["error"]["message"]


UNICODE = {
    "emoji-zwj": "👩‍👩‍👧‍👦 family 🎉🔥",
    "cjk": "東京タワーは高い。北京欢迎你。서울",
    "combining-marks": "e\u0301\u0302\u0303 a\u0300 Z\u0351\u0337\u0353",
    "nul-inside": "a\x00b",
    "only-nul": "\x00",
    "zero-width-only": "\u200d\u200b\ufeff",
    "right-to-left": "مرحبا بالعالم שלום",
    "bidi-controls": "\u202eabc\u202d",
    "control-chars": "\x01\x02\x1b[31mred",
    "whitespace-only": "   \n\t",
    "astral-plane": "\U0001d407\U0001d41e\U0001d425\U0001d425\U0001d428 \U0010fffd",
    "one-long-word": "x" * 3000,
}


@pytest.mark.parametrize("text", list(UNICODE.values()), ids=list(UNICODE))
def test_unicode_edge_cases_embed_to_unit_vectors(
    client: httpx.Client, embedder_pid: int, text: str
) -> None:
    response = post(client, {"input": [text, "plain"], "truncate": True})
    got = vectors(response)
    assert got.shape == (2, 384)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_nul_is_dropped_like_the_reference_tokenizer(client: httpx.Client) -> None:
    # BERT's normalizer removes control characters: "a\0b" is "ab", not "a".
    got = vectors(post(client, {"input": ["a\x00b", "ab", "a"]}))
    assert float(got[0] @ got[1]) > 0.9999
    assert float(got[0] @ got[2]) < 0.99


def test_lone_surrogate_is_a_400(client: httpx.Client, embedder_pid: int) -> None:
    response = client.post(
        "/v1/embeddings",
        content=b'{"input": ["ok", "bad \\ud800 half"]}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert "input 1" in response.json()["error"]["message"]
