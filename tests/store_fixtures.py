"""Helpers shared by the store tests (plain functions; the test modules wrap them in fixtures)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt

from services.pb import store_pb2_grpc
from services.store.config import StoreConfig
from services.store.repository import Repository
from services.store.server import create_server

MODEL = "all-MiniLM-L6-v2"


class FakeClock:
    """A clock the test moves by hand (unix seconds)."""

    def __init__(self, now: int = 1_700_000_000) -> None:
        self.now = now

    def __call__(self) -> float:
        return float(self.now)


def open_repository(path: Path, clock: Callable[[], float] = time.time) -> Repository:
    repository = Repository(path, clock=clock)
    repository.migrate()
    return repository


def unit_vectors(rng: np.random.Generator, count: int, dims: int) -> npt.NDArray[np.float32]:
    vectors = rng.standard_normal((count, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


@dataclass
class RunningStore:
    port: int
    channel: grpc.aio.Channel
    stub: store_pb2_grpc.StoreStub


@asynccontextmanager
async def running_store(db_path: Path) -> AsyncIterator[RunningStore]:
    """The real store on a free port with a connected client; stopped and closed afterwards."""
    config = StoreConfig(listen="127.0.0.1:0", db_path=db_path, threads=2)
    server, port = await create_server(config)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield RunningStore(port, channel, store_pb2_grpc.StoreStub(channel))
    finally:
        await server.stop(None)
        await server.wait_for_termination()
