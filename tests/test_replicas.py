"""Two embedder processes behind one gateway: round-robin, failover, health-checked draining.

The gateway reaches both through one gRPC channel ("ip:port,ip:port" target, round_robin,
client-side health checks, retries of UNAVAILABLE); per-replica counts come from each
replica's Stats RPC.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import httpx
import pytest

from services.gateway.clients import channel_target
from services.launcher import Stack
from services.pb import embedder_pb2 as pb
from services.pb import embedder_pb2_grpc
from tests.harness import started_stack


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("replicas"),
        embedders=2,
        # Two replicas on two shared cores: more llama.cpp threads than cores makes its
        # spinning thread barriers slow down by several times.
        RAGD_EMBEDDER_THREADS="1",
        # Long enough to observe that a draining replica gets no traffic.
        RAGD_EMBEDDER_DRAIN_SECONDS="4",
        # Connections are recycled (GOAWAY) every few seconds during the tests: that must not
        # cost a request either.
        RAGD_EMBEDDER_MAX_CONNECTION_AGE="3",
        RAGD_EMBED_TIMEOUT="30",
        # Enough for the steady load below (8 clients, ~15 tokens each), not for a burst.
        RAGD_EMBEDDER_QUEUE_TOKENS="300",
    )


def replica_stats(address: str) -> pb.StatsResponse:
    with grpc.insecure_channel(address) as channel:
        reply: pb.StatsResponse = embedder_pb2_grpc.EmbedderStub(channel).Stats(
            pb.StatsRequest(), timeout=5
        )
    return reply


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("127.0.0.1:5001", "127.0.0.1:5001"),
        ("dns:///embedder:50051", "dns:///embedder:50051"),
        ("ipv4:10.0.0.1:1,10.0.0.2:1", "ipv4:10.0.0.1:1,10.0.0.2:1"),
        ("10.0.0.1:5001, 10.0.0.2:5002", "ipv4:10.0.0.1:5001,10.0.0.2:5002"),
        # Names in a list are resolved here (gRPC takes a list of addresses only), IPv4 first.
        ("localhost:5001,localhost:5002", "ipv4:127.0.0.1:5001,127.0.0.1:5002"),
        ("[::1]:5001,[::1]:5002", "ipv6:[::1]:5001,[::1]:5002"),
    ],
)
def test_channel_targets(target: str, expected: str) -> None:
    assert channel_target(target) == expected


def test_a_malformed_target_list_is_refused() -> None:
    with pytest.raises(ValueError, match="not host:port"):
        channel_target("127.0.0.1:5001,embedder")


def requests_served(address: str) -> int:
    return int(replica_stats(address).requests)


def served(stack: Stack) -> dict[str, int]:
    return {name: requests_served(address) for name, address in stack.embedders.items()}


class Load:
    """Clients posting one-text /v1/embeddings requests in a loop, counting every outcome."""

    def __init__(self, url: str, clients: int = 8) -> None:
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._client, args=(url, n), daemon=True)
            for n in range(clients)
        ]

    def _client(self, url: str, number: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            sent = 0
            while not self._stop.is_set():
                sent += 1
                text = f"client {number} request {sent} about replicas"
                try:
                    response = client.post("/v1/embeddings", json={"input": text})
                    outcome = "" if response.status_code == 200 else response.text
                except httpx.HTTPError as error:
                    outcome = repr(error)
                with self._lock:
                    if outcome:
                        self.failures.append(outcome)
                    else:
                        self.ok += 1

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=90)

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            assert not self.failures, self.failures[:3]
            time.sleep(0.05)

    def more(self, count: int, timeout: float = 60.0) -> None:
        """Waits until `count` more requests have succeeded."""
        target = self.ok + count
        self.wait(lambda: self.ok >= target, timeout, f"{count} more requests")


def test_load_spreads_over_both_replicas(replicas: Stack) -> None:
    before = served(replicas)
    with httpx.Client(base_url=replicas.gateway_url, timeout=60) as client:
        for n in range(40):
            response = client.post("/v1/embeddings", json={"input": f"text {n}"})
            assert response.status_code == 200, response.text
    after = served(replicas)
    counts = {name: after[name] - before[name] for name in after}
    assert sum(counts.values()) == 40
    # round_robin alternates; a connection being recycled can skew it a little.
    assert min(counts.values()) >= 10, counts


def test_sigkill_mid_load_costs_no_request_and_the_restart_gets_traffic(
    replicas: Stack,
) -> None:
    victim = replicas.children["embedder-2"]
    with Load(replicas.gateway_url) as load:
        load.more(30)
        victim.kill()
        assert not victim.alive()
        load.more(60)
        replicas.start_service("embedder-2")
        address = replicas.embedders["embedder-2"]
        load.wait(lambda: requests_served(address) >= 10, 30, "the restarted replica")
        load.more(20)
    assert load.failures == []


def test_sigterm_drains_through_client_health_checks(replicas: Stack) -> None:
    """A replica told to stop reports NOT_SERVING first: the gateway stops sending at once."""
    name, address = "embedder-2", replicas.embedders["embedder-2"]
    child = replicas.children[name]
    with Load(replicas.gateway_url) as load:
        load.wait(lambda: requests_served(address) >= 5, 30, "traffic on both replicas")
        child.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        draining = requests_served(address)
        load.more(10)
        # Still up and answering Stats, but given nothing new while draining.
        assert requests_served(address) == draining
        assert child.process.wait(timeout=30) == 0
        load.more(20)
        replicas.start_service(name)
        load.wait(lambda: requests_served(address) >= 5, 30, "the restarted replica")
    assert load.failures == []


def test_a_burst_beyond_the_queues_gets_429_with_retry_after(replicas: Stack) -> None:
    text = "a burst of requests, each long enough to fill the small queues quickly " * 4

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(
            base_url=replicas.gateway_url, timeout=60, limits=limits
        ) as client:
            return await asyncio.gather(
                *(client.post("/v1/embeddings", json={"input": text}) for _ in range(48))
            )

    before = [replica_stats(address).rejected for address in replicas.embedders.values()]
    started = time.monotonic()
    responses = asyncio.run(burst())
    statuses = sorted({response.status_code for response in responses})
    assert statuses == [200, 429], statuses
    refused = [response for response in responses if response.status_code == 429]
    assert refused[0].headers["Retry-After"] == "1"
    error = refused[0].json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert "overloaded" in error["message"]
    assert time.monotonic() - started < 30
    after = [replica_stats(address).rejected for address in replicas.embedders.values()]
    assert sum(after) - sum(before) == len(refused)
