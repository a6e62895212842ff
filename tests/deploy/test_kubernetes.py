"""The Kubernetes manifests (deploy/kubernetes/, Kustomize): every overlay renders with
`kubectl kustomize`, every object validates strictly against the Kubernetes API schemas
(kubernetes-validate), and what a production gateway relies on is there: probes on /readyz
and /healthz, a preStop pause, a disruption budget and an autoscaler that match the pods,
credentials only from Secrets, a policy mounted so that its edits reach the pod, and a
gateway config that loads."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.config import load_config
from tests.harness import installed_tool

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(path.name for path in (KUSTOMIZE / "overlays").iterdir())
K8S_VERSION = kubernetes_validate.latest_version()
SECRET_ENV = {
    "CLOUDFLARE_ACCOUNT_ID": "0123456789abcdef",
    "CLOUDFLARE_API_TOKEN": "cf-token",
    "REDIS_URL": "redis://redis.tollgate.svc:6379/0",
    "ADMIN_TOKEN_HASH": "sha256:" + "0" * 64,
    "OTEL_COLLECTOR_ENDPOINT": "http://otel-collector.observability:4318",
}


def kubectl() -> str:
    return installed_tool("kubectl", "kubectl, with its built-in kustomize, comes with the machine image")


def render(overlay: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [
            kubectl(),
            "kustomize",
            "--load-restrictor",
            "LoadRestrictionsNone",
            str(KUSTOMIZE / "overlays" / overlay),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)


def of_kind(docs: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    return (doc for doc in docs if doc["kind"] == kind)


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = of_kind(docs, kind)
    return found


def test_there_are_three_overlays() -> None:
    assert OVERLAYS == ["opa-sidecar", "redis", "redis-cluster"]


def test_every_object_validates_against_the_kubernetes_schemas(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD's schema is not in the API's; checked below
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validation_is_strict() -> None:
    deployment = one(render("redis"), "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/readyz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_gateway_pods_are_probed_drained_and_disruption_bounded(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    gateway = next(c for c in pod["spec"]["containers"] if c["name"] == "gateway")
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["lifecycle"]["preStop"]["sleep"]["seconds"] > 0
    assert pod["spec"]["terminationGracePeriodSeconds"] > gateway["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert deployment["spec"]["replicas"] >= 3
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] == deployment["spec"]["replicas"]
    service = one(docs, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_credentials_come_only_from_secrets(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = rendered
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    for container in pod["containers"]:
        for env in container.get("env", ()):
            if (
                any(word in env["name"] for word in ("TOKEN", "KEY", "URL", "PASSWORD", "SECRET"))
                and "ENDPOINT" not in env["name"]
            ):
                assert "secretKeyRef" in env.get("valueFrom", {}), env["name"]
    assert not list(of_kind(docs, "Secret"))  # created by the operator, never shipped with values
    for config_map in of_kind(docs, "ConfigMap"):
        for text in config_map["data"].values():
            assert "sk-" not in text
            assert "api_token: ${" in text or "api_token" not in text


def test_the_policy_is_mounted_so_that_edits_reach_the_pod(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    policies = next(
        doc for doc in of_kind(docs, "ConfigMap") if doc["metadata"]["name"] == "tollgate-policies"
    )
    assert set(policies["data"]) == {path.name for path in (ROOT / "policies").iterdir() if path.is_file()}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(
        v["name"] for v in pod["volumes"] if v.get("configMap", {}).get("name") == "tollgate-policies"
    )
    for container in pod["containers"]:
        for mount in container.get("volumeMounts", ()):
            if mount["name"] == volume:
                assert "subPath" not in mount  # a subPath mount never sees an update


def test_the_gateway_config_loads(
    rendered: tuple[str, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overlay, docs = rendered
    config_map = next(
        doc for doc in of_kind(docs, "ConfigMap") if doc["metadata"]["name"].startswith("tollgate-config")
    )
    gateway = next(
        c for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"] if c["name"] == "gateway"
    )
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    for env in gateway["env"]:
        if "value" in env:
            monkeypatch.setenv(env["name"], env["value"])
    text = config_map["data"]["tollgate.yaml"].replace("/etc/tollgate/policies", str(ROOT / "policies"))
    path = tmp_path / "tollgate.yaml"
    path.write_text(text)
    config = load_config(path)
    assert config.state is not None and config.state.store == "redis"
    assert config.state.redis_cluster is (overlay == "redis-cluster")
    assert config.audit is not None and config.audit.sink == "redis"
    assert config.policy is not None
    assert config.policy.engine == ("opa" if overlay == "opa-sidecar" else "rego")


def test_the_opa_sidecar_answers_on_loopback_and_is_probed_on_its_diagnostic_port() -> None:
    pod = one(render("opa-sidecar"), "Deployment")["spec"]["template"]["spec"]
    opa = next(c for c in pod["containers"] if c["name"] == "opa")
    assert "--addr=127.0.0.1:8181" in opa["args"]
    assert opa["readinessProbe"]["httpGet"]["port"] == "opa-diagnostic"


def test_the_service_monitor_scrapes_metrics() -> None:
    monitor = one(render("redis"), "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "tollgate"}
