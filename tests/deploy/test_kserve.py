"""The KServe ServingRuntime and example InferenceService: their containers validate against the
Kubernetes schemas, the runtime's command line is one `inferd serve` accepts, its probes and ports
are the ones that command line serves, and the InferenceService picks this runtime. Both documents
round-trip through KServe's own CRD models (the `kserve` package) with nothing unknown, dropped or
mistyped.

The `kserve` package is not in the project's venv: it pulls ~30 packages (pandas, fastapi,
starlette>=1.3.1 among them) that would move the server's own dependencies. Its models and the
Kubernetes client models they name are installed without dependencies into pytest's cache (see
tests/deploy/kserve_sdk.py); a failed download fails the tests that need them."""

from __future__ import annotations

import copy
import re

import pytest

from inferd.testing import ServerProcess
from tests.deploy.conftest import DEPLOY, http_get
from tests.deploy.kserve_sdk import KSERVE_VERSION, ManifestError, Sdk, install
from tests.deploy.manifests import Doc, image_options, yaml_docs
from tests.lazy import lazy_import

kubernetes_validate = lazy_import("kubernetes_validate")  # its schemas load with the first check
#: KServe's HTTP and gRPC ports for a runtime's container (what its ingress and probes expect).
KSERVE_HTTP_PORT, KSERVE_GRPC_PORT = 8080, 9000
FORMATS = {"onnx", "pytorch", "triton", "xgboost", "python"}


@pytest.fixture(scope="session")
def sdk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Sdk:
    """KServe's models, installed once into pytest's cache (a temp dir without the cache plugin)."""
    cache = getattr(request.config, "cache", None)
    name = f"kserve-sdk-{KSERVE_VERSION}"
    target = cache.mkdir(name) if cache is not None else tmp_path_factory.mktemp(name)
    try:
        site = install(target)
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"could not install KServe's CRD models from PyPI to check the manifests: {exc}")
    return Sdk.from_site(site)


def _runtime() -> Doc:
    (runtime,) = yaml_docs(DEPLOY / "kserve/servingruntime.yaml")
    return runtime


def _inference_service() -> Doc:
    (isvc,) = yaml_docs(DEPLOY / "kserve/inferenceservice.yaml")
    return isvc


def test_the_runtime_container_is_a_valid_kubernetes_container():
    (container,) = _runtime()["spec"]["containers"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "runtime"}, "spec": {"containers": [container]}}
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)


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
    assert options.model_repositories == ["/mnt/models"]  # where the storage initializer writes
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
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("path", ["kserve/servingruntime.yaml", "kserve/inferenceservice.yaml"])
def test_the_documents_round_trip_through_kserves_models(sdk: Sdk, path: str):
    (doc,) = yaml_docs(DEPLOY / path)
    type_name = sdk.document_type(doc)
    assert type_name in {"V1alpha1ServingRuntime", "V1beta1InferenceService"}
    loaded = sdk.load(doc, type_name)
    assert type(loaded).__name__ == type_name
    assert sdk.dump(loaded) == doc  # nothing unknown, nothing dropped, nothing retyped


_DELETE = object()
_PROBE = ("spec", "containers", 0, "readinessProbe")


def _broken(doc: Doc, where: tuple[str | int, ...], key: str, value: object) -> Doc:
    """A copy of ``doc`` with ``key`` under ``where`` set to ``value`` (or deleted)."""
    broken = copy.deepcopy(doc)
    node = broken
    for step in where:
        node = node[step]
    if value is _DELETE:
        del node[key]
    else:
        node[key] = value
    return broken


@pytest.mark.parametrize(("where", "key", "value", "message"), [
    pytest.param(("spec",), "multiModels", False, "$.spec: unknown field(s) ['multiModels'] for V1alpha1ServingRuntimeSpec",
                 id="unknown-kserve-field"),
    pytest.param((*_PROBE, "httpGet"), "host_port", 1,
                 "$.spec.containers[0].readinessProbe.httpGet: unknown field(s) ['host_port'] for V1HTTPGetAction",
                 id="unknown-kubernetes-field"),
    pytest.param(("spec",), "multiModel", "false", "$.spec.multiModel: expected bool, got str 'false'", id="str-for-bool"),
    pytest.param(_PROBE, "periodSeconds", "2", "$.spec.containers[0].readinessProbe.periodSeconds: expected int, got str",
                 id="str-for-int"),
    pytest.param(("spec", "supportedModelFormats", 0), "version", 2,
                 "$.spec.supportedModelFormats[0].version: expected str, got int", id="int-for-str"),
    pytest.param(("spec", "containers", 0), "name", _DELETE,
                 "$.spec.containers[0]: V1Container: Invalid value for `name`, must not be `None`", id="missing-required"),
])  # fmt: skip
def test_a_broken_runtime_is_refused(sdk: Sdk, where: tuple[str | int, ...], key: str, value: object, message: str):
    with pytest.raises(ManifestError, match=re.escape(message)):
        sdk.load(_broken(_runtime(), where, key, value), "V1alpha1ServingRuntime")


@pytest.mark.parametrize(("where", "key", "value", "message"), [
    pytest.param(("spec", "predictor", "model"), "storageURI", "s3://x",
                 "$.spec.predictor.model: unknown field(s) ['storageURI'] for V1beta1ModelSpec", id="misspelt-field"),
    pytest.param(("spec", "predictor"), "minReplicas", "1", "$.spec.predictor.minReplicas: expected int, got str",
                 id="str-for-int"),
    pytest.param(("spec", "predictor", "model", "resources"), "requests", ["cpu"],
                 "$.spec.predictor.model.resources.requests: expected dict(str, str), got list", id="list-for-map"),
])  # fmt: skip
def test_a_broken_inference_service_is_refused(
    sdk: Sdk, where: tuple[str | int, ...], key: str, value: object, message: str
):
    with pytest.raises(ManifestError, match=re.escape(message)):
        sdk.load(_broken(_inference_service(), where, key, value), "V1beta1InferenceService")
