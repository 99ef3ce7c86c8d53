"""What an operator sees of a running stack: Prometheus metrics on every service (route
templates as labels, never ids), and the versions of every part (`GET /version`, `ragd
--version`, `ragd version`)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from services.cli.main import cli
from services.common.versions import ragd_version
from services.launcher import Stack
from tests.harness import document, started_stack

KEY = "observer-key-789"


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from started_stack(
        tmp_path_factory.mktemp("observability"),
        RAGD_API_KEYS=KEY,
        RAGD_METRICS_LISTEN="127.0.0.1:0",
        RAGD_METRICS_REFRESH_SECONDS="0.2",
        RAGD_LOG_FORMAT="json",
    )


@pytest.fixture(scope="module")
def api(own_stack: Stack) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=own_stack.gateway_url, headers=headers, timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def searched(api: httpx.Client) -> str:
    """A vector store with two files, searched in two modes."""
    files = [
        api.post(
            "/v1/files",
            files={"file": (f"m{i}.txt", document(i).encode())},
            data={"purpose": "assistants"},
        ).json()["id"]
        for i in range(2)
    ]
    store_id: str = api.post("/v1/vector_stores", json={"name": "seen", "file_ids": files}).json()[
        "id"
    ]
    deadline = time.monotonic() + 60
    while api.get(f"/v1/vector_stores/{store_id}").json()["file_counts"]["completed"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    for mode in ("hybrid", "vector"):
        reply = api.post(
            f"/v1/vector_stores/{store_id}/search", json={"query": "record", "mode": mode}
        )
        assert reply.status_code == 200, reply.text
    assert api.get("/v1/vector_stores/vs_nothing_here").status_code == 404
    return store_id


def samples(text: str) -> dict[str, float]:
    """The exposition's samples: 'name{labels}' -> value."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def sample(found: dict[str, float], name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    matches = [
        value
        for key, value in found.items()
        if key.partition("{")[0] == name
        and all(f'{label}="{want}"' in key for label, want in labels.items())
    ]
    assert len(matches) == 1, (name, labels, [key for key in found if key.startswith(name)])
    return matches[0]


def test_gateway_metrics_name_routes_by_template_and_need_the_key(
    own_stack: Stack, api: httpx.Client, searched: str
) -> None:
    assert httpx.get(own_stack.gateway_url + "/metrics").status_code == 401
    reply = api.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    found = samples(reply.text)
    search_route = "/v1/vector_stores/{vector_store_id}/search"
    assert (
        sample(found, "ragd_http_requests_total", route=search_route, method="POST", status="200")
        == 2
    )
    assert (
        sample(
            found,
            "ragd_http_requests_total",
            route="/v1/vector_stores/{vector_store_id}",
            status="404",
        )
        == 1
    )
    assert sample(found, "ragd_http_request_duration_seconds_count", route=search_route) == 2
    # Bounded label values: no id ever becomes a label.
    assert not re.search(r'"(vs|file)_[0-9a-zA-Z]', reply.text)
    assert sample(found, "ragd_search_duration_seconds_count", mode="hybrid") == 1
    assert sample(found, "ragd_search_duration_seconds_count", mode="vector") == 1
    assert sample(found, "ragd_ingest_files_total", status="completed") == 2
    assert sample(found, "ragd_ingest_chunks_total") >= 2
    # The separate, unauthenticated port shows the same registry.
    separate = samples(httpx.get(own_stack.metrics_url("gateway")).text)
    assert sample(separate, "ragd_search_duration_seconds_count", mode="vector") == 1


def test_embedder_metrics_count_tokens_and_time_passes(own_stack: Stack, searched: str) -> None:
    found = samples(httpx.get(own_stack.metrics_url("embedder")).text)
    assert sample(found, "ragd_embed_tokens_total", lane="bulk") > 0
    assert sample(found, "ragd_embed_inputs_total", lane="interactive") >= 1
    passes = sample(found, "ragd_embed_passes_total", lane="bulk")
    assert sample(found, "ragd_embed_pass_duration_seconds_count", lane="bulk") == passes
    assert sample(found, "ragd_embed_batch_size_count", lane="bulk") == passes
    assert sample(found, "ragd_embed_queue_tokens", lane="bulk") == 0
    assert sample(found, "ragd_grpc_requests_total", method="Embed", code="OK") >= 2


def test_store_metrics_show_what_it_holds(own_stack: Stack, searched: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        found = samples(httpx.get(own_stack.metrics_url("store")).text)
        if found.get("ragd_store_vector_stores", 0) >= 1 and found.get("ragd_store_chunks"):
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    assert sample(found, "ragd_store_files") == 2
    assert sample(found, "ragd_store_db_bytes") > 0
    assert sample(found, "ragd_ingest_jobs", state="pending") == 0
    assert "ragd_cache_misses_total" in found
    assert sample(found, "ragd_grpc_requests_total", method="Search", code="OK") >= 2
    assert sample(found, "ragd_grpc_requests_total", method="GetVectorStore", code="NOT_FOUND") >= 1


def test_versions_of_every_service(own_stack: Stack, api: httpx.Client) -> None:
    reply = httpx.get(own_stack.gateway_url + "/version")
    assert reply.status_code == 200
    body = reply.json()
    assert body["version"] == ragd_version()
    assert body["gateway"]["python"].count(".") == 2
    store = body["store"]
    assert store["schema_version"] >= 9
    assert store["engine"] == "sqlite"
    assert store["sqlite"].startswith("3.")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", store["sqlite_vec"])
    (embedder,) = body["embedders"]
    assert embedder["backend"] == "llama.cpp"
    assert embedder["llama_cpp_python"]
    assert re.fullmatch(r"[0-9a-f]{64}", embedder["model_digest"])
    assert embedder["model_source"]
    assert body["chat"] is None  # no chat model configured

    runner = CliRunner()
    printed = runner.invoke(cli, ["--version"])
    assert printed.exit_code == 0
    assert printed.output.startswith(f"ragd {ragd_version()} (Python 3.")
    asked = runner.invoke(cli, ["--url", own_stack.gateway_url, "version"])
    assert asked.exit_code == 0, asked.output
    assert f"sqlite_vec {store['sqlite_vec']}" in asked.output
    assert embedder["model_digest"] in asked.output


def test_poll_helpers_are_told_when_to_come_back(api: httpx.Client, searched: str) -> None:
    listed = api.get(f"/v1/vector_stores/{searched}/files").json()["data"]
    reply = api.get(f"/v1/vector_stores/{searched}/files/{listed[0]['id']}")
    assert reply.headers["openai-poll-after-ms"] == "500"


def test_json_logs_one_object_a_line(own_stack: Stack, searched: str) -> None:
    assert own_stack.log_dir is not None
    for service, says in (("store", "store listening"), ("gateway", "gateway on http")):
        lines = (own_stack.log_dir / f"{service}.log").read_text().splitlines()
        entries = [json.loads(line) for line in lines if line.startswith("{")]
        assert entries, lines[:5]
        assert all(entry["service"] == service for entry in entries)
        assert any(says in entry["message"] for entry in entries), entries[:5]
        assert {"time", "level", "logger", "message"} <= set(entries[0])
        # Not a word of the API key.
        assert KEY not in "\n".join(lines)


def test_ragd_audit_lists_who_did_what(own_stack: Stack, searched: str) -> None:
    runner = CliRunner()
    base = ["--url", own_stack.gateway_url, "--api-key", KEY, "audit"]
    assert httpx.get(own_stack.gateway_url + "/v1/files").status_code == 401
    deadline = time.monotonic() + 10
    while True:
        listed = runner.invoke(cli, [*base, "--since", "1h", "--json"])
        assert listed.exit_code == 0, listed.output
        entries = json.loads(listed.output)
        uploaded = any(
            e["operation"] == "write" and e["detail"].startswith("POST /v1/files ") for e in entries
        )
        # Entries are flushed in batches: wait for the upload's too.
        if sum(entry["operation"] == "search" for entry in entries) >= 2 and uploaded:
            break
        assert time.monotonic() < deadline, entries
        time.sleep(0.2)
    searches = [entry for entry in entries if entry["operation"] == "search"]
    assert {entry["detail"] for entry in searches} == {"hybrid", "vector"}
    assert {entry["vector_store_id"] for entry in searches} == {searched}
    # Every request is there, by key, with a failed one's error code ...
    keyed = [e for e in entries if e["operation"] != "ingest"]
    assert {entry["key"] for entry in keyed} == {"bootstrap"}
    # ... but an anonymous attempt is counted, not written one by one (a "refused" entry
    # sums them up each minute).
    assert not [e for e in entries if e["error_code"] == "invalid_api_key"]
    metrics = httpx.get(
        own_stack.gateway_url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert 'ragd_http_refused_total{reason="missing_key"} 1.0' in metrics.text
    (missing,) = [entry for entry in entries if entry["vector_store_id"] == "vs_nothing_here"]
    assert missing["operation"] == "read" and missing["error_code"] == "not_found"
    assert missing["detail"] == "GET /v1/vector_stores/{vector_store_id} 404"
    assert any(
        e["operation"] == "write" and e["detail"].startswith("POST /v1/files ") for e in entries
    )
    only = runner.invoke(cli, [*base, "--key", "nobody", "--json"])
    assert json.loads(only.output) == []
    ingests = runner.invoke(cli, [*base, "--op", "ingest", "-n", "seen"], env={"COLUMNS": "200"})
    assert ingests.exit_code == 0, ingests.output
    assert ingests.output.count("ingest") == 2 and searched in ingests.output
    assert "completed" in ingests.output
    bad = runner.invoke(cli, [*base, "--since", "soon"])
    assert bad.exit_code == 2
    anonymous = runner.invoke(cli, ["--url", own_stack.gateway_url, "audit"])
    assert anonymous.exit_code == 5, anonymous.output


def test_the_grafana_dashboard_asks_only_for_metrics_ragd_exposes(
    own_stack: Stack, api: httpx.Client, searched: str
) -> None:
    dashboard = json.loads((Path(__file__).parent.parent / "deploy/grafana/ragd.json").read_text())
    wanted = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"ragd_[a-z_]+", target["expr"])
    }
    exposed = set()
    for text in (
        api.get("/metrics").text,
        httpx.get(own_stack.metrics_url("embedder")).text,
        httpx.get(own_stack.metrics_url("store")).text,
    ):
        exposed |= {name.partition("{")[0] for name in samples(text)}
    assert wanted and wanted <= exposed, wanted - exposed
