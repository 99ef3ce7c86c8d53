"""docker-compose.yml and the Dockerfile describe the same stack as `make run`.

No container engine runs in the default test run; this checks the files' structure and that
every command they run is a real entry point of this repo.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("embedder", "store", "gateway")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


@pytest.fixture(scope="module")
def dockerfile_targets() -> dict[str, list[str]]:
    """Final stage name -> its CMD as a list."""
    stages: dict[str, list[str]] = {}
    current = None
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        match = re.match(r"FROM \S+ AS (\S+)", line)
        if match:
            current = match.group(1)
            stages[current] = []
        cmd = re.match(r"CMD (\[.*\])", line)
        if cmd and current:
            stages[current] = yaml.safe_load(cmd.group(1))
    return stages


def module_exists(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def test_every_service_is_built_from_a_dockerfile_target(
    compose: dict[str, Any], dockerfile_targets: dict[str, list[str]]
) -> None:
    assert set(compose["services"]) == set(SERVICES)
    for name in SERVICES:
        target = compose["services"][name]["build"]["target"]
        command = dockerfile_targets[target]
        assert command[:2] == ["python", "-m"], command
        assert module_exists(command[2] + ".__main__"), f"{command[2]} has no __main__"
        assert command[2] == f"services.{name}"


def test_healthchecks_call_the_real_probe(compose: dict[str, Any]) -> None:
    for name in SERVICES:
        test = compose["services"][name]["healthcheck"]["test"]
        assert test[:4] == ["CMD", "python", "-m", "services.healthcheck"]
        assert test[4] in {"grpc", "http"}
    assert module_exists("services.healthcheck")


def test_listen_ports_line_up(compose: dict[str, Any]) -> None:
    services = compose["services"]
    embedder_port = services["embedder"]["environment"]["RAGD_EMBEDDER_LISTEN"].split(":")[-1]
    store_port = services["store"]["environment"]["RAGD_STORE_LISTEN"].split(":")[-1]
    gateway_env = services["gateway"]["environment"]
    assert gateway_env["RAGD_EMBEDDER_TARGET"] == f"dns:///embedder:{embedder_port}"
    assert gateway_env["RAGD_STORE_TARGET"] == f"store:{store_port}"
    assert gateway_env["RAGD_HOST"] == "0.0.0.0"
    assert any(p.endswith(":8000") for p in services["gateway"]["ports"])


def test_only_the_store_has_the_data_volume(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["store"]["volumes"] == ["ragd-data:/data"]
    assert "volumes" not in services["embedder"]
    assert "volumes" not in services["gateway"]
    assert "ragd-data" in compose["volumes"]


def test_gateway_waits_for_healthy_dependencies(compose: dict[str, Any]) -> None:
    depends = compose["services"]["gateway"]["depends_on"]
    assert depends == {
        "embedder": {"condition": "service_healthy"},
        "store": {"condition": "service_healthy"},
    }


def test_embedder_runs_replicas(compose: dict[str, Any]) -> None:
    replicas = str(compose["services"]["embedder"]["deploy"]["replicas"])
    assert replicas in {"2", "${RAGD_EMBEDDER_REPLICAS:-2}"}
