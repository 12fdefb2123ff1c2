"""What a machine without TensorRT or a GPU sees: light discovery and clear load errors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.contracts.errors import Unavailable
from inferd.testing import ServerProcess, write_repository

HINT = "install inferd-backend-tensorrt[gpu] on a machine with an NVIDIA GPU"
HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None

CONFIG = """
name: "trt_explicit"
platform: "tensorrt_plan"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ kind: KIND_GPU gpus: [0] }]
"""


def _modules_after(statement: str) -> list[str]:
    code = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.split()


@pytest.mark.parametrize("module", ["inferd_backend_tensorrt.hooks", "inferd_backend_tensorrt.backend"])
def test_import_loads_neither_tensorrt_nor_cuda(module):
    loaded = _modules_after(f"import {module}")
    assert "tensorrt" not in loaded
    assert not [m for m in loaded if m == "cuda" or m.startswith("cuda.")]


def test_plugin_is_discovered():
    out = subprocess.run([sys.executable, "-m", "inferd.host.cli", "plugins"], capture_output=True, text=True).stdout
    assert any(line.startswith("tensorrt") and "backend: tensorrt" in line for line in out.splitlines()), out


@pytest.mark.skipif(HAS_TENSORRT, reason="tensorrt is installed here: the missing-package error cannot happen")
def test_plan_without_tensorrt_fails_clearly_through_a_server(tmp_path):
    repo = write_repository(
        tmp_path / "models",
        {
            "trt_explicit": {"config.pbtxt": CONFIG, "1/model.plan": b"not really a plan"},
            "trt_auto": {"1/model.plan": b"not really a plan"},  # no config: the backend is found by file name
        },
    )
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--strict-readiness=false"]).start()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        for model in ("trt_explicit", "trt_auto"):
            with pytest.raises(InferenceServerException) as info:
                client.load_model(model)
            assert HINT in info.value.message() and f"model '{model}'" in info.value.message()
        index = {e["name"]: e for e in client.get_model_repository_index()}
        for model in ("trt_explicit", "trt_auto"):
            assert index[model]["state"] == "UNAVAILABLE"
            assert (
                HINT in index[model]["reason"]
                and "'tensorrt' package, which is not installed" in index[model]["reason"]
            )
        assert client.is_server_live() and client.is_server_ready()
        client.close()
    finally:
        server.stop()


def _gpu_count() -> int | None:
    """Visible GPUs per the CUDA bindings; None when the bindings are not installed."""
    if importlib.util.find_spec("cuda") is None:
        return None
    from inferd_backend_tensorrt import cuda

    try:
        return cuda.device_count()[0]
    except Unavailable:
        return None


def test_no_gpu_error_names_the_fix():
    count = _gpu_count()
    if count is None:
        pytest.skip("the CUDA runtime bindings (cuda-python) are not installed")
    if count:
        pytest.skip(f"{count} GPU(s) visible: the no-GPU error cannot happen")
    from inferd_backend_tensorrt import cuda

    with pytest.raises(
        Unavailable,
        match=r"model 'm': no NVIDIA GPU is visible to this process \(.+\).*"
        + HINT.replace("[", r"\[").replace("]", r"\]"),
    ):
        cuda.require_gpus("m")
