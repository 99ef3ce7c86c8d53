"""The embedder's gRPC server: `create_server(config)` for tests and embedding, `main()` to run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health

from services.common.config import ConfigError
from services.common.grpc_server import (
    SERVER_OPTIONS,
    add_health,
    serve_until_signalled,
    set_serving,
)
from services.common.logs import setup_logging
from services.common.metrics import MetricsInterceptor, serve_metrics
from services.common.ports_file import ports_file_from_env, write_ports
from services.common.security import listen, service_auth
from services.common.tracing import server_interceptors, setup_tracing
from services.common.vectors import FloatMatrix
from services.embedder.batcher import Batcher, BatchLimits, Forward
from services.embedder.config import EmbedderConfig, thread_shares
from services.embedder.errors import ModelLoadError
from services.embedder.metrics import watch
from services.embedder.remote import UpstreamModel, UpstreamSettings
from services.embedder.servicer import EmbedderServicer
from services.pb import embedder_pb2, embedder_pb2_grpc

if TYPE_CHECKING:
    # Imported where a GGUF is loaded: an embedder in front of an upstream runs without
    # llama-cpp-python.
    from services.embedder.model import EmbeddingModel

log = logging.getLogger(__name__)

SERVICE_NAME: str = embedder_pb2.DESCRIPTOR.services_by_name["Embedder"].full_name

# Tasks that release a server's thread (and model) once it terminates (strong references).
_releasers: set[asyncio.Task[None]] = set()


def load_model(config: EmbedderConfig, threads: int | None = None) -> EmbeddingModel:
    from services.embedder.model import EmbeddingModel

    started = time.monotonic()
    threads = threads or config.threads
    model = EmbeddingModel(
        config.model_path,
        threads=threads,
        name=config.model_name,
        max_batch_tokens=config.batch_tokens,
        pooling=config.model_pooling,
        max_input_tokens=config.model_max_tokens,
        max_batch_inputs=config.batch_inputs,
    )
    info = model.info
    log.info(
        "loaded %s from %s in %.2fs: %d dims, %s pooling, at most %d tokens per input, "
        "sha256 %s, %d threads",
        info.name,
        config.model_path,
        time.monotonic() - started,
        info.dimensions,
        info.pooling,
        info.max_input_tokens,
        info.digest[:12],
        threads,
    )
    return model


@dataclass
class _Running:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    limits: BatchLimits
    lanes: list[Lane]


def replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def create_server(
    config: EmbedderConfig,
    model: EmbeddingModel | None = None,
    interactive: EmbeddingModel | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Starts the embedder on config.listen and returns it with its bound port, SERVING.

    Loads the model from config.model_path unless one is given (tests share one), and a
    second context for the interactive lane (config.interactive_threads) unless `model` is
    given without `interactive`; the port is bound only after the models are loaded, so a
    client never sees the server without them. Stopping the server stops its batchers and
    threads, and closes the models it loaded.
    """
    running = await _start(config, model, interactive)
    return running.server, running.port


@dataclass
class Lane:
    """Model contexts, each with its own thread, behind one batcher."""

    # The first context: it tokenizes and describes the model too.
    model: EmbeddingModel | UpstreamModel
    executor: ThreadPoolExecutor
    batcher: Batcher
    # Closed on release: the server loaded it.
    owned: bool
    # Further contexts of the same model (loaded by the server), whose passes run beside
    # the first's.
    others: list[tuple[EmbeddingModel, ThreadPoolExecutor]] = field(default_factory=list)

    async def close(self) -> None:
        # Last registered, first run: the batcher stops before the contexts close, and every
        # context closes even if another fails to.
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(self.model, UpstreamModel):
                stack.push_async_callback(self.model.aclose)
            elif self.owned:
                stack.callback(self.model.close)
            stack.callback(self.executor.shutdown, wait=True)
            stack.callback(_close_contexts, self.others)
            await self.batcher.close()


def _close_contexts(contexts: Sequence[tuple[EmbeddingModel, ThreadPoolExecutor]]) -> None:
    """Stops each context's thread, then frees the context: all of them, even if one fails."""
    with contextlib.ExitStack() as stack:
        for model, executor in contexts:
            stack.callback(model.close)
            stack.callback(executor.shutdown, wait=True)


async def _upstream_lane(config: EmbedderConfig, settings: UpstreamSettings) -> Lane:
    """The batcher in front of an OpenAI-compatible endpoint: its passes are HTTP requests,
    so no model thread; the executor only serves the start-up probe."""
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder-upstream")
    try:
        model = await loop.run_in_executor(executor, UpstreamModel, settings)
    except BaseException:
        executor.shutdown(wait=True)
        raise
    info = model.info
    log.info(
        "embedding with %s at %s: %d dims, at most %d tokens per input (tokens counted by %s), "
        "%d inputs per request",
        info.name,
        settings.base_url,
        info.dimensions,
        info.max_input_tokens,
        info.tokenizer,
        info.max_batch_inputs,
    )
    try:
        batcher = Batcher(
            model.embed_async,
            BatchLimits(
                max_tokens=info.max_batch_tokens,
                max_inputs=info.max_batch_inputs,
                max_wait=config.max_wait_ms / 1000,
                max_queued_tokens=config.queue_tokens,
            ),
            info.dimensions,
        )
    except BaseException:
        executor.shutdown(wait=True)
        await model.aclose()
        raise
    return Lane(model, executor, batcher, owned=True)


def _lower_priority(nice: int) -> None:
    """Makes the calling thread (and the OpenMP threads it will start, which inherit its
    nice value) yield the CPU to normal threads: the scheduler, not a pass boundary, then puts
    an interactive pass ahead of a bulk one that is already running."""
    if nice > 0:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError as error:
            log.warning("cannot lower the bulk lane's priority: %s", error)


def _model_thread(name: str, nice: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(
        max_workers=1,
        thread_name_prefix=f"embedder-{name}",
        initializer=_lower_priority,
        initargs=(nice,),
    )


async def _open_context(
    config: EmbedderConfig, name: str, threads: int, nice: int
) -> tuple[EmbeddingModel, ThreadPoolExecutor]:
    """A model context loaded on the one thread that will run it: llama.cpp contexts are not
    thread-safe."""
    executor = _model_thread(name, nice)
    try:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, load_model, config, threads), executor
    except BaseException:
        executor.shutdown(wait=True)
        raise


async def _open_lane(
    config: EmbedderConfig,
    model: EmbeddingModel | None,
    name: str,
    threads: int,
    queue_tokens: int,
    nice: int = 0,
    contexts: int = 1,
) -> Lane:
    """`contexts` contexts sharing `threads` (one, of `model`, if given)."""
    loop = asyncio.get_running_loop()
    owned = model is None
    others: list[tuple[EmbeddingModel, ThreadPoolExecutor]] = []
    if model is None:
        shares = thread_shares(threads, contexts)
        model, executor = await _open_context(config, name, shares[0], nice)
        try:
            for share in shares[1:]:
                others.append(await _open_context(config, name, share, nice))
        except BaseException:
            _close_contexts([(model, executor), *others])
            raise
    else:
        executor = _model_thread(name, nice)

    def forward_on(context: EmbeddingModel, thread: ThreadPoolExecutor) -> Forward:
        async def forward(sequences: list[Sequence[int]]) -> FloatMatrix:
            return await loop.run_in_executor(thread, context.forward, sequences)

        return forward

    try:
        batcher = Batcher(
            [forward_on(context, thread) for context, thread in [(model, executor), *others]],
            BatchLimits(
                max_tokens=model.info.max_batch_tokens,
                max_inputs=model.info.max_batch_inputs,
                max_wait=config.max_wait_ms / 1000,
                max_queued_tokens=queue_tokens,
            ),
            model.info.dimensions,
            lane="interactive" if name == "interactive" else "bulk",
        )
    except BaseException:
        if owned:
            _close_contexts([(model, executor), *others])
        else:  # A given model stays its owner's to close.
            executor.shutdown(wait=True)
        raise
    return Lane(model, executor, batcher, owned, others)


async def _start(
    config: EmbedderConfig, model: EmbeddingModel | None, interactive: EmbeddingModel | None
) -> _Running:
    # Large requests are tokenized on a thread of their own.
    tokenizer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder-tokenizer")
    lanes: list[Lane] = []
    try:
        laned = config.interactive_threads > 0 and (model is None or interactive is not None)
        if config.upstream is not None:
            # The upstream does the work: a second lane would only split its queue.
            laned = False
            bulk = await _upstream_lane(config, config.upstream)
        else:
            bulk = await _open_lane(
                config,
                model,
                "model",
                config.threads,
                config.queue_tokens,
                nice=config.bulk_nice if laned else 0,
                # Without the interactive lane, queries run here: on every thread at once.
                contexts=config.contexts if laned else 1,
            )
        lanes.append(bulk)
        fast: Lane | None = None
        if laned:
            fast = await _open_lane(
                config,
                interactive,
                "interactive",
                config.interactive_threads,
                4 * config.interactive_tokens,
            )
            lanes.append(fast)
        options = list(SERVER_OPTIONS)
        if config.max_connection_age > 0:
            # Clients reconnect now and then, re-resolving DNS names on the way: that is how a
            # gateway on dns:///embedder:50051 finds replicas added after it started. Calls in
            # flight finish first (the grace period is unlimited).
            options.append(("grpc.max_connection_age_ms", int(config.max_connection_age * 1000)))
        server = grpc.aio.server(
            interceptors=[
                *server_interceptors(),
                MetricsInterceptor(),
                *service_auth(config.service_token),
            ],
            options=options,
        )
        embedder_pb2_grpc.add_EmbedderServicer_to_server(
            EmbedderServicer(
                bulk.model,
                bulk.batcher,
                tokenizer,
                truncate_by_default=config.truncate,
                replica_id=replica_id(),
                interactive=fast.batcher if fast is not None else None,
                interactive_tokens=config.interactive_tokens,
            ),
            server,
        )
        health_servicer = add_health(server)
        await set_serving(health_servicer, [SERVICE_NAME], False)
        try:
            port = listen(server, config.listen, config.tls)
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(f"cannot listen on {config.listen} (in use, or not a local address?)")
        for lane in lanes:
            lane.batcher.start()
        await server.start()
    except BaseException:
        for lane in lanes:
            await lane.close()
        tokenizer.shutdown(wait=True)
        raise
    releaser = asyncio.create_task(_release_when_terminated(server, lanes, tokenizer))
    _releasers.add(releaser)
    releaser.add_done_callback(_releasers.discard)
    await set_serving(health_servicer, [SERVICE_NAME], True)
    return _Running(server, port, health_servicer, bulk.batcher.limits, lanes)


async def _release_when_terminated(
    server: grpc.aio.Server, lanes: list[Lane], tokenizer: ThreadPoolExecutor
) -> None:
    try:
        await server.wait_for_termination()
    finally:
        # RPCs are over; let a model call already on a thread finish, then free the models.
        for lane in lanes:
            await lane.close()
        tokenizer.shutdown(wait=True)


async def _serve(config: EmbedderConfig, ports_file: Path | None) -> None:
    running = await _start(config, None, None)
    host = config.listen.rsplit(":", 1)[0]
    limits = running.limits
    log.info(
        "embedder listening on %s:%d as %s (passes of up to %d tokens and %d inputs, "
        "queue of %d tokens, max wait %.1f ms)",
        host,
        running.port,
        replica_id(),
        limits.max_tokens,
        limits.max_inputs,
        limits.max_queued_tokens,
        limits.max_wait * 1000,
    )
    ports = {"grpc": running.port}
    if config.metrics_listen is not None:
        watch({lane.batcher.lane: lane.batcher for lane in running.lanes})
        ports["metrics"] = serve_metrics(config.metrics_listen)
        log.info("metrics on %s (port %d)", config.metrics_listen, ports["metrics"])
    if ports_file is not None:
        write_ports(ports_file, ports)

    async def drain() -> None:
        # Health-checking clients (the gateway) stop picking this replica within
        # milliseconds; requests already here, or from clients that do not check, still
        # get answers meanwhile and during the grace period that follows.
        await set_serving(running.health, [SERVICE_NAME], False)
        await asyncio.sleep(config.drain_seconds)

    await serve_until_signalled(running.server, on_stop=drain)


def main() -> None:
    try:
        config = EmbedderConfig.from_env()
        ports_file = ports_file_from_env()
    except ConfigError as error:
        raise SystemExit(f"ragd-embedder: {error}") from None
    setup_logging(config.log_level, "embedder")
    setup_tracing("embedder")
    try:
        asyncio.run(_serve(config, ports_file))
    except (ModelLoadError, OSError) as error:
        log.error("%s", error)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
