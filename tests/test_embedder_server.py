"""The embedder's gRPC server, in-process on port 0 and as `python -m services.embedder`."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ConfigError
from services.common.vectors import from_bytes
from services.embedder.config import EmbedderConfig
from services.embedder.model import EmbeddingModel
from services.embedder.server import SERVICE_NAME, create_server
from services.pb import embedder_pb2 as pb
from services.pb import embedder_pb2_grpc
from tests.embedder_fixtures import MODEL_PATH, ROOT
from tests.harness import free_port

CONFIG = EmbedderConfig(listen="127.0.0.1:0", model_path=MODEL_PATH, threads=2)
LONG = "hello " * 300


@asynccontextmanager
async def serving(
    model: EmbeddingModel, config: EmbedderConfig = CONFIG
) -> AsyncIterator[grpc.aio.Channel]:
    server, port = await create_server(config, model)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(0)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def test_embed_tokenize_info(embedding_model: EmbeddingModel) -> None:
    texts = ["a cat sits on the mat", "東京タワー 🎉", LONG]

    async def scenario() -> None:
        async with serving(embedding_model) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            info = await stub.Info(pb.InfoRequest())
            embedded = await stub.Embed(
                pb.EmbedRequest(
                    texts=[t.encode() for t in texts], truncate=pb.TRUNCATE_POLICY_TRUNCATE
                )
            )
            tokens = await stub.Tokenize(
                pb.TokenizeRequest(texts=[t.encode() for t in texts], return_ids=True)
            )
            counts = await stub.Tokenize(pb.TokenizeRequest(texts=[b"one two"]))

        assert info.model == "all-MiniLM-L6-v2"
        assert (info.dimensions, info.max_input_tokens, info.pooling) == (384, 256, "mean")
        assert info.normalized
        assert info.model_digest == embedding_model.info.digest
        assert info.default_truncate == pb.TRUNCATE_POLICY_REJECT
        assert info.max_batch_tokens == embedding_model.info.max_batch_tokens
        assert info.max_batch_inputs == embedding_model.info.max_batch_inputs

        assert embedded.model == "all-MiniLM-L6-v2"
        assert embedded.dimensions == 384
        vectors = from_bytes(embedded.vectors, embedded.dimensions, count=len(texts))
        expected = embedding_model.embed(texts, truncate=True).vectors
        np.testing.assert_allclose(np.sum(vectors * expected, axis=1), 1.0, atol=1e-5)
        assert list(embedded.truncated) == [False, False, True]
        assert embedded.token_counts[2] == 256

        local = embedding_model.tokenize(texts)
        assert [r.count for r in tokens.results] == [len(ids) for ids in local]
        assert [list(r.ids) for r in tokens.results] == local
        assert tokens.results[2].count == 302
        assert counts.results[0].count == 4 and not counts.results[0].ids

    run(scenario)


def test_health_is_serving(embedding_model: EmbeddingModel) -> None:
    async def scenario() -> None:
        async with serving(embedding_model) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for name in ("", SERVICE_NAME):
                reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
                assert reply.status == health_pb2.HealthCheckResponse.SERVING

    run(scenario)


@pytest.mark.parametrize(
    ("texts", "policy", "message"),
    [
        ([], pb.TRUNCATE_POLICY_UNSPECIFIED, "no input texts"),
        ([b"ok", b""], pb.TRUNCATE_POLICY_TRUNCATE, "input 1 is an empty string"),
        (
            [b"ok", b"ok", b"bad \xff\xfe"],
            pb.TRUNCATE_POLICY_UNSPECIFIED,
            "input 2 is not valid UTF-8",
        ),
        (
            [b"ok", LONG.encode()],
            pb.TRUNCATE_POLICY_REJECT,
            "input 1 has 302 tokens .* at most 256",
        ),
        # The server's default policy is reject.
        ([LONG.encode()], pb.TRUNCATE_POLICY_UNSPECIFIED, "input 0 has 302 tokens"),
    ],
)
def test_bad_input_is_invalid_argument(
    embedding_model: EmbeddingModel,
    texts: list[bytes],
    policy: pb.TruncatePolicy.ValueType,
    message: str,
) -> None:
    async def scenario() -> None:
        async with serving(embedding_model) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Embed(pb.EmbedRequest(texts=texts, truncate=policy))
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert re.search(message, raised.value.details() or ""), raised.value.details()
            # The server is still fine afterwards.
            reply = await stub.Embed(pb.EmbedRequest(texts=[b"still here"]))
            assert reply.dimensions == 384

    run(scenario)


def test_tokenize_rejects_invalid_utf8(embedding_model: EmbeddingModel) -> None:
    async def scenario() -> None:
        async with serving(embedding_model) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Tokenize(pb.TokenizeRequest(texts=[b"\xc3"]))
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "input 0 is not valid UTF-8" in (raised.value.details() or "")

    run(scenario)


def test_truncate_by_default_when_configured(embedding_model: EmbeddingModel) -> None:
    async def scenario() -> None:
        async with serving(embedding_model, replace(CONFIG, truncate=True)) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            info = await stub.Info(pb.InfoRequest())
            assert info.default_truncate == pb.TRUNCATE_POLICY_TRUNCATE
            reply = await stub.Embed(pb.EmbedRequest(texts=[LONG.encode()]))
            assert list(reply.truncated) == [True]
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Embed(
                    pb.EmbedRequest(texts=[LONG.encode()], truncate=pb.TRUNCATE_POLICY_REJECT)
                )
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    run(scenario)


def test_concurrent_calls_are_all_answered(embedding_model: EmbeddingModel) -> None:
    async def scenario() -> None:
        async with serving(embedding_model) as channel:
            stub = embedder_pb2_grpc.EmbedderStub(channel)
            texts = [f"request {i} about topic {i % 3}".encode() for i in range(12)]
            replies = await asyncio.gather(
                *(stub.Embed(pb.EmbedRequest(texts=[text])) for text in texts)
            )
        expected = embedding_model.embed([t.decode() for t in texts]).vectors
        for reply, vector in zip(replies, expected, strict=True):
            got = from_bytes(reply.vectors, 384, count=1)[0]
            assert float(got @ vector) > 0.9999

    run(scenario)


def test_config_from_env() -> None:
    env = {"RAGD_MODEL_PATH": str(MODEL_PATH)}
    config = EmbedderConfig.from_env(env)
    assert config.listen == "127.0.0.1:50051"
    assert config.truncate is False
    assert config.threads == (os.cpu_count() or 2)
    custom = EmbedderConfig.from_env(
        {
            **env,
            "RAGD_EMBEDDER_LISTEN": "0.0.0.0:6000",
            "RAGD_EMBEDDER_TRUNCATE": "Truncate",
            "RAGD_EMBEDDER_THREADS": "3",
            "RAGD_MODEL_NAME": "minilm",
        }
    )
    assert (custom.listen, custom.truncate, custom.threads) == ("0.0.0.0:6000", True, 3)
    assert custom.model_name == "minilm"
    with pytest.raises(ConfigError, match="reject or truncate"):
        EmbedderConfig.from_env({**env, "RAGD_EMBEDDER_TRUNCATE": "maybe"})
    with pytest.raises(ConfigError, match="RAGD_EMBEDDER_THREADS"):
        EmbedderConfig.from_env({**env, "RAGD_EMBEDDER_THREADS": "0"})
    with pytest.raises(ConfigError, match="make model"):
        EmbedderConfig.from_env({"RAGD_MODEL_PATH": "/nonexistent/model.gguf"})


def _spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "services.embedder"],
            cwd=ROOT,
            env={**os.environ, "RAGD_EMBEDDER_THREADS": "1", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_main_serves_until_sigterm(tmp_path: Path) -> None:
    target = f"127.0.0.1:{free_port()}"
    log = tmp_path / "embedder.log"
    process = _spawn({"RAGD_EMBEDDER_LISTEN": target, "RAGD_MODEL_PATH": str(MODEL_PATH)}, log)
    try:
        deadline = time.monotonic() + 60
        with grpc.insecure_channel(target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                try:
                    reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    time.sleep(0.1)
            embedded = embedder_pb2_grpc.EmbedderStub(channel).Embed(
                pb.EmbedRequest(texts=[b"hello"]), timeout=30
            )
            assert embedded.dimensions == 384
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert f"embedder listening on {target}" in log.read_text()


def test_main_fails_fast_without_a_model(tmp_path: Path) -> None:
    log = tmp_path / "embedder.log"
    process = _spawn({"RAGD_MODEL_PATH": str(tmp_path / "missing.gguf")}, log)
    assert process.wait(timeout=30) != 0
    assert "make model" in log.read_text()
