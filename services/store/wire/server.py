"""The store's gRPC server: `create_server(config)` for tests and embedding, `main()` to run."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from threadpoolctl import threadpool_limits

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
from services.pb import store_pb2, store_pb2_grpc
from services.store import migrations, replica
from services.store.config import StoreConfig
from services.store.db import use_sqlite_vec
from services.store.errors import BackupUnusable, DatabaseTooNew, ReplicaUnavailable, Unavailable
from services.store.metrics import StoreCollector, watch
from services.store.repository import OperationsSettings, Repository
from services.store.resident import ResidentSettings
from services.store.vector_index import IndexSettings
from services.store.wire.guard import Guard
from services.store.wire.servicer import StoreServicer

log = logging.getLogger(__name__)

# Seconds between index build steps while a build runs, and between checks when none does.
_BUILD_PAUSE = 0.05
_BUILD_IDLE = 2.0

SERVICE_NAME: str = store_pb2.DESCRIPTOR.services_by_name["Store"].full_name

# Tasks that release a server's database and threads once it terminates (strong references).
_releasers: set[asyncio.Task[None]] = set()


async def create_server(config: StoreConfig) -> tuple[grpc.aio.Server, int]:
    """Starts the store on config.listen and returns it with its bound port.

    Health reports NOT_SERVING until the database is migrated, then SERVING; this returns once
    SERVING. Stopping the server also shuts its worker threads and closes the database.
    """
    use_sqlite_vec(config.sqlite_vec_path)
    repository = Repository(
        config.db_path,
        postgres=config.postgres,
        operations=OperationsSettings(
            backup_dir=config.backup_dir,
            backup_keep=config.backup_keep,
            backup_reserve_bytes=config.backup_reserve_mb << 20,
            cache_max_entries=config.cache_max_entries,
            audit_retention_days=config.audit_retention_days,
            replica=config.replica,
            retention=config.retention,
        ),
        index=IndexSettings(
            coarse=config.coarse_index,
            min_rows=config.coarse_min_rows,
            resident=ResidentSettings(budget_bytes=config.resident_mb << 20),
        ),
    )
    executor = ThreadPoolExecutor(max_workers=config.threads, thread_name_prefix="store-db")
    if config.replica is not None:
        # Before the server takes calls, which open the database: a store that lost its disk
        # comes back with what the replica holds, checked, or does not start (replica.py).
        try:
            await asyncio.get_running_loop().run_in_executor(
                executor,
                replica.restore_on_start,
                config.db_path,
                config.replica,
                len(migrations.MIGRATIONS),
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
    server = grpc.aio.server(
        interceptors=[
            *server_interceptors(),
            MetricsInterceptor(),
            *service_auth(config.service_token),
            # Innermost: whose call it is, and the objects it names (guard.py).
            Guard(),
        ],
        options=SERVER_OPTIONS,
    )
    store_pb2_grpc.add_StoreServicer_to_server(StoreServicer(repository, executor), server)
    health = add_health(server)
    await set_serving(health, [SERVICE_NAME], False)
    port = listen(server, config.listen, config.tls)
    if port == 0:
        raise RuntimeError(f"could not listen on {config.listen}")
    await server.start()
    releaser = asyncio.create_task(_release_when_terminated(server, repository, executor))
    _releasers.add(releaser)
    releaser.add_done_callback(_releasers.discard)
    try:
        version = await asyncio.get_running_loop().run_in_executor(executor, repository.migrate)
    except BaseException:
        await server.stop(None)
        raise
    log.info("database %s at schema version %d", repository.path, version)
    # Background responses whose gateway died with the store down never end otherwise.
    expired = await asyncio.get_running_loop().run_in_executor(
        executor, repository.expire_responses
    )
    if expired:
        log.warning("%d background responses lost their gateway: ended as failed", expired)
    await set_serving(health, [SERVICE_NAME], True)
    background = [_build_indexes(server, repository, executor)]
    # Always: files uploaded with expires_after expire whatever the chat-history settings.
    background.append(_sweep_expired(server, repository, executor))
    if config.metrics_listen is not None:
        background.append(
            _refresh_metrics(watch(), server, repository, executor, config.metrics_refresh_seconds)
        )
    for coroutine in background:
        task = asyncio.create_task(coroutine)
        _releasers.add(task)
        task.add_done_callback(_releasers.discard)
    return server, port


async def _refresh_metrics(
    collector: StoreCollector,
    server: grpc.aio.Server,
    repository: Repository,
    executor: ThreadPoolExecutor,
    seconds: float,
) -> None:
    """Keeps the figures /metrics shows fresh: the same snapshot as /admin/stats."""
    loop = asyncio.get_running_loop()
    terminated = asyncio.ensure_future(server.wait_for_termination())
    try:
        while not terminated.done():
            try:
                collector.latest = await loop.run_in_executor(executor, repository.stats)
                collector.replica = await loop.run_in_executor(executor, repository.replica_status)
                collector.connections = repository.database_connections()
            except Exception:
                if terminated.done():
                    return
                log.exception("cannot refresh the store's metrics; retrying later")
            await asyncio.wait({terminated}, timeout=seconds)
    finally:
        terminated.cancel()


async def _build_indexes(
    server: grpc.aio.Server, repository: Repository, executor: ThreadPoolExecutor
) -> None:
    """Keeps coarse index builds moving in the background: short steps on a worker thread,
    with pauses so RPCs keep most of the threads and the write lock."""
    loop = asyncio.get_running_loop()
    terminated = asyncio.ensure_future(server.wait_for_termination())
    try:
        while not terminated.done():
            try:
                busy = await loop.run_in_executor(executor, repository.build_indexes)
            except Exception:
                if terminated.done():
                    return  # the executor or the database closed under us: shutting down
                # Anything else must not end the builds for good: they retry, once idle.
                log.exception("coarse index build step failed; retrying later")
                busy = False
            await asyncio.wait({terminated}, timeout=_BUILD_PAUSE if busy else _BUILD_IDLE)
    finally:
        terminated.cancel()


async def _sweep_expired(
    server: grpc.aio.Server, repository: Repository, executor: ThreadPoolExecutor
) -> None:
    """Deletes chat history past RAGD_*_TTL_DAYS and files past their expires_at
    (retention.py): a batch at a time, at once again while batches come back full, else every
    sweep_seconds."""
    loop = asyncio.get_running_loop()
    terminated = asyncio.ensure_future(server.wait_for_termination())
    pause = repository.retention.sweep_seconds
    try:
        while not terminated.done():
            full = False
            try:
                swept = await loop.run_in_executor(executor, repository.sweep_expired)
            except Exception:
                if terminated.done():
                    return
                log.exception("retention sweep failed; retrying later")
            else:
                full = swept.full
                if swept.conversations or swept.responses or swept.files:
                    log.info(
                        "retention: deleted %d conversations, %d responses and %d files past"
                        " their time",
                        swept.conversations,
                        swept.responses,
                        swept.files,
                    )
            await asyncio.wait({terminated}, timeout=_BUILD_PAUSE if full else pause)
    finally:
        terminated.cancel()


async def _release_when_terminated(
    server: grpc.aio.Server, repository: Repository, executor: ThreadPoolExecutor
) -> None:
    try:
        await server.wait_for_termination()
    finally:
        # RPCs are over; let database calls already on the threads finish, then close.
        executor.shutdown(wait=True)
        repository.close()


async def _serve(config: StoreConfig, ports_file: Path | None) -> None:
    server, port = await create_server(config)
    host = config.listen.rsplit(":", 1)[0]
    log.info("store listening on %s:%d", host, port)
    ports = {"grpc": port}
    if config.metrics_listen is not None:
        ports["metrics"] = serve_metrics(config.metrics_listen)
        log.info("metrics on %s (port %d)", config.metrics_listen, ports["metrics"])
    if ports_file is not None:
        write_ports(ports_file, ports)
    await serve_until_signalled(server)


def main() -> None:
    try:
        config = StoreConfig.from_env()
        ports_file = ports_file_from_env()
    except ConfigError as error:
        raise SystemExit(f"ragd-store: {error}") from None
    setup_logging(config.log_level, "store")
    setup_tracing("store")
    # numpy's BLAS starts a thread per core and spins them between calls: a 10k-vector search
    # cost 11.5 ms of CPU for 0.3 ms of work, taken from the embedder and the gateway on the
    # same cores. Searches run one per store thread; one BLAS thread each is enough.
    threadpool_limits(limits=1, user_api="blas")
    try:
        asyncio.run(_serve(config, ports_file))
    except (DatabaseTooNew, BackupUnusable, ReplicaUnavailable) as error:
        log.error("%s", error)
        raise SystemExit(2) from None
    except Unavailable as error:
        # PostgreSQL not reachable at start: said in one line; the supervisor (compose's
        # restart policy, Kubernetes) starts the store again.
        log.error("cannot open the database: %s", error)
        raise SystemExit(2) from None
