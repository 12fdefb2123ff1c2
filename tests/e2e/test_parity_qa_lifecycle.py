"""Lifecycle sentences as Triton's own QA (``qa/L0_lifecycle``, ``qa/L0_model_namespacing``) reads
them, against a real ``inferd serve`` (explicit mode) with tritonclient: a failed load, a model
name two repositories hold, and the ``namespace`` label of the metrics.

Each constant is what the real Triton 2.51 answered for the same repositories.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.metrics_text import sample, scrape
from tests.servers import Servers
from tests.triton_clients import add_sub_inputs, error_of

# Observed from Triton 2.51 (HTTP 400 / gRPC INVALID_ARGUMENT) for a load whose initialize raises:
# "load failed for model 'boom': version 1 is at UNAVAILABLE state: Internal: RuntimeError: boom in
# init ..." (with --model-namespacing the model is '<repository path>::boom').
LOAD_FAILED = "load failed for model '{}': version 1 is at UNAVAILABLE state: "
# Observed from Triton 2.51 with --model-namespacing=true, a model 'dup' in two repositories,
# asked for by its plain name (infer, metadata: 400).
AMBIGUOUS = (
    "There are 2 identifiers of model 'dup' in global map, model namespace must be provided to resolve ambiguity."
)
BOOM = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("boom in init")

    def execute(self, requests):
        return []
"""


@pytest.fixture(scope="module")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first = write_repository(tmp_path_factory.mktemp("first") / "models", {
        "dup": models.add_sub(), "boom": models.simple(models.ADD_SUB_CONFIG, BOOM)})  # fmt: skip
    second = write_repository(tmp_path_factory.mktemp("second") / "models", {"dup": models.add_sub(offset=100)})
    return first, second


@pytest.fixture(scope="module")
def server(serve: Servers, repositories: tuple[Path, Path]) -> ServerProcess:
    return serve(list(repositories), "--model-control-mode=explicit", "--model-namespacing=true", "--load-model=dup")


def test_a_failed_load_begins_with_load_failed_for_model(
    server: ServerProcess, repositories: tuple[Path, Path]
) -> None:
    named = f"{repositories[0]}::boom"
    for client, status in ((httpclient.InferenceServerClient(server.http_url), "400"),
                           (grpcclient.InferenceServerClient(server.grpc_url), "StatusCode.INVALID_ARGUMENT")):  # fmt: skip
        got, message = error_of(lambda c=client: c.load_model("boom"))  # type: ignore[misc]
        assert got == status
        assert message.startswith(LOAD_FAILED.format(named)) and "RuntimeError: boom in init" in message, message
        client.close()


def test_a_failed_load_without_namespacing(serve: Servers) -> None:
    repo = {"boom": models.simple(models.ADD_SUB_CONFIG, BOOM)}
    with serve(repo, "--model-control-mode=explicit") as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        got, message = error_of(lambda: client.load_model("boom"))
        assert got == "400" and message.startswith(LOAD_FAILED.format("boom")), message
        client.close()


def test_a_name_two_repositories_hold_is_ambiguous(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert error_of(lambda: client.infer("dup", add_sub_inputs(httpclient))) == ("400", AMBIGUOUS)
    assert error_of(lambda: client.get_model_metadata("dup")) == ("400", AMBIGUOUS)
    client.close()


def test_the_namespace_label_is_the_repository_path(server: ServerProcess, repositories: tuple[Path, Path]) -> None:
    """Observed from Triton 2.51: nv_inference_request_success{model="dup",namespace="<repository path>",version="1"}."""
    text = scrape(server)
    for repo in repositories:
        assert sample(text, "nv_inference_request_success", model="dup", namespace=str(repo), version="1") == 0
