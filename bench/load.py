"""Client load: a list of requests sent by N concurrent clients, each timed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx

Session = TypeVar("Session")
Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class LoadResult(Generic[Result]):
    # Wall time from the first request sent to the last reply received.
    elapsed: float
    # Seconds per request, in input order.
    latencies: list[float]
    results: list[Result]


def run_load(
    items: Sequence[Item],
    clients: int,
    session: Callable[[], Session],
    call: Callable[[Session, Item], Result],
    close: Callable[[Session], None] = lambda _: None,
) -> LoadResult[Result]:
    """Sends `items` from `clients` threads, each with its own session, pulling the next
    item as soon as its previous reply is in (a closed loop, like real clients)."""
    latencies = [0.0] * len(items)
    results: list[Result | None] = [None] * len(items)
    errors: list[BaseException] = []
    cursor = iter(range(len(items)))
    lock = threading.Lock()
    sessions = [session() for _ in range(clients)]
    start = threading.Barrier(clients + 1)

    def worker(own: Session) -> None:
        start.wait()
        while True:
            with lock:
                index = next(cursor, None)
            if index is None or errors:
                return
            began = time.perf_counter()
            try:
                results[index] = call(own, items[index])
            except BaseException as error:  # reported to the caller below
                errors.append(error)
                return
            latencies[index] = time.perf_counter() - began

    threads = [threading.Thread(target=worker, args=(own,), daemon=True) for own in sessions]
    try:
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
    finally:
        for own in sessions:
            close(own)
    if errors:
        raise errors[0]
    return LoadResult(elapsed, latencies, [r for r in results if r is not None])


def http_session(base_url: str) -> Callable[[], httpx.Client]:
    def make() -> httpx.Client:
        return httpx.Client(base_url=base_url, timeout=120.0)

    return make


def post_json(client: httpx.Client, path: str, body: object) -> dict[str, object]:
    reply = client.post(path, json=body)
    if reply.status_code != 200:
        raise RuntimeError(f"POST {path} -> {reply.status_code}: {reply.text[:300]}")
    data: dict[str, object] = reply.json()
    return data
