"""The embedder's gRPC server: `create_server(config)` for tests and embedding, `main()` to run."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from services.common.config import ConfigError
from services.common.grpc_server import (
    SERVER_OPTIONS,
    add_health,
    serve_until_signalled,
    set_serving,
    setup_logging,
)
from services.embedder.config import EmbedderConfig
from services.embedder.errors import ModelLoadError
from services.embedder.model import EmbeddingModel
from services.embedder.servicer import EmbedderServicer
from services.pb import embedder_pb2, embedder_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME: str = embedder_pb2.DESCRIPTOR.services_by_name["Embedder"].full_name

# Tasks that release a server's thread (and model) once it terminates (strong references).
_releasers: set[asyncio.Task[None]] = set()


def load_model(config: EmbedderConfig) -> EmbeddingModel:
    started = time.monotonic()
    model = EmbeddingModel(
        config.model_path,
        threads=config.threads,
        name=config.model_name,
        max_batch_tokens=config.batch_tokens,
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
        config.threads,
    )
    return model


async def create_server(
    config: EmbedderConfig, model: EmbeddingModel | None = None
) -> tuple[grpc.aio.Server, int]:
    """Starts the embedder on config.listen and returns it with its bound port, SERVING.

    Loads the model from config.model_path unless one is given (tests share one); the port
    is bound only after the model is loaded, so a client never sees the server without it.
    Stopping the server shuts its model thread, and closes the model if it loaded it.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder-model")
    owned = model is None
    try:
        if model is None:
            # Loaded on the thread that will run it.
            model = await asyncio.get_running_loop().run_in_executor(executor, load_model, config)
        server = grpc.aio.server(options=SERVER_OPTIONS)
        embedder_pb2_grpc.add_EmbedderServicer_to_server(
            EmbedderServicer(model, executor, truncate_by_default=config.truncate), server
        )
        health = add_health(server)
        await set_serving(health, [SERVICE_NAME], False)
        try:
            port: int = server.add_insecure_port(config.listen)
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(f"cannot listen on {config.listen} (in use, or not a local address?)")
        await server.start()
    except BaseException:
        executor.shutdown(wait=True)
        if owned and model is not None:
            model.close()
        raise
    releaser = asyncio.create_task(_release_when_terminated(server, executor, model, owned))
    _releasers.add(releaser)
    releaser.add_done_callback(_releasers.discard)
    await set_serving(health, [SERVICE_NAME], True)
    return server, port


async def _release_when_terminated(
    server: grpc.aio.Server, executor: ThreadPoolExecutor, model: EmbeddingModel, owned: bool
) -> None:
    try:
        await server.wait_for_termination()
    finally:
        # RPCs are over; let a model call already on the thread finish, then free the model.
        executor.shutdown(wait=True)
        if owned:
            model.close()


async def _serve(config: EmbedderConfig) -> None:
    server, port = await create_server(config)
    host = config.listen.rsplit(":", 1)[0]
    log.info("embedder listening on %s:%d", host, port)
    await serve_until_signalled(server)


def main() -> None:
    try:
        config = EmbedderConfig.from_env()
    except ConfigError as error:
        raise SystemExit(f"ragd-embedder: {error}") from None
    setup_logging(config.log_level)
    try:
        asyncio.run(_serve(config))
    except (ModelLoadError, OSError) as error:
        log.error("%s", error)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
