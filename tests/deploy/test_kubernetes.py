"""The kustomize overlays render with kubectl, every object validates against the Kubernetes
schemas, and what the manifests say about inferd (flags, ports, probes, drain, metric names) is
what a real `inferd serve` does."""

from __future__ import annotations

import pytest
import yaml

from inferd.testing import ServerProcess
from tests.deploy.conftest import EXAMPLES, http_get
from tests.deploy.manifests import KUSTOMIZE, OVERLAYS, Doc, image_options, one, render, yaml_docs
from tests.deploy.promql import metric_names
from tests.lazy import lazy_import

#: Kinds that come with CRDs (no schema in kubernetes-validate): checked by hand below.
CUSTOM_KINDS = {"ServiceMonitor"}
kubernetes_validate = lazy_import("kubernetes_validate")  # its schemas load with the first check


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[Doc]]:
    return request.param, render(request.param)


def test_every_object_validates_against_the_kubernetes_schemas(overlay):
    name, docs = overlay
    kinds = sorted(d["kind"] for d in docs)
    expected = ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor"]
    assert kinds == sorted(expected + (["HorizontalPodAutoscaler"] if name == "autoscaling" else []))
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)  # raises ValidationError


def test_a_broken_object_is_refused():
    (deployment,) = [d for d in render("cpu") if d["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def _container(docs: list[Doc]) -> Doc:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def test_ports_and_probes_are_inferds(overlay):
    _, docs = overlay
    container = _container(docs)
    options = image_options(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": options.http_port, "grpc": options.grpc_port, "metrics": options.metrics_port}
    assert options.model_repositories == ["/models"]
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert ports[get["port"]] == options.http_port
        paths[probe] = get["path"]
    assert paths == {"startupProbe": "/v2/health/ready", "livenessProbe": "/v2/health/live",
                     "readinessProbe": "/v2/health/ready"}  # fmt: skip
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["models"] == "/models"


def test_the_grace_period_outlasts_the_drain(overlay):
    _, docs = overlay
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    options = image_options(_container(docs))
    assert options.drain_delay_secs > 0  # readiness false while still serving, then close
    assert spec["terminationGracePeriodSeconds"] > options.drain_delay_secs + options.exit_timeout_secs


def test_service_pdb_and_servicemonitor_point_at_the_pods(overlay):
    _, docs = overlay
    deployment = one(docs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    container_ports = {p["name"] for p in _container(docs)["ports"]}
    service = one(docs, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["name"] for p in service["spec"]["ports"]} == {"http", "grpc", "metrics"}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == container_ports
    assert one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [("metrics", "/metrics")]


def test_the_repository_configmap_is_the_example_model(overlay):
    _, docs = overlay
    config_map = one(docs, "ConfigMap")
    volume = next(v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "models")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]  # the generated name, hash included
    files = {item["path"]: config_map["data"][item["key"]] for item in volume["configMap"]["items"]}
    assert files == {
        "add_sub/config.pbtxt": (EXAMPLES / "add_sub/config.pbtxt").read_text(),
        "add_sub/1/model.py": (EXAMPLES / "add_sub/1/model.py").read_text(),
    }


def test_overlays_differ_where_they_should():
    cpu, gpu, scaled = (_container(render(o)) for o in OVERLAYS)
    assert cpu["image"] == "inferd:cpu" and scaled["image"] == "inferd:cpu" and gpu["image"] == "inferd:gpu"
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in cpu["resources"]["limits"]
    assert "replicas" in one(render("cpu"), "Deployment")["spec"]
    assert "replicas" not in one(render("autoscaling"), "Deployment")["spec"]  # the HPA owns it


def test_hpa_scales_on_the_adapter_rule_over_inferds_queue_metric(served: ServerProcess):
    docs = render("autoscaling")
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "inferd"}
    (metric,) = hpa["spec"]["metrics"]
    (adapter,) = yaml_docs(KUSTOMIZE / "overlays/autoscaling/prometheus-adapter-config.yaml")
    kubernetes_validate.validate(adapter, kubernetes_validate.latest_version(), strict=True)
    (rule,) = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == rule["name"]["as"]
    used = metric_names(rule["seriesQuery"]) | metric_names(rule["metricsQuery"])
    assert used == {"nv_inference_queue_duration_us", "nv_inference_request_success"}
    status, body = http_get(f"http://127.0.0.1:{served.metrics_port}/metrics")
    assert status == 200
    for name in used:
        assert f"\n{name}{{" in body.decode(), name


def test_probe_paths_answer_on_a_real_server(served: ServerProcess):
    container = _container(render("cpu"))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        status, _ = http_get(f"http://{served.http_url}{container[probe]['httpGet']['path']}")
        assert status == 200, probe
