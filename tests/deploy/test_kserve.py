"""The KServe ServingRuntime and example InferenceService: their containers validate against the
Kubernetes schemas, the runtime's command line is one `inferd serve` accepts, its probes and ports
are the ones that command line serves, and the InferenceService picks this runtime.

KServe's own CRD models (the `kserve` package) are not installed: it pulls ~30 packages (pandas,
fastapi, kubernetes, starlette>=1.3.1 among them), which would move the server's own
dependencies. The KServe-specific fields are checked against KServe's documented v1alpha1 /
v1beta1 API instead."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate

from inferd.testing import ServerProcess
from tests.deploy.conftest import DEPLOY, http_get
from tests.deploy.manifests import Doc, image_options, yaml_docs

K8S_VERSION = kubernetes_validate.latest_version()
#: KServe's HTTP and gRPC ports for a runtime's container (what its ingress and probes expect).
KSERVE_HTTP_PORT, KSERVE_GRPC_PORT = 8080, 9000
FORMATS = {"onnx", "pytorch", "triton", "xgboost", "python"}


def _runtime() -> Doc:
    (runtime,) = yaml_docs(DEPLOY / "kserve/servingruntime.yaml")
    return runtime


def _inference_service() -> Doc:
    (isvc,) = yaml_docs(DEPLOY / "kserve/inferenceservice.yaml")
    return isvc


def test_the_runtime_container_is_a_valid_kubernetes_container():
    (container,) = _runtime()["spec"]["containers"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runtime"}, "spec": {"containers": [container]}}
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_the_runtime_speaks_v2_for_the_formats_inferd_serves():
    runtime = _runtime()
    assert (runtime["apiVersion"], runtime["kind"]) == ("serving.kserve.io/v1alpha1", "ServingRuntime")
    spec = runtime["spec"]
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    assert {f["name"] for f in spec["supportedModelFormats"]} == FORMATS
    assert all(isinstance(f["version"], str) for f in spec["supportedModelFormats"])
    assert spec["multiModel"] is False


def test_the_runtime_command_line_serves_kserves_ports_and_paths():
    runtime = _runtime()
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container"  # the name KServe injects the model into
    options = image_options(container)
    assert options.model_repositories == [Path("/mnt/models")]  # where the storage initializer writes
    assert (options.http_port, options.grpc_port) == (KSERVE_HTTP_PORT, KSERVE_GRPC_PORT)
    assert [p["containerPort"] for p in container["ports"]] == [options.http_port]
    assert int(runtime["metadata"]["annotations"]["prometheus.kserve.io/port"]) == options.metrics_port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == options.http_port
    assert options.drain_delay_secs > 0


def test_the_runtime_probe_paths_answer_on_a_real_server(served: ServerProcess):
    (container,) = _runtime()["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        status, _ = http_get(f"http://{served.http_url}{container[probe]['httpGet']['path']}")
        assert status == 200, probe


def test_the_inference_service_uses_the_runtime():
    isvc, runtime = _inference_service(), _runtime()
    assert (isvc["apiVersion"], isvc["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {(f["name"], f["version"]) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"]["version"]) in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert model["storageUri"].split("://")[0] in {"s3", "gs", "pvc", "https", "hdfs", "azure"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "isvc"},
           "spec": {"containers": [{"name": "model", "resources": model["resources"]}]}}  # fmt: skip
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
