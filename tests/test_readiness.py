"""Readiness as the orchestrators see it: the Kubernetes readiness probe's own request (path,
port, headers, timeout from deploy/k8s/gateway.yaml) and compose's healthcheck command (from
docker-compose.yml), against a real stack whose embedder is killed, hung, and whose store is
killed. Ready means "can serve": the gateway stays in its Service through an embedder outage
(searches answer lexically) and leaves it when the store is gone."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from services.launcher import Stack
from tests.harness import ROOT, free_port, ok, started_stack, wait_ready

TEXT = "The lighthouse keeper records every passing ship in a leather logbook."


@dataclass(frozen=True)
class Probe:
    """A Kubernetes httpGet probe: GET path on the container's port with these headers;
    success is a status of 200-399 within timeout_seconds."""

    path: str
    port: int
    headers: dict[str, str]
    timeout_seconds: float

    def run(self, host: str, port: int) -> tuple[bool, float, httpx.Response | None]:
        started = time.monotonic()
        try:
            reply = httpx.get(
                f"http://{host}:{port}{self.path}",
                headers=self.headers,
                timeout=self.timeout_seconds,
            )
        except httpx.HTTPError:
            return False, time.monotonic() - started, None
        return 200 <= reply.status_code < 400, time.monotonic() - started, reply


def k8s_probe() -> Probe:
    manifests = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "gateway.yaml").read_text())
    [deployment] = [m for m in manifests if m and m["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    probe = container["readinessProbe"]
    get = probe["httpGet"]
    assert get.get("scheme", "HTTP") == "HTTP"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    port = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # The probe reaches the port the gateway serves REST on.
    assert str(port) == env["RAGD_PORT"]
    return Probe(
        path=get["path"],
        port=port,
        headers={h["name"]: h["value"] for h in get.get("httpHeaders", [])},
        # Kubernetes' default is 1 s.
        timeout_seconds=float(probe.get("timeoutSeconds", 1)),
    )


def compose_healthcheck(gateway_url: str) -> tuple[list[str], float]:
    """The gateway's healthcheck command, pointed at this stack, and its timeout."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    check = compose["services"]["gateway"]["healthcheck"]
    words = shlex.split(check["test"])
    assert words[:2] == ["python", "-m"]
    target = urlsplit(words[-1])
    assert target.port == 8000
    words[-1] = gateway_url + target.path + (f"?{target.query}" if target.query else "")
    return [sys.executable, *words[1:]], float(check["timeout"].removesuffix("s"))


def run_healthcheck(gateway_url: str) -> int:
    command, timeout = compose_healthcheck(gateway_url)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, env=env, timeout=timeout, check=False).returncode


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # A chat model is configured where nothing answers: reported, never required.
    yield from started_stack(
        tmp_path_factory.mktemp("readiness"),
        RAGD_CHAT_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",
        RAGD_CHAT_MODEL="absent",
        RAGD_SEARCH_EMBED_TIMEOUT="2",
    )


@pytest.fixture(scope="module")
def client(own_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=own_stack.gateway_url, timeout=30) as http:
        yield http


@pytest.fixture(scope="module")
def store_id(client: httpx.Client) -> str:
    vs = ok(client.post("/v1/vector_stores", json={"name": "ready"}))["id"]
    ok(client.post(f"/v1/vector_stores/{vs}/files", json={"text": TEXT, "filename": "log.txt"}))
    deadline = time.monotonic() + 60
    while ok(client.get(f"/v1/vector_stores/{vs}"))["file_counts"]["completed"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return str(vs)


def address(stack: Stack) -> tuple[str, int]:
    url = urlsplit(stack.gateway_url)
    assert url.hostname is not None and url.port is not None
    return url.hostname, url.port


def dependency_up(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'ragd_dependency_up{{dependency="{name}"}} '):
            return float(line.split()[-1])
    raise AssertionError(f"no ragd_dependency_up for {name}")


def test_ready_with_everything_but_the_chat_model(own_stack: Stack, client: httpx.Client) -> None:
    passed, _, reply = k8s_probe().run(*address(own_stack))
    assert passed and reply is not None, reply
    body = reply.json()
    assert (body["status"], body["degraded"]) == ("degraded", ["chat-unavailable"])
    assert (body["store"], body["embedder"], body["chat"]) == ("SERVING", "SERVING", "UNAVAILABLE")
    assert reply.headers["X-Ragd-Degraded"] == "chat-unavailable"
    assert client.get("/ready?require=embedder").status_code == 200
    assert client.get("/ready?require=embedder,chat").status_code == 503
    assert run_healthcheck(own_stack.gateway_url) == 0
    assert dependency_up(client, "chat") == 0 and dependency_up(client, "embedder") == 1


def test_an_embedder_outage_keeps_the_gateway_ready_and_serving(
    own_stack: Stack, client: httpx.Client, store_id: str
) -> None:
    own_stack.children["embedder"].kill()
    try:
        probe = k8s_probe()
        passed, elapsed, reply = probe.run(*address(own_stack))
        assert passed and reply is not None, reply
        assert elapsed < probe.timeout_seconds
        body = reply.json()
        assert body["status"] == "degraded" and body["embedder"] == "UNAVAILABLE"
        assert body["degraded"] == ["embedder-unavailable", "chat-unavailable"]
        assert reply.headers["X-Ragd-Degraded"] == "embedder-unavailable, chat-unavailable"
        assert run_healthcheck(own_stack.gateway_url) == 0
        strict = client.get("/ready?require=embedder")
        assert strict.status_code == 503 and strict.json()["status"] == "not_ready"
        assert dependency_up(client, "embedder") == 0 and dependency_up(client, "store") == 1
        # What a pod kept in the Service serves meanwhile.
        found = client.post(f"/v1/vector_stores/{store_id}/search", json={"query": "logbook"})
        page: dict[str, Any] = ok(found)
        assert (page["mode"], page["degraded"]) == ("lexical", True)
        assert page["data"][0]["filename"] == "log.txt"
        ok(client.get("/v1/vector_stores"))
        conversation = ok(client.post("/v1/conversations", json={}))["id"]
        ok(client.get(f"/v1/conversations/{conversation}"))
    finally:
        own_stack.start_service("embedder")
    wait_ready(client)
    assert dependency_up(client, "embedder") == 1


def test_a_hung_embedder_costs_the_probe_about_a_second(
    own_stack: Stack, client: httpx.Client
) -> None:
    embedder = own_stack.children["embedder"]
    os.kill(embedder.pid, signal.SIGSTOP)
    try:
        probe = k8s_probe()
        passed, elapsed, reply = probe.run(*address(own_stack))
        assert passed and reply is not None, reply
        assert reply.json()["embedder"] != "SERVING"
        assert elapsed < min(probe.timeout_seconds, 3.0), elapsed
        assert run_healthcheck(own_stack.gateway_url) == 0
    finally:
        os.kill(embedder.pid, signal.SIGCONT)
    wait_ready(client)


def test_without_the_store_the_gateway_is_not_ready(own_stack: Stack, client: httpx.Client) -> None:
    own_stack.children["store"].kill()
    try:
        passed, _, reply = k8s_probe().run(*address(own_stack))
        assert not passed and reply is not None and reply.status_code == 503
        assert reply.json()["status"] == "not_ready" and reply.json()["store"] == "UNAVAILABLE"
        assert run_healthcheck(own_stack.gateway_url) == 1
        assert dependency_up(client, "store") == 0
    finally:
        own_stack.start_service("store")
    wait_ready(client)
    passed, _, _ = k8s_probe().run(*address(own_stack))
    assert passed


def test_the_probes_are_what_the_manifests_say() -> None:
    """Guards the two helpers above against reading the wrong thing."""
    probe = k8s_probe()
    assert (probe.path, probe.port) == ("/ready", 8000)
    command, timeout = compose_healthcheck("http://127.0.0.1:1234")
    assert command[1:] == [
        "-m",
        "services.healthcheck",
        "http",
        "http://127.0.0.1:1234/ready",
    ]
    assert timeout >= 3 and Path(command[0]).exists()
