"""The Gateway API inference routing overlay (deploy/kubernetes/overlays/inference-pool) and the KServe
LLMInferenceService example (deploy/kserve/llminferenceservice.yaml): every object validates
against the Kubernetes schemas or its CRD's published schema (vendored, tests/fixtures/crds), the
pieces point at each other (pool -> pods and OpenAI port, pool -> picker Service -> picker
container, picker -> pool), the metric names the picker reads are the ones whose first series
inferd makes the pod's, and the inferd command lines are ones `inferd serve` accepts and serves
as the manifests say (a live server: /health and /metrics on its OpenAI port)."""

from __future__ import annotations

import copy
import json
import re
import shlex

import httpx
import jsonschema
import pytest

from inferd.frontends.metrics.routing import LORA_INFO, POD_MAX, POD_SUM
from inferd.testing import ServerProcess
from tests.deploy.conftest import DEPLOY, copy_add_sub
from tests.deploy.crd_schemas import INFERENCE_POOL, LLM_INFERENCE_SERVICE, validate
from tests.deploy.manifests import Doc, image_options, render, serve_options, yaml_docs
from tests.lazy import lazy_import
from tests.router_rules import picker_value

kubernetes_validate = lazy_import("kubernetes_validate")  # its schemas load with the first check
#: Kinds validated against a vendored CRD schema (the others against Kubernetes' own).
CRDS = {"InferencePool": INFERENCE_POOL}
#: Kinds whose CRD the project does not vendor (checked by the other overlays' tests).
UNCHECKED = {"ServiceMonitor"}


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return render("inference-pool")


def _named(docs: list[Doc], kind: str, name: str) -> Doc:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _container(deployment: Doc) -> Doc:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _args(container: Doc) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in container["args"])


def test_every_object_validates(docs: list[Doc]) -> None:
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ConfigMap", "ConfigMap", "Deployment", "Deployment", "InferencePool", "PodDisruptionBudget",
                            "Role", "RoleBinding", "Service", "Service", "ServiceAccount", "ServiceMonitor"])  # fmt: skip
    for doc in docs:
        if doc["kind"] in CRDS:
            validate(doc, CRDS[doc["kind"]])
        elif doc["kind"] not in UNCHECKED:
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda pool: pool["spec"]["targetPorts"][0].update(number="9000"),  # a string
        lambda pool: pool["spec"].update(targetPort=9000),  # unknown field (v1alpha2's name)
        lambda pool: pool["spec"]["targetPorts"].clear(),  # at least one
        lambda pool: pool["spec"]["endpointPickerRef"].update(failureMode="Sometimes"),
        lambda pool: pool["spec"].pop("selector"),
    ],
)
def test_a_broken_pool_is_refused(docs: list[Doc], breakage) -> None:
    pool = copy.deepcopy(_named(docs, "InferencePool", "inferd"))
    breakage(pool)
    with pytest.raises(jsonschema.ValidationError):
        validate(pool, INFERENCE_POOL)


def test_the_pool_routes_to_inferds_openai_port_through_the_picker(docs: list[Doc]) -> None:
    pool = _named(docs, "InferencePool", "inferd")["spec"]
    inferd = _named(docs, "Deployment", "inferd")
    container = _container(inferd)
    options = image_options(container)
    assert options.extra["routing_metrics"] is True
    openai_port = options.extra["openai_port"]
    assert [p["number"] for p in pool["targetPorts"]] == [openai_port]
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["openai"] == openai_port
    pod_labels = inferd["spec"]["template"]["metadata"]["labels"]
    selected = [d for d in docs if d["kind"] == "Deployment"
                if pool["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]  # fmt: skip
    assert [d["metadata"]["name"] for d in selected] == ["inferd"] and pod_labels
    service = _named(docs, "Service", pool["endpointPickerRef"]["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == pool["endpointPickerRef"]["port"]["number"]]
    epp = _named(docs, "Deployment", "inferd-epp")
    assert service["spec"]["selector"].items() <= epp["spec"]["template"]["metadata"]["labels"].items()
    epp_container = _container(epp)
    assert {p["name"]: p["containerPort"] for p in epp_container["ports"]}[port["targetPort"]] == 9002
    args = _args(epp_container)
    assert args["pool-name"] == "inferd"
    mount = next(m for m in epp_container["volumeMounts"] if args["config-file"].startswith(m["mountPath"] + "/"))
    volume = next(v for v in epp["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config = _named(docs, "ConfigMap", volume["configMap"]["name"])
    assert args["config-file"].rsplit("/", 1)[1] in config["data"]


def test_the_picker_reads_the_families_whose_first_series_is_the_pods(docs: list[Doc]) -> None:
    args = _args(_container(_named(docs, "Deployment", "inferd-epp")))
    assert (
        args["total-queued-requests-metric"] == "vllm:num_requests_waiting"
        and args["total-queued-requests-metric"] in POD_SUM
    )
    assert args["total-running-requests-metric"] in POD_SUM
    assert args["kv-cache-usage-percentage-metric"] in POD_MAX
    assert args["lora-info-metric"] == LORA_INFO
    assert args["model-server-metrics-path"] == "/metrics"


def test_a_live_server_with_the_overlays_flags_answers_the_picker(tmp_path, docs: list[Doc]) -> None:
    """The Deployment's flags (ports the system picks) on the example add_sub: /health and /metrics
    on the OpenAI port, the picker's reading of Triton's pending count for a pod without LLMs."""
    args = [a for a in _container(_named(docs, "Deployment", "inferd"))["args"] if not a.startswith("--openai-port")]
    repo = copy_add_sub(tmp_path / "models")
    with ServerProcess([repo], [*args, "--openai-port=0", "--openai-address=127.0.0.1"]) as server:
        root = f"http://127.0.0.1:{server.ports['openai']}"
        assert httpx.get(f"{root}/health", timeout=10).status_code == 200
        text = httpx.get(f"{root}/metrics", timeout=10).text
        assert picker_value(text, "nv_inference_pending_request_count") == 0
        assert picker_value(text, "nv_inference_pending_request_count{model=add_sub}") == 0


# -- KServe LLMInferenceService --------------------------------------------------------------------


def _llmisvc() -> Doc:
    (doc,) = yaml_docs(DEPLOY / "kserve/llminferenceservice.yaml")
    return doc


def _main(doc: Doc) -> Doc:
    (main,) = [c for c in doc["spec"]["template"]["containers"] if c["name"] == "main"]
    return main


def _script(main: Doc) -> str:
    assert main["command"] == ["/bin/sh", "-c"]
    (script,) = main["args"]
    return str(script)


def test_the_llm_service_validates_against_kserves_crd() -> None:
    doc = _llmisvc()
    validate(doc, LLM_INFERENCE_SERVICE)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "main"}, "spec": {"containers": [_main(doc)]}}
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda doc: doc["spec"]["model"].pop("uri"),
        lambda doc: doc["spec"].update(replicas="2"),
        lambda doc: doc["spec"]["model"].update(path="/mnt/models"),  # unknown field
    ],
)
def test_a_broken_llm_service_is_refused(breakage) -> None:
    doc = _llmisvc()
    breakage(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate(doc, LLM_INFERENCE_SERVICE)


def test_the_main_container_is_what_kserves_llm_contract_expects() -> None:
    doc = _llmisvc()
    main = _main(doc)
    script = _script(main)
    (line,) = [line for line in script.splitlines() if line.strip().startswith("exec inferd serve")]
    options = serve_options(shlex.split(line)[3:])
    assert options.extra["openai_port"] == 8000  # KServe's LLM port: probes, route and scheduler
    assert options.extra["routing_metrics"] is True
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {
        "openai": 8000,
        "http": options.http_port,
        "grpc": options.grpc_port,
        "metrics": options.metrics_port,
    }
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert (main[probe]["httpGet"]["path"], main[probe]["httpGet"]["port"]) == ("/health", 8000)
    # the one model of the repository the script writes: served under spec.model.name, from /mnt/models
    (repo,) = options.model_repositories
    name = doc["spec"]["model"]["name"]
    match = re.search(r"printf '(.*)\\n' > (\S+)", script)
    assert match is not None
    assert match.group(2) == f"{repo}/{name}/1/model.json"
    assert json.loads(match.group(1))["model"] == "/mnt/models"
