"""The pytorch backend behind a real ``inferd serve``, called with tritonclient over HTTP and gRPC."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.lazy import lazy_import
from tests.servers import Servers
from tests.triton_clients import both_clients

#: Loaded on first use: every xdist worker collects this file, few run it (torch costs ~2 s of CPU to import).
torch = lazy_import("torch")
models = lazy_import("tests.plugins.backend_pytorch.models")

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

ADD_SUB = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""
AFFINE = """
backend: "pytorch"
max_batch_size: 16
input [ { name: "scale" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
parameters { key: "INFERENCE_MODE" value { string_value: "false" } }
parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "true" } }
"""
DICT_OUT = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_INT64 dims: [ 3 ] } ]
output [ { name: "square" data_type: TYPE_INT64 dims: [ 3 ] }, { name: "total" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""
EXPORTED = """
backend: "pytorch"
max_batch_size: 64
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "sum" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("pytorch")
    repo = write_repository(
        root / "models",
        {
            "add_sub": {"config.pbtxt": ADD_SUB, "1/model.pt": lambda p: models.save_script(models.AddSub(), p)},
            "affine": {"config.pbtxt": AFFINE, "1/model.pt": lambda p: models.save_script(models.Affine(), p)},
            "dict_out": {"config.pbtxt": DICT_OUT, "1/model.pt": lambda p: models.save_script(models.DictOut(), p)},
            "exported": {"config.pbtxt": EXPORTED, "1/model.pt2": lambda p: models.save_exported(models.Exported(), p)},
            "affine_bad": {
                "config.pbtxt": AFFINE.replace("dims: [ 4 ]", "dims: [ 5 ]"),
                "1/model.pt": lambda p: models.save_script(models.Affine(), p),
            },
            "broken": {"config.pbtxt": ADD_SUB, "1/model.pt": b"this is not a TorchScript archive"},
        },
    )
    return serve(
        repo, "--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false", "--strict-readiness=false"
    )


def _infer(module: Any, client: Any, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> Any:
    tensors = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT64")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return client.infer(model, tensors, outputs=[module.InferRequestedOutput(o) for o in outputs])


def test_add_sub_rows_match_the_module(server: ServerProcess) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.random((5, 4), dtype=np.float32), rng.random((5, 4), dtype=np.float32)
    want0, want1 = (t.numpy() for t in models.AddSub()(torch.from_numpy(a), torch.from_numpy(b)))
    for module, client in both_clients(server):
        result = _infer(module, client, "add_sub", {"INPUT__0": a, "INPUT__1": b}, ["OUTPUT__0", "OUTPUT__1"])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), want0)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), want1)


def test_two_instances_serve_concurrent_requests(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=4)
    a = np.ones((1, 4), np.float32)
    pending = []
    for i in range(8):
        inputs = [httpclient.InferInput("INPUT__0", [1, 4], "FP32"), httpclient.InferInput("INPUT__1", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(a * i)
        inputs[1].set_data_from_numpy(a)
        pending.append(client.async_infer("add_sub", inputs))
    for i, request in enumerate(pending):
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT__0"), a * i + 1)
    config = client.get_model_config("add_sub")
    assert config["instance_group"][0]["count"] == 2
    assert config["platform"] == "pytorch_libtorch" and config["backend"] == "pytorch"


def test_named_forward_arguments(server: ServerProcess) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    scale = np.array([[1.0], [2.0], [-1.0]], np.float32)
    with torch.no_grad():
        want = models.Affine()(torch.from_numpy(x), torch.from_numpy(scale)).numpy()
    for module, client in both_clients(server):
        result = _infer(module, client, "affine", {"x": x, "scale": scale}, ["OUTPUT__0"])
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), want, rtol=1e-6)


def test_dict_output_by_key(server: ServerProcess) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    for module, client in both_clients(server):
        result = _infer(module, client, "dict_out", {"x": x}, ["total", "square"])
        np.testing.assert_array_equal(result.as_numpy("total"), [[6], [15]])
        np.testing.assert_array_equal(result.as_numpy("square"), x * x)


def test_exported_program_pt2(server: ServerProcess) -> None:
    rng = np.random.default_rng(1)
    x, y = rng.random((7, 4), dtype=np.float32), rng.random((7, 3), dtype=np.float32)
    with torch.no_grad():
        want = models.Exported()(torch.from_numpy(x), torch.from_numpy(y))
    for module, client in both_clients(server):
        result = _infer(module, client, "exported", {"x": x, "y": y}, ["sum", "OUTPUT__1"])
        np.testing.assert_allclose(result.as_numpy("sum"), want["sum"].numpy(), rtol=1e-5)
        np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), want["diff"].numpy(), rtol=1e-5)
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("exported")
    assert config["default_model_filename"] == "model.pt2"


def test_config_shape_that_forward_rejects_names_the_model(server: ServerProcess) -> None:
    x, scale = np.ones((2, 5), np.float32), np.ones((2, 1), np.float32)  # the config says 5, Linear takes 4
    for module, client in both_clients(server):
        with pytest.raises(InferenceServerException) as info:
            _infer(module, client, "affine_bad", {"x": x, "scale": scale}, ["OUTPUT__0"])
        assert "model 'affine_bad' version 1: PyTorch execute failure" in str(info.value)
        assert "cannot be multiplied" in str(info.value)


def test_wrong_input_shape_is_rejected_before_forward(server: ServerProcess) -> None:
    x, y = np.ones((2, 4), np.float32), np.ones((3, 3), np.float32)
    for module, client in both_clients(server):
        with pytest.raises(InferenceServerException, match="'exported'"):
            _infer(module, client, "exported", {"x": x, "y": y}, ["sum"])


def test_corrupt_model_is_unavailable_with_reason(server: ServerProcess) -> None:
    index = {m["name"]: m for m in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()}
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "cannot load TorchScript file" in index["broken"]["reason"]
    assert index["add_sub"]["state"] == "READY"
    grpc_index = grpcclient.InferenceServerClient(server.grpc_url).get_model_repository_index(as_json=True)
    broken = [m for m in grpc_index["models"] if m["name"] == "broken"][0]
    assert broken["state"] == "UNAVAILABLE" and "model.pt" in broken["reason"]
