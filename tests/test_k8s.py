"""deploy/k8s renders to valid Kubernetes objects that describe the same stack as compose.

No cluster runs here. The kustomization is rendered with `kubectl kustomize` when kubectl is
installed, else by the small subset of kustomize it uses (resources, labels, images; the test
checks it uses nothing else), and every object is checked against the Kubernetes JSON schemas
that the kubernetes-validate package ships (strict: unknown fields fail).
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
# The oldest release we claim (gRPC probes are GA since 1.27, HPA v2 since 1.23) and the newest
# the installed schemas know.
KUBERNETES_VERSIONS = ("1.29.0", "latest")
Manifest = dict[str, Any]


def _python_render() -> list[Manifest]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - {"apiVersion", "kind", "resources", "labels", "images"}
    assert not unsupported, f"the fallback renderer does not implement {unsupported}"
    objects: list[Manifest] = []
    for resource in kustomization["resources"]:
        objects.extend(d for d in yaml.safe_load_all((K8S / resource).read_text()) if d)
    for label in kustomization.get("labels", []):
        assert not label.get("includeSelectors") and not label.get("includeTemplates")
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update(label["pairs"])
    images = {image["name"]: image for image in kustomization.get("images", [])}
    for obj in objects:
        spec = _pod_spec(obj)
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            image = images.get(container["image"])
            if image:
                name = image.get("newName", container["image"])
                container["image"] = f"{name}:{image['newTag']}" if "newTag" in image else name
    return objects


def _kubectl_render() -> list[Manifest]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _pod_spec(obj: Manifest) -> dict[str, Any]:
    if obj["kind"] in {"Deployment", "StatefulSet"}:
        spec: dict[str, Any] = obj["spec"]["template"]["spec"]
        return spec
    return {}


def _key(obj: Manifest) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], Manifest]:
    rendered = _kubectl_render() if shutil.which("kubectl") else _python_render()
    by_key = {_key(obj): obj for obj in rendered}
    assert len(by_key) == len(rendered), "two objects share a kind and name"
    return by_key


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _container(manifests: dict[tuple[str, str], Manifest], kind: str, name: str) -> Manifest:
    containers: list[Manifest] = _pod_spec(manifests[kind, name])["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(container: Manifest) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_the_stack_has_every_object(manifests: dict[tuple[str, str], Manifest]) -> None:
    assert set(manifests) == {
        ("ConfigMap", "ragd-config"),
        ("Deployment", "embedder"),
        ("Service", "embedder"),
        ("HorizontalPodAutoscaler", "embedder"),
        ("PodDisruptionBudget", "embedder"),
        ("StatefulSet", "store"),
        ("Service", "store"),
        ("Service", "store-pods"),
        ("Deployment", "gateway"),
        ("Service", "gateway"),
        ("NetworkPolicy", "store"),
        ("NetworkPolicy", "embedder"),
    }
    for obj in manifests.values():
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ragd"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(
    manifests: dict[tuple[str, str], Manifest], version: str
) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    if version == "latest":
        version = kubernetes_validate.latest_version()
    for obj in manifests.values():
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_schema_check_rejects_a_broken_manifest(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    broken = copy.deepcopy(manifests["Deployment", "embedder"])
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.29.0", strict=True)
    misspelled = copy.deepcopy(manifests["StatefulSet", "store"])
    misspelled["spec"]["volumeClaimTemplate"] = misspelled["spec"].pop("volumeClaimTemplates")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelled, "1.29.0", strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_the_fallback_renderer_agrees_with_kubectl() -> None:
    ours = {_key(obj): obj for obj in _python_render()}
    theirs = {_key(obj): obj for obj in _kubectl_render()}
    assert ours == theirs


def test_only_the_gateway_reaches_the_store_and_embedders_with_the_token(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    for name, port in (("store", 50052), ("embedder", 50051)):
        policy = manifests["NetworkPolicy", name]["spec"]
        assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": name}
        assert policy["policyTypes"] == ["Ingress"]
        rule, metrics = policy["ingress"]
        assert rule["from"] == [
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}}}
        ]
        assert rule["ports"] == [{"protocol": "TCP", "port": port}]
        # Anyone may scrape /metrics, and nothing else.
        assert metrics == {"ports": [{"protocol": "TCP", "port": 9100}]}
    for kind, name in (
        ("StatefulSet", "store"),
        ("Deployment", "embedder"),
        ("Deployment", "gateway"),
    ):
        token = _env(_container(manifests, kind, name))["RAGD_SERVICE_TOKEN"]
        assert token == {"secretKeyRef": {"name": "ragd-service-token", "key": "token"}}, name


def test_services_select_their_pods_and_name_real_ports(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    workloads = [obj for obj in manifests.values() if _pod_spec(obj)]
    for (kind, name), service in manifests.items():
        if kind != "Service":
            continue
        selector = service["spec"]["selector"]
        [workload] = [
            w
            for w in workloads
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert workload["spec"]["selector"]["matchLabels"] == selector
        port_names = {p["name"] for c in _pod_spec(workload)["containers"] for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, (name, port)


def test_embedders_are_behind_a_headless_service_with_an_autoscaler(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    # round_robin in the gateway needs every pod's address, not one virtual IP.
    assert manifests["Service", "embedder"]["spec"]["clusterIP"] == "None"
    assert manifests["Deployment", "embedder"]["spec"]["replicas"] >= 2
    hpa = manifests["HorizontalPodAutoscaler", "embedder"]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "embedder",
    }
    assert hpa["minReplicas"] >= 2
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    # Utilization is relative to the request: without one the autoscaler cannot work.
    assert _container(manifests, "Deployment", "embedder")["resources"]["requests"]["cpu"]


def test_the_store_is_one_replica_with_the_only_volume_claim(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    store = manifests["StatefulSet", "store"]["spec"]
    assert store["replicas"] == 1
    # Pods get stable names from a headless Service; clients use a stable virtual IP.
    assert manifests["Service", store["serviceName"]]["spec"]["clusterIP"] == "None"
    assert "clusterIP" not in manifests["Service", "store"]["spec"]
    [claim] = store["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    mounts = {
        m["name"]: m["mountPath"]
        for m in _container(manifests, "StatefulSet", "store")["volumeMounts"]
    }
    assert mounts[claim["metadata"]["name"]] == "/data"
    assert _env(_container(manifests, "StatefulSet", "store"))["RAGD_DB_PATH"] == "/data/ragd.db"
    for key in [("Deployment", "embedder"), ("Deployment", "gateway")]:
        volumes = _pod_spec(manifests[key]).get("volumes", [])
        assert all("persistentVolumeClaim" not in v for v in volumes), key
    assert manifests["Deployment", "gateway"]["spec"]["replicas"] > 1


def test_probes_use_each_services_readiness(manifests: dict[tuple[str, str], Manifest]) -> None:
    for kind, name, port in [("Deployment", "embedder", 50051), ("StatefulSet", "store", 50052)]:
        container = _container(manifests, kind, name)
        assert container["readinessProbe"]["grpc"]["port"] == port
        assert container["livenessProbe"]["grpc"]["port"] == port
        assert _env(container)[f"RAGD_{name.upper()}_LISTEN"] == f"0.0.0.0:{port}"
    gateway = _container(manifests, "Deployment", "gateway")
    # Plain /ready: ready while the store answers (tests/test_readiness.py runs this probe's
    # request against a stack whose embedder is killed); a hung embedder costs it ~1 s.
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert gateway["readinessProbe"]["timeoutSeconds"] >= 3
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/health"


def test_gateway_targets_and_ports_match_compose(
    manifests: dict[tuple[str, str], Manifest], compose: dict[str, Any]
) -> None:
    env = _env(_container(manifests, "Deployment", "gateway"))
    compose_env = compose["services"]["gateway"]["environment"]
    for name in ["RAGD_EMBEDDER_TARGET", "RAGD_STORE_TARGET", "RAGD_INGEST_LISTEN", "RAGD_PORT"]:
        assert env[name] == compose_env[name], name
    # The API key is optional: an absent secret means no authentication.
    assert env["RAGD_API_KEYS"]["secretKeyRef"]["optional"] is True
    service_ports = {p["name"]: p["port"] for p in manifests["Service", "gateway"]["spec"]["ports"]}
    assert service_ports == {"http": 8000, "grpc-ingest": 50053, "metrics": 9100}


def test_every_pod_serves_metrics_on_an_annotated_named_port(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    for kind, name in (
        ("StatefulSet", "store"),
        ("Deployment", "embedder"),
        ("Deployment", "gateway"),
    ):
        template = manifests[kind, name]["spec"]["template"]
        assert template["metadata"]["annotations"]["prometheus.io/port"] == "9100", name
        ports = {p["name"]: p["containerPort"] for p in _container(manifests, kind, name)["ports"]}
        assert ports["metrics"] == 9100, name
    assert manifests["ConfigMap", "ragd-config"]["data"]["RAGD_METRICS_LISTEN"] == "0.0.0.0:9100"


def test_images_are_the_ones_compose_builds(
    manifests: dict[tuple[str, str], Manifest], compose: dict[str, Any]
) -> None:
    for kind, name in [
        ("Deployment", "embedder"),
        ("StatefulSet", "store"),
        ("Deployment", "gateway"),
    ]:
        assert _container(manifests, kind, name)["image"] == compose["services"][name]["image"]


def test_every_container_runs_unprivileged_with_resources(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    for key, obj in manifests.items():
        spec = _pod_spec(obj)
        if not spec:
            continue
        assert spec["securityContext"]["runAsNonRoot"] is True, key
        for container in spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, key
            assert container["resources"]["requests"]["memory"], key
            assert container["resources"]["limits"]["memory"], key


def test_the_store_replicates_when_the_replica_secret_exists(
    manifests: dict[tuple[str, str], Manifest], compose: dict[str, Any]
) -> None:
    spec = _pod_spec(manifests["StatefulSet", "store"])
    restore, sidecar = spec["initContainers"]
    store = _container(manifests, "StatefulSet", "store")
    # The restore runs to completion first; Litestream is a native sidecar (restartPolicy
    # Always) on the same volume, from the store's image, like compose's replicator.
    assert restore["command"] == ["python", "-m", "services.store.replicate", "restore"]
    assert "restartPolicy" not in restore
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["command"] == ["python", "-m", "services.store.replicate"]
    assert restore["image"] == sidecar["image"] == store["image"]
    assert compose["services"]["replicator"]["image"] == store["image"]
    for container in (restore, sidecar, store):
        env = _env(container)
        assert env["RAGD_DB_PATH"] == "/data/ragd.db", container["name"]
        # One optional Secret turns it on for all three; without it replication stays off.
        assert env["RAGD_REPLICA_URL"]["secretKeyRef"] == {
            "name": "ragd-replica",
            "key": "url",
            "optional": True,
        }, container["name"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["data"] == "/data", container["name"]
    assert _env(sidecar)["RAGD_REPLICA_METRICS_LISTEN"] == "0.0.0.0:9101"
    config = manifests["ConfigMap", "ragd-config"]["data"]
    assert config["RAGD_REPLICA_SYNC_INTERVAL"] == "1"


def test_chat_history_is_kept_until_the_retention_settings_say(
    manifests: dict[tuple[str, str], Manifest],
) -> None:
    config = manifests["ConfigMap", "ragd-config"]["data"]
    assert config["RAGD_CONVERSATIONS_TTL_DAYS"] == config["RAGD_RESPONSES_TTL_DAYS"] == "0"
    store = _container(manifests, "StatefulSet", "store")
    assert {"configMapRef": {"name": "ragd-config"}} in store["envFrom"]
