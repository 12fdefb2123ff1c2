"""Config-validation sentences for invalid configs, as Triton's QA (``qa/L0_model_config`` special
cases, ``qa/L0_backend_python``) reads them, against a real ``inferd serve`` in explicit mode with
tritonclient: platform, backend and runtime names, a ``runtime`` that leaves the backend directory,
GPU ids, and the deprecated ``--strict-model-config`` warning at start.

Each constant is what the real Triton 2.51 (Python backend, no GPU) answered to loading the same
model: "load failed for model '<m>': version 1 is at UNAVAILABLE state: Invalid argument: <sentence>".
"""

from __future__ import annotations

import pytest
import tritonclient.http as httpclient

from inferd.lifecycle.builder import visible_gpus
from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers
from tests.triton_clients import error_of

IO = models.ADD_SUB_CONFIG.split('backend: "python"\n', 1)[1].split("instance_group")[0]
# Observed from Triton 2.51 (in its log: "Poll failed for model directory 'platform_bad': ...";
# the load answers 500 "failed to load 'platform_bad', failed to poll from model repository").
UNKNOWN_PLATFORM = "unexpected platform type 'no_such_platform' for platform_bad"
# Observed from Triton 2.51.
UNKNOWN_BACKEND = (
    "unable to find backend library for backend 'no_such_backend', try specifying runtime on the model configuration."
)
# Observed from Triton 2.51 (the directory is the model's version directory).
RUNTIME_ESCAPES = (
    "backend library name '../../../../../etc/passwd' escapes backend directory '{}', for model "
    "'runtime_escape', check model config runtime field"
)
# Observed from Triton 2.51 on a machine without a GPU.
GPU_ID = (
    "instance group gpu_bad_0 of model gpu_bad specifies invalid or unsupported gpu id 7. GPUs with at least the "
    "minimum required CUDA compute compatibility of 6.000000 are: "
)
CPU_WITH_GPUS = "instance group gpu_cpu_ids_0 of model gpu_cpu_ids has kind KIND_CPU but specifies one or more GPUs"
NO_GPUS = "instance group gpu_plain_0 of model gpu_plain has kind KIND_GPU but no GPUs are available"
# Observed from Triton 2.51, printed at start with --strict-model-config=true.
STRICT_DEPRECATED = (
    "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead."
)
LOAD_FAILED = "load failed for model '{}': version 1 is at UNAVAILABLE state: "
CONFIGS = {
    "platform_bad": 'platform: "no_such_platform"\n',
    "backend_bad": 'backend: "no_such_backend"\n',
    "runtime_escape": 'backend: "python"\nruntime: "../../../../../etc/passwd"\n',
    "runtime_other": 'backend: "python"\nruntime: "no_such_runtime.so"\n',
    "gpu_bad": 'backend: "python"\ninstance_group [ { kind: KIND_GPU gpus: [ 7 ] count: 1 } ]\n',
    "gpu_cpu_ids": 'backend: "python"\ninstance_group [ { kind: KIND_CPU gpus: [ 0 ] count: 1 } ]\n',
    "gpu_plain": 'backend: "python"\ninstance_group [ { kind: KIND_GPU count: 1 } ]\n',
}


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {name: models.simple(head + IO, models.add_sub_py()) for name, head in CONFIGS.items()}
    return serve(repo, "--model-control-mode=explicit", "--strict-model-config=true")


def _load_error(server: ServerProcess, model: str) -> str:
    client = httpclient.InferenceServerClient(server.http_url)
    status, message = error_of(lambda: client.load_model(model))
    client.close()
    assert status == "400", (status, message)
    assert message.startswith(LOAD_FAILED.format(model)), message
    return message[len(LOAD_FAILED.format(model)) :]


def test_an_unknown_platform(server: ServerProcess) -> None:
    """A model.py is there, but an unknown platform is not completed from the files (as Triton)."""
    assert _load_error(server, "platform_bad") == UNKNOWN_PLATFORM


def test_an_unknown_backend(server: ServerProcess) -> None:
    assert _load_error(server, "backend_bad").startswith(UNKNOWN_BACKEND + "; model 'backend_bad' asks for backend")


def test_a_runtime_that_leaves_the_backend_directory(server: ServerProcess) -> None:
    version_dir = server.repositories[0] / "runtime_escape" / "1"
    assert _load_error(server, "runtime_escape") == RUNTIME_ESCAPES.format(version_dir)


def test_another_runtime_is_accepted(server: ServerProcess) -> None:
    """Triton looks for the library (and fails: "unable to find backend library 'no_such_runtime.so'
    for model ..."); inferd's backends are plugins, so the field is not used (the differences list)."""
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model("runtime_other")
    assert client.is_model_ready("runtime_other")
    client.close()


@pytest.mark.skipif(bool(visible_gpus()), reason="Triton's sentences here are those of a machine without a GPU")
@pytest.mark.parametrize(("model", "sentence"), [("gpu_bad", GPU_ID), ("gpu_cpu_ids", CPU_WITH_GPUS),
                                                  ("gpu_plain", NO_GPUS)])  # fmt: skip
def test_gpu_ids(server: ServerProcess, model: str, sentence: str) -> None:
    assert _load_error(server, model) == sentence


def test_strict_model_config_is_deprecated_at_start(server: ServerProcess) -> None:
    assert STRICT_DEPRECATED in server.log()
