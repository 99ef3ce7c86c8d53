"""Dynamic batching: the Batcher core against the real model, then through the gRPC server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import grpc
import numpy as np
import pytest

from services.common.config import ConfigError
from services.common.vectors import FloatMatrix, from_bytes
from services.embedder.batcher import Batcher, BatchLimits, QueueFull
from services.embedder.config import EmbedderConfig
from services.embedder.model import EmbeddingModel
from services.embedder.server import create_server
from services.pb import embedder_pb2 as pb
from services.pb import embedder_pb2_grpc
from tests.embedder_fixtures import MODEL_PATH

CONFIG = EmbedderConfig(listen="127.0.0.1:0", model_path=MODEL_PATH, threads=2)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


class Passes:
    """The model's forward pass on its own thread, recording what each pass held."""

    def __init__(self, model: EmbeddingModel) -> None:
        self.model = model
        self.sizes: list[tuple[int, int]] = []
        self._thread = ThreadPoolExecutor(max_workers=1)

    async def __call__(self, sequences: list[Sequence[int]]) -> FloatMatrix:
        self.sizes.append((len(sequences), sum(len(ids) for ids in sequences)))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self.model.forward, sequences)

    def close(self) -> None:
        self._thread.shutdown(wait=True)


@asynccontextmanager
async def batching(model: EmbeddingModel, **limits: Any) -> AsyncIterator[tuple[Batcher, Passes]]:
    passes = Passes(model)
    info = model.info
    settings = {"max_tokens": info.max_batch_tokens, "max_inputs": info.max_batch_inputs}
    batcher = Batcher(passes, BatchLimits(**{**settings, **limits}), info.dimensions)
    batcher.start()
    try:
        yield batcher, passes
    finally:
        await batcher.close()
        passes.close()


def texts_of_lengths(lengths: Sequence[int]) -> list[str]:
    # "hello" is one token; with [CLS] and [SEP], n - 2 of them make n tokens.
    return ["hello " * (n - 2) for n in lengths]


def assert_same_vectors(got: FloatMatrix, expected: FloatMatrix) -> None:
    assert got.shape == expected.shape
    np.testing.assert_allclose(np.sum(got * expected, axis=1), 1.0, atol=1e-4)


def test_concurrent_requests_share_passes(embedding_model: EmbeddingModel) -> None:
    texts = [f"request {i} about topic {i % 5}" for i in range(24)]
    expected = embedding_model.embed(texts).vectors
    prepared = [embedding_model.prepare([text]).inputs for text in texts]

    async def scenario() -> None:
        async with batching(embedding_model) as (batcher, passes):
            results = await asyncio.gather(*(batcher.embed(inputs) for inputs in prepared))
            assert_same_vectors(np.vstack(results), expected)
            # The first request starts at once; the others wait for it and then go together.
            assert len(passes.sizes) < len(texts) / 4, passes.sizes
            assert batcher.stats.requests == len(texts)
            assert batcher.stats.inputs == len(texts)
            assert batcher.stats.batches == len(passes.sizes)
            assert (batcher.queued_inputs, batcher.queued_tokens) == (0, 0)

    run(scenario)


def test_large_requests_are_split_within_limits_in_order(embedding_model: EmbeddingModel) -> None:
    big = texts_of_lengths([40, 256, 3, 130, 250, 10, 60, 5, 100, 30])
    small = [f"short text {i}" for i in range(10)]
    expected_big = embedding_model.embed(big).vectors
    expected_small = embedding_model.embed(small).vectors

    async def scenario() -> None:
        limits = {"max_tokens": 512, "max_inputs": 4}
        async with batching(embedding_model, **limits) as (batcher, passes):
            big_inputs = embedding_model.prepare(big).inputs
            assert max(len(ids) for ids in big_inputs) == 256
            results = await asyncio.gather(
                batcher.embed(big_inputs),
                *(batcher.embed(embedding_model.prepare([text]).inputs) for text in small),
            )
            assert_same_vectors(results[0], expected_big)
            assert_same_vectors(np.vstack(results[1:]), expected_small)
            assert all(n <= 4 and tokens <= 512 for n, tokens in passes.sizes), passes.sizes
            assert sum(n for n, _ in passes.sizes) == len(big) + len(small)

    run(scenario)


class Timed(Passes):
    """Passes that record when each ran."""

    def __init__(self, model: EmbeddingModel) -> None:
        super().__init__(model)
        self.spans: list[tuple[float, float]] = []

    async def __call__(self, sequences: list[Sequence[int]]) -> FloatMatrix:
        began = time.perf_counter()
        try:
            return await super().__call__(sequences)
        finally:
            self.spans.append((began, time.perf_counter()))


def test_passes_run_side_by_side_on_several_contexts(embedding_model: EmbeddingModel) -> None:
    """Two contexts of one thread each: a large request's passes run on both at once, and its
    vectors are the one model's, in order."""
    texts = texts_of_lengths([200, 180, 220, 150, 240, 90, 210, 160])
    expected = embedding_model.embed(texts).vectors
    inputs = embedding_model.prepare(texts).inputs
    second = EmbeddingModel(MODEL_PATH, threads=1)
    contexts = [Timed(embedding_model), Timed(second)]
    info = embedding_model.info

    async def scenario() -> None:
        limits = BatchLimits(max_tokens=info.max_batch_tokens, max_inputs=info.max_batch_inputs)
        batcher = Batcher(contexts, limits, info.dimensions)
        batcher.start()
        try:
            assert_same_vectors(await batcher.embed(inputs), expected)
            # Two small requests at once (two ingest workers' files): one pass on each
            # context, not one pass with both while the other context idles.
            before = [len(context.spans) for context in contexts]
            await asyncio.gather(batcher.embed(inputs[:1]), batcher.embed(inputs[1:2]))
            assert [len(c.spans) - n for c, n in zip(contexts, before, strict=True)] == [1, 1]
        finally:
            await batcher.close()
        spans = [context.spans for context in contexts]
        assert all(spans)
        assert any(a < d and c < b for a, b in spans[0] for c, d in spans[1]), spans
        assert batcher.stats.batches == sum(len(context.spans) for context in contexts)

    try:
        run(scenario)
    finally:
        for context in contexts:
            context.close()
        second.close()


def test_full_queue_refuses_at_once_but_an_empty_one_takes_anything(
    embedding_model: EmbeddingModel,
) -> None:
    one = embedding_model.prepare(["a few words here"]).inputs  # 6 tokens
    many = embedding_model.prepare(["more words"] * 20).inputs  # 80 tokens

    async def scenario() -> None:
        async with batching(embedding_model, max_queued_tokens=10) as (batcher, _):
            # Larger than the bound, into an empty queue: accepted.
            assert (await batcher.embed(many)).shape == (20, 384)
            first = asyncio.ensure_future(batcher.embed(one))
            await asyncio.sleep(0)  # queued, not yet in a pass
            started = time.monotonic()
            with pytest.raises(QueueFull, match="overloaded"):
                await batcher.embed(one)
            assert time.monotonic() - started < 0.05
            assert batcher.stats.rejected == 1
            assert (await first).shape == (1, 384)

    run(scenario)


def test_a_cancelled_request_leaves_the_queue(embedding_model: EmbeddingModel) -> None:
    long_inputs = embedding_model.prepare(texts_of_lengths([250] * 40)).inputs

    async def scenario() -> None:
        async with batching(embedding_model, max_inputs=2) as (batcher, passes):
            task = asyncio.ensure_future(batcher.embed(long_inputs))
            while not passes.sizes:
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (batcher.queued_inputs, batcher.queued_tokens) == (0, 0)
            vector = await batcher.embed(embedding_model.prepare(["still working"]).inputs)
            assert vector.shape == (1, 384)
            # At most the pass in flight at the cancellation ran, and the new request.
            assert len(passes.sizes) <= 3

    run(scenario)


def test_closing_fails_requests_in_flight(embedding_model: EmbeddingModel) -> None:
    # One pass holds the whole request: nothing of it is left waiting in the queue.
    inputs = embedding_model.prepare(texts_of_lengths([250, 250])).inputs

    async def scenario() -> None:
        async with batching(embedding_model) as (batcher, passes):
            task = asyncio.ensure_future(batcher.embed(inputs))
            while not passes.sizes:
                await asyncio.sleep(0.001)
            await batcher.close()
            with pytest.raises(RuntimeError, match="shutting down"):
                await asyncio.wait_for(task, 10)

    run(scenario)


def test_limits_beyond_the_micro_batch_fail_requests_not_the_process(
    embedding_model: EmbeddingModel,
) -> None:
    """Misconfigured limits meet the model's own guard: an error, never a llama.cpp abort."""
    inputs = embedding_model.prepare(texts_of_lengths([200, 200, 200])).inputs

    async def scenario() -> None:
        async with batching(embedding_model, max_tokens=1024) as (batcher, _):
            with pytest.raises(RuntimeError, match="exceeds the micro-batch"):
                await batcher.embed(inputs)
            with pytest.raises(ValueError, match="a pass holds 1 to 1024"):
                await batcher.embed([[101] * 2000])
            assert (await batcher.embed(inputs[:1])).shape == (1, 384)

    run(scenario)


def test_a_pass_whose_vectors_cannot_be_delivered_fails_its_requests() -> None:
    """An error after the forward pass (here: values that are not numbers) reaches the
    requests of that pass, and the next pass runs."""
    calls: list[int] = []

    async def forward(sequences: list[Sequence[int]]) -> FloatMatrix:
        calls.append(len(sequences))
        if len(calls) == 1:
            return np.full((len(sequences), 4), "not a number", dtype=object)
        return np.ones((len(sequences), 4), dtype=np.float32)

    async def scenario() -> None:
        batcher = Batcher(forward, BatchLimits(max_tokens=64, max_inputs=8), 4)
        batcher.start()
        try:
            with pytest.raises(ValueError):
                await asyncio.wait_for(batcher.embed([[1, 2, 3]]), 10)
            assert (await asyncio.wait_for(batcher.embed([[4, 5]]), 10)).shape == (1, 4)
            assert batcher.stats.batches == 1
        finally:
            await batcher.close()

    run(scenario)


@asynccontextmanager
async def serving(
    model: EmbeddingModel, config: EmbedderConfig = CONFIG
) -> AsyncIterator[embedder_pb2_grpc.EmbedderAsyncStub]:
    server, port = await create_server(config, model)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield embedder_pb2_grpc.EmbedderStub(channel)
    finally:
        await server.stop(0)


def test_server_batches_and_counts(embedding_model: EmbeddingModel) -> None:
    texts = [f"sentence number {i}".encode() for i in range(16)]

    async def scenario() -> None:
        async with serving(embedding_model) as stub:
            replies = await asyncio.gather(*(stub.Embed(pb.EmbedRequest(texts=[t])) for t in texts))
            many = await stub.Embed(pb.EmbedRequest(texts=[b"x"] * 300))
            # Over 64 KiB: tokenized on the tokenizer thread, not on the event loop.
            huge = b"word " * 14000
            cut = await stub.Embed(
                pb.EmbedRequest(texts=[huge], truncate=pb.TRUNCATE_POLICY_TRUNCATE)
            )
            counted = await stub.Tokenize(pb.TokenizeRequest(texts=[huge]))
            stats = await stub.Stats(pb.StatsRequest())
            info = await stub.Info(pb.InfoRequest())
        assert all(reply.dimensions == 384 for reply in replies)
        assert from_bytes(many.vectors, 384, 300).shape == (300, 384)
        assert (list(cut.token_counts), list(cut.truncated)) == ([256], [True])
        assert counted.results[0].count == 14002
        assert stats.requests == 18 and stats.inputs == 317 and stats.rejected == 0
        # 300 inputs need at least 300 / 32 passes; the 16 singles share a few.
        assert 300 / 32 < stats.batches < 300 / 32 + 17
        assert stats.tokens == 16 * 5 + 300 * 3 + 256
        assert stats.tokenize_requests == 1
        assert stats.busy_seconds > 0 and stats.uptime_seconds > 0
        assert stats.replica_id == info.replica_id and ":" in info.replica_id
        assert info.max_queued_tokens == CONFIG.queue_tokens

    run(scenario)


def test_server_answers_resource_exhausted_when_full(embedding_model: EmbeddingModel) -> None:
    config = replace(CONFIG, queue_tokens=40)
    request = pb.EmbedRequest(texts=[b"a sentence of several words"] * 4)  # 28 tokens

    async def scenario() -> None:
        async with serving(embedding_model, config) as stub:
            outcomes = await asyncio.gather(
                *(stub.Embed(request) for _ in range(12)), return_exceptions=True
            )
            stats = await stub.Stats(pb.StatsRequest())
        refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
        assert refused, "a queue of 40 tokens cannot hold 12 requests of 28"
        assert all(o.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for o in refused)
        assert "overloaded" in (refused[0].details() or "")
        assert stats.rejected == len(refused)
        assert stats.requests == 12 - len(refused) >= 1

    run(scenario)


def test_config_reads_batching_settings() -> None:
    env = {"RAGD_MODEL_PATH": str(MODEL_PATH)}
    default = EmbedderConfig.from_env(env)
    assert (default.max_wait_ms, default.queue_tokens) == (10.0, 65536)
    assert (default.drain_seconds, default.max_connection_age) == (1.0, 300.0)
    custom = EmbedderConfig.from_env(
        {
            **env,
            "RAGD_EMBEDDER_MAX_WAIT_MS": "2.5",
            "RAGD_EMBEDDER_QUEUE_TOKENS": "1000",
            "RAGD_EMBEDDER_DRAIN_SECONDS": "0",
            "RAGD_EMBEDDER_MAX_CONNECTION_AGE": "0",
        }
    )
    assert (custom.max_wait_ms, custom.queue_tokens) == (2.5, 1000)
    assert (custom.drain_seconds, custom.max_connection_age) == (0.0, 0.0)
    for name, value in [
        ("RAGD_EMBEDDER_MAX_WAIT_MS", "-1"),
        ("RAGD_EMBEDDER_DRAIN_SECONDS", "nan"),
        ("RAGD_EMBEDDER_MAX_CONNECTION_AGE", "soon"),
        ("RAGD_EMBEDDER_QUEUE_TOKENS", "0"),
    ]:
        with pytest.raises(ConfigError, match=name):
            EmbedderConfig.from_env({**env, name: value})
