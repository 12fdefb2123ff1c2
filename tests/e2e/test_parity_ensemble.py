"""Ensembles between batching and non-batching models, and their class labels, end to end.

Triton's ensemble scheduler gives a tensor from a non-batching producer a batch of 1 when it
goes to a batching model (and takes it away on the way back), as its QA ``*_nobatch_*``
ensembles over ``nop_*`` models need; an ensemble output without a ``label_filename`` takes the
labels of the step output it comes from. Each expectation is what Triton 2.51 answered for the
same models and requests.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

IDENTITY = source("identity")
LABELS = "".join(f"label{i}\n" for i in range(16))


def _model(max_batch_size: int, dims: str) -> dict[str, str]:
    config = f"""
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: {dims} }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: {dims} label_filename: "labels.txt" }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
    return {"config.pbtxt": config, "labels.txt": LABELS, "1/model.py": IDENTITY}


def _ensemble(max_batch_size: int, step: str) -> dict[str, str]:
    config = f"""
platform: "ensemble"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1
  input_map {{ key: "INPUT0" value: "INPUT0" }} output_map {{ key: "OUTPUT0" value: "OUTPUT0" }} }} ] }}
"""
    return {"config.pbtxt": config, "1/.keep": ""}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("ensembles")
    models = {
        "nop_batch": _model(8, "[ -1 ]"),
        "nop_nobatch": _model(0, "[ 16 ]"),
        "ens_nobatch_over_batch": _ensemble(0, "nop_batch"),
        "ens_batch_over_nobatch": _ensemble(8, "nop_nobatch"),
    }
    return serve(write_repository(root / "models", models))


def _http(server: ServerProcess, model: str, shape: tuple[int, ...], classes: int = 0) -> httpclient.InferResult:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inp = httpclient.InferInput("INPUT0", list(shape), "FP32")
        inp.set_data_from_numpy((np.arange(np.prod(shape), dtype=np.float32) % 16).reshape(shape))
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=classes)] if classes else None
        return client.infer(model, [inp], outputs=outputs)
    finally:
        client.close()


def test_non_batching_ensemble_over_a_batching_model(server):
    # inferd before: 400 "unexpected shape for input 'INPUT0' ... Expected [-1,-1], got [16]".
    result = _http(server, "ens_nobatch_over_batch", (16,))
    assert result.get_output("OUTPUT0")["shape"] == [16]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(16, dtype=np.float32))


def test_batching_ensemble_over_a_non_batching_model_with_a_batch_of_one(server):
    result = _http(server, "ens_batch_over_nobatch", (1, 16))
    assert result.get_output("OUTPUT0")["shape"] == [1, 16]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(16, dtype=np.float32)[None])
    # A batch of 2 cannot go to the non-batching step: the step's shape error, as in Triton.
    with pytest.raises(InferenceServerException) as err:
        _http(server, "ens_batch_over_nobatch", (2, 16))
    assert "unexpected shape for input 'INPUT0' for model 'nop_nobatch'. Expected [16], got [2,16]" in str(err.value)


@pytest.mark.parametrize(
    ("model", "shape"),
    [("ens_nobatch_over_batch", (16,)), ("ens_batch_over_nobatch", (1, 16)), ("nop_batch", (1, 16))],
)
def test_ensemble_classification_uses_the_step_models_labels(server, model, shape):
    # inferd before: b"15.000000:15" through the ensembles (no label).
    top = _http(server, model, shape, classes=2).as_numpy("OUTPUT0").reshape(-1).tolist()
    assert top == [b"15.000000:15:label15", b"14.000000:14:label14"]


def test_ensemble_classification_over_grpc(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        inp = grpcclient.InferInput("INPUT0", [16], "FP32")
        inp.set_data_from_numpy(np.arange(16, dtype=np.float32))
        out = grpcclient.InferRequestedOutput("OUTPUT0", class_count=1)
        result = client.infer("ens_nobatch_over_batch", [inp], outputs=[out])
    finally:
        client.close()
    assert result.as_numpy("OUTPUT0").tolist() == [b"15.000000:15:label15"]
