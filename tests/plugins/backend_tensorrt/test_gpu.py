"""TensorRT engines served for real: these run only where tensorrt imports and a GPU is visible."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import BackendContract, ContractModel, InputSpec, ServerProcess, write_repository

from .onnx_models import linear_relu_expected, linear_relu_onnx


def _gpu_skip_reason() -> str | None:
    if importlib.util.find_spec("tensorrt") is None:
        return "tensorrt is not installed (pip install inferd-backend-tensorrt[gpu] on an NVIDIA GPU machine)"
    if importlib.util.find_spec("onnx") is None:
        return "onnx is not installed (needed to build the test engines)"
    smi = shutil.which("nvidia-smi")
    if smi is None or subprocess.run([smi, "-L"], capture_output=True).returncode != 0:
        return "no NVIDIA GPU: nvidia-smi is missing or lists no device"
    from inferd_backend_tensorrt import cuda

    count, reason = cuda.device_count()
    return None if count else f"no CUDA device visible ({reason})"


SKIP = _gpu_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]

TWO_PROFILES = """
name: "trt_profiles"
platform: "tensorrt_plan"
max_batch_size: 32
dynamic_batching {}
instance_group [{ kind: KIND_GPU count: 2 gpus: [0] profile: ["0", "1"] }]
"""


def _plan(profiles: list[tuple[int, int, int]]) -> bytes:
    from inferd_backend_tensorrt.build import build_engine

    return build_engine(linear_relu_onnx(), [{"INPUT0": ((lo, 4), (opt, 4), (hi, 4))} for lo, opt, hi in profiles])


class TestTensorRTContract(BackendContract):
    """An engine with a dynamic batch (1..16) and no config.pbtxt: everything is auto-completed."""

    inputs = [InputSpec("INPUT0", "FP32", (4,))]
    rtol = 1e-4
    atol = 1e-4

    def contract_repository(self, root: Path) -> ContractModel:
        write_repository(root, {"trt_linear": {"1/model.plan": _plan([(1, 8, 16)])}})
        return ContractModel("trt_linear", linear_relu_expected)

    def test_autocompleted_config(self, contract_server):
        config = httpclient.InferenceServerClient(contract_server.http_url).get_model_config("trt_linear")
        assert config["platform"] == "tensorrt_plan" and config["backend"] == "tensorrt"
        assert config["max_batch_size"] == 16
        assert "dynamic_batching" in config
        assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [("INPUT0", "TYPE_FP32", [4])]
        assert {o["name"]: o["dims"] for o in config["output"]} == {"OUTPUT0": [3], "OUTPUT1": [4]}
        assert config["instance_group"][0]["kind"] == "KIND_GPU"


@pytest.fixture(scope="module")
def profiles_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("trt") / "models"
    plan = _plan([(1, 2, 4), (5, 16, 32)])
    write_repository(root, {"trt_profiles": {"config.pbtxt": TWO_PROFILES, "1/model.plan": plan}})
    server = ServerProcess([root]).start()
    yield server
    server.stop()


@pytest.mark.parametrize("rows", [1, 3, 5, 20, 32])
def test_each_batch_size_finds_its_profile(profiles_server, rows):
    client = httpclient.InferenceServerClient(profiles_server.http_url)
    x = np.random.default_rng(rows).uniform(-2, 2, (rows, 4)).astype(np.float32)
    tensor = httpclient.InferInput("INPUT0", [rows, 4], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("trt_profiles", [tensor])
    for name, want in linear_relu_expected({"INPUT0": x}).items():
        np.testing.assert_allclose(result.as_numpy(name), want, rtol=1e-4, atol=1e-4)
    client.close()
