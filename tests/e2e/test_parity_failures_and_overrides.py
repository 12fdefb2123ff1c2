"""Failures and overrides as Triton counts and words them, end to end against a real ``inferd serve``
(explicit mode), with tritonclient.

Each expectation is what the real Triton 2.51 answered for the same model and request (see the
comments): failure counting, the repository API with overrides and the error sentences clients
match on.
"""

from __future__ import annotations

import json
import os
import queue
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc import grpc_service_pb2_grpc as pb_grpc
from inferd.testing import ServerProcess
from tests.metrics_text import samples, scrape
from tests.python_models import source
from tests.servers import Servers

RAISES = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("boom from model")
"""
IDENTITY = source("identity")
IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
PLAIN = 'backend: "python"\nmax_batch_size: 0\n' + IO
BATCHED = (
    'backend: "python"\nmax_batch_size: 8\n'
    "dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 5000000 }\n" + IO
)
DECOUPLED = PLAIN + "model_transaction_policy { decoupled: true }\n"
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [ { model_name: "fail_plain" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }
"""
STARTUP = ["fail_plain", "fail_batched", "fail_decoupled", "fail_ensemble", "identity"]
POLL_FAILURE = "failed to load '{}', failed to poll from model repository"


def _override(name: str, marker: str = "override") -> str:
    """A load request's config (JSON), marked by a parameter so it can be told from the file's."""
    config = {
        "name": name, "backend": "python", "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
        "parameters": {"marker": {"string_value": marker}},
    }  # fmt: skip
    return json.dumps(config)


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "fail_plain": {"config.pbtxt": PLAIN, "1/model.py": RAISES},
        "fail_batched": {"config.pbtxt": BATCHED, "1/model.py": RAISES},
        "fail_decoupled": {"config.pbtxt": DECOUPLED, "1/model.py": RAISES},
        "fail_ensemble": {"config.pbtxt": ENSEMBLE},
        "identity": {"config.pbtxt": PLAIN, "1/model.py": IDENTITY},
        "overridden": {"config.pbtxt": PLAIN, "1/model.py": IDENTITY},
        "broken": {"config.pbtxt": PLAIN, "1/model.py": "raise RuntimeError('cannot import this model')\n"},
    }
    args = ["--model-control-mode=explicit", *(f"--load-model={m}" for m in STARTUP)]
    return serve(repo, *args)


def _http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def _grpc(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


def _input(lib, shape: list[int]):  # type: ignore[no-untyped-def]
    tensor = lib.InferInput("INPUT0", shape, "FP32")
    tensor.set_data_from_numpy(np.ones(shape, np.float32))
    return tensor


def _counts(server: ServerProcess, model: str) -> dict[str, object]:
    stats = _http(server).get_inference_statistics(model)["model_stats"][0]
    infer = stats["inference_stats"]
    return {
        "inference_count": stats["inference_count"], "execution_count": stats["execution_count"],
        "success": infer["success"]["count"], "fail": infer["fail"]["count"], "queue": infer["queue"]["count"],
        "batches": {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]},
    }  # fmt: skip


def _failures(server: ServerProcess, model: str) -> dict[str, float]:
    failures = samples(scrape(server), "nv_inference_request_failure")
    return {labels["reason"]: value for labels, value in failures if labels["model"] == model}


def _delta(after: dict[str, object], before: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            old = before[key]
            assert isinstance(old, dict)
            out[key] = {k: v - old.get(k, 0) for k, v in value.items() if v - old.get(k, 0)}
        else:
            out[key] = value - before[key]  # type: ignore[operator]
    return out


# -- a failed execution counts one failure per request -----------------------------------


def test_failed_unbatched_execution_counts_one_failure_per_request(server: ServerProcess) -> None:
    before, metric_before = _counts(server, "fail_plain"), _failures(server, "fail_plain")
    with pytest.raises(InferenceServerException, match="boom from model"):
        _http(server).infer("fail_plain", [_input(httpclient, [2])])
    with pytest.raises(InferenceServerException, match="boom from model"):
        _grpc(server).infer("fail_plain", [_input(grpcclient, [2])])
    # Triton 2.51, same model: execution_count +1, fail +1, success/inference/queue +0 per request.
    assert _delta(_counts(server, "fail_plain"), before) == {
        "inference_count": 0, "execution_count": 2, "success": 0, "fail": 2, "queue": 0, "batches": {1: 2},
    }  # fmt: skip
    metric = _failures(server, "fail_plain")
    assert metric["BACKEND"] - metric_before["BACKEND"] == 2 and metric["OTHER"] == metric_before["OTHER"]


def test_failed_batch_counts_each_of_its_requests_once(server: ServerProcess) -> None:
    before, metric_before = _counts(server, "fail_batched"), _failures(server, "fail_batched")
    client = _grpc(server)
    results: queue.Queue[object] = queue.Queue()
    for _ in range(3):  # preferred_batch_size 3: one execution of the three
        client.async_infer("fail_batched", [_input(grpcclient, [1, 2])], lambda result, error: results.put(error))
    errors = [results.get(timeout=30) for _ in range(3)]
    assert all(isinstance(e, InferenceServerException) and "boom from model" in str(e) for e in errors)
    # Triton 2.51, three requests in one failed execution: execution_count 1, batch_stats {3: 1}, fail 3.
    assert _delta(_counts(server, "fail_batched"), before) == {
        "inference_count": 0, "execution_count": 1, "success": 0, "fail": 3, "queue": 0, "batches": {3: 1},
    }  # fmt: skip
    assert _failures(server, "fail_batched")["BACKEND"] - metric_before["BACKEND"] == 3


def test_failed_decoupled_execution_counts_a_failure_not_a_success(server: ServerProcess) -> None:
    before, metric_before = _counts(server, "fail_decoupled"), _failures(server, "fail_decoupled")
    client = _grpc(server)
    responses: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        client.async_stream_infer("fail_decoupled", [_input(grpcclient, [2])])
        result, error = responses.get(timeout=30)
    finally:
        client.stop_stream()
    assert result is None and "boom from model" in str(error)
    # Triton 2.51: fail +1, success +0, inference_count +0, nv_inference_request_failure BACKEND +1.
    delta = _delta(_counts(server, "fail_decoupled"), before)
    assert (delta["success"], delta["fail"], delta["inference_count"], delta["execution_count"]) == (0, 1, 0, 1)
    assert _failures(server, "fail_decoupled")["BACKEND"] - metric_before["BACKEND"] == 1


def test_failed_ensemble_step_counts_once_in_each_model(server: ServerProcess) -> None:
    ens_before, step_before = _counts(server, "fail_ensemble"), _counts(server, "fail_plain")
    metric_before = _failures(server, "fail_ensemble")
    with pytest.raises(InferenceServerException, match="boom from model"):
        _http(server).infer("fail_ensemble", [_input(httpclient, [2])])
    assert _delta(_counts(server, "fail_ensemble"), ens_before)["fail"] == 1
    assert _delta(_counts(server, "fail_plain"), step_before)["fail"] == 1
    metric = _failures(server, "fail_ensemble")
    assert metric["OTHER"] - metric_before["OTHER"] == 1 and metric["BACKEND"] == metric_before["BACKEND"]


# -- the repository API with overrides ---------------------------------------------------


def _marker(server: ServerProcess, model: str) -> str:
    params = _http(server).get_model_config(model).get("parameters", {})
    return str(params.get("marker", {}).get("string_value", ""))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_reload_without_override_keeps_it_while_files_are_unchanged(server: ServerProcess, protocol: str) -> None:
    client = _http(server) if protocol == "http" else _grpc(server)
    client.load_model("overridden", config=_override("overridden", protocol))
    assert _marker(server, "overridden") == protocol
    client.load_model("overridden")  # Triton: files unchanged, nothing reloads, the override stays
    assert _marker(server, "overridden") == protocol
    model_py = next(Path(server.repositories[0], "overridden", "1").glob("model.py"))
    later = time.time() + 10
    os.utime(model_py, (later, later))
    client.load_model("overridden")  # Triton: the files changed, so it reloads from them
    assert _marker(server, "overridden") == ""


def _index_names(server: ServerProcess) -> set[str]:
    return {m["name"] for m in _http(server).get_model_repository_index()}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_made_from_file_overrides_leaves_the_index_once_unloaded(server: ServerProcess, protocol: str) -> None:
    client, lib = (_http(server), httpclient) if protocol == "http" else (_grpc(server), grpcclient)
    files = {"file:1/model.py": IDENTITY.encode()}
    client.load_model("ghost", config=_override("ghost"), files=files)
    result = client.infer("ghost", [_input(lib, [2])])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [1.0, 1.0])
    assert "ghost" in _index_names(server)
    client.unload_model("ghost")
    assert "ghost" not in _index_names(server)
    assert not client.is_model_ready("ghost")
    with pytest.raises(InferenceServerException) as err:
        client.load_model("ghost")  # nothing on disk to load it from
    assert err.value.message().startswith(POLL_FAILURE.format("ghost") + "; the repository has ")


@pytest.mark.parametrize("bad", ["../evil.py", "1/../../evil.py", "1/" + "a" * 256, "a" * 256])
def test_bad_override_file_name_is_refused_with_tritons_sentence(server: ServerProcess, bad: str) -> None:
    client = _http(server)
    files = {f"file:{bad}": b"x = 1\n"}
    with pytest.raises(InferenceServerException) as err:
        client.load_model("ghost2", config=_override("ghost2"), files=files)
    text = str(err.value)
    # Triton 2.51: "failed to load 'ghost2', failed to poll from model repository" (for a 256-character
    # top-level name it aborts instead); inferd adds why, and never names its private folder.
    assert POLL_FAILURE.format("ghost2") + ": file path 'file:" in text
    assert "/tmp" not in text and "inferd-overrides" not in text and "Errno" not in text
    assert "ghost2" not in _index_names(server) and client.is_server_live()


# -- Triton's sentences first --------------------------------------------------------------


def test_unknown_model_and_version_say_what_triton_says(server: ServerProcess) -> None:
    http, grpc_client = _http(server), _grpc(server)
    for client, lib in ((http, httpclient), (grpc_client, grpcclient)):
        with pytest.raises(InferenceServerException) as err:
            client.infer("nope", [_input(lib, [2])])
        assert err.value.message() == "Request for unknown model: 'nope' is not found"
        with pytest.raises(InferenceServerException) as err:
            client.infer("identity", [_input(lib, [2])], model_version="7")
        assert err.value.message().startswith("Request for unknown model: 'identity' version 7 is not found")
    with pytest.raises(InferenceServerException) as err:
        grpc_client.infer("identity", [_input(grpcclient, [2])], model_version="abc")
    assert err.value.message().startswith(
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0"
    )
    with pytest.raises(InferenceServerException) as err:
        http.get_inference_statistics("identity", "7")
    assert err.value.message().startswith("requested model version is not available for model 'identity'")
    assert err.value.status() == "400"


def test_contents_and_raw_input_contents_say_what_triton_says(server: ServerProcess) -> None:
    request = pb.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[2])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    request.raw_input_contents.append(np.ones(2, np.float32).tobytes())
    with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError) as err:
        pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'identity'"
    )


def test_load_failures_begin_with_failed_to_load(server: ServerProcess) -> None:
    for client in (_http(server), _grpc(server)):
        with pytest.raises(InferenceServerException) as err:
            client.load_model("broken")
        assert err.value.message().startswith("load failed for model 'broken'")
        assert "cannot import this model" in err.value.message()
        with pytest.raises(InferenceServerException) as err:
            client.load_model("does_not_exist")
        assert err.value.message().startswith(POLL_FAILURE.format("does_not_exist") + "; the repository has ")
        with pytest.raises(InferenceServerException) as err:
            client.load_model("identity", config="{not json")
        assert err.value.message().startswith(POLL_FAILURE.format("identity") + ": parameter 'config'")
    assert _http(server).is_model_ready("identity")
