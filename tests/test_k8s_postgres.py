"""deploy/k8s-postgres: the base stack with the store as a Deployment of 2 on PostgreSQL, the
database's URL in a Secret (issue 31). Rendered with `kubectl kustomize` (the overlay uses
patches, which tests/test_k8s.py's fallback renderer does not implement) and checked against
the Kubernetes schemas as the base is."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
OVERLAY = ROOT / "deploy" / "k8s-postgres"
Manifest = dict[str, Any]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], Manifest]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(OVERLAY)], check=True, capture_output=True, text=True
    ).stdout
    objects = [d for d in yaml.safe_load_all(out) if d]
    by_key = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(by_key) == len(objects)
    return by_key


def _store(manifests: dict[tuple[str, str], Manifest]) -> Manifest:
    return manifests["Deployment", "store"]


def test_the_store_is_a_deployment_of_two_without_a_volume_claim(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    assert ("StatefulSet", "store") not in manifests
    spec = _store(manifests)["spec"]
    assert spec["replicas"] == 2
    volumes = spec["template"]["spec"]["volumes"]
    assert all("persistentVolumeClaim" not in v for v in volumes)
    assert manifests["PodDisruptionBudget", "store"]["spec"]["minAvailable"] == 1
    # The rest of the stack is the base's.
    for key in [("Deployment", "gateway"), ("Deployment", "embedder"), ("Service", "store")]:
        assert key in manifests
    for obj in manifests.values():
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ragd"


def test_the_database_url_comes_from_a_mounted_secret(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    pod = _store(manifests)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert "RAGD_DATABASE_URL" not in env and "RAGD_DB_PATH" not in env
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    [secret] = [v for v in pod["volumes"] if "secret" in v]
    assert secret["secret"]["secretName"] == "ragd-database"
    assert env["RAGD_DATABASE_URL_FILE"] == f"{mounts[secret['name']]}/url"
    assert env["RAGD_SERVICE_TOKEN"] == {
        "secretKeyRef": {"name": "ragd-service-token", "key": "token"}
    }
    assert container["image"] == "ragd-store:0.1.0"


def test_services_still_find_the_store_pods(manifests: dict[tuple[str, str], Manifest]) -> None:
    labels = _store(manifests)["spec"]["template"]["metadata"]["labels"]
    ports = {
        p["name"] for p in _store(manifests)["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    for name in ("store", "store-pods"):
        service = manifests["Service", name]["spec"]
        assert service["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in service["ports"]} <= ports
    assert manifests["NetworkPolicy", "store"]["spec"]["podSelector"]["matchLabels"].items() <= (
        labels.items()
    )


@pytest.mark.parametrize("version", ["1.29.0", "latest"])
def test_the_overlay_matches_the_kubernetes_schemas(
    manifests: dict[tuple[str, str], Manifest], version: str
) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    if version == "latest":
        version = kubernetes_validate.latest_version()
    for obj in manifests.values():
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_gateway_balances_over_the_store_pods(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    [gateway] = manifests["Deployment", "gateway"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in gateway["env"]}
    assert env["RAGD_STORE_TARGET"] == "dns:///store-pods:50052"
    assert manifests["Service", "store-pods"]["spec"]["clusterIP"] == "None"
    # The patch replaced the one variable and kept the rest of the base's.
    assert env["RAGD_EMBEDDER_TARGET"] == "dns:///embedder:50051"
