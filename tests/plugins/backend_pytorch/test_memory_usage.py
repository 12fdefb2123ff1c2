"""The pytorch backend's ``Model.memory_usage`` (plugin API 1.2): what its modules took on each CUDA
device, for ``--model-device-memory-budget``; nothing on the CPU (the server's RSS shows that)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from inferd.config import normalize, parse_config_text
from inferd.contracts.backend import InstanceSpec, ModelLoadContext
from tests.lazy import lazy_import

torch = lazy_import("torch")
pytorch_backend = lazy_import("inferd_backend_pytorch.backend")
models = lazy_import("tests.plugins.backend_pytorch.models")

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

CONFIG = """
    platform: "pytorch_libtorch"
    max_batch_size: 8
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "scale" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
#: Affine's Linear(4, 3): 12 weights and 3 biases, float32.
WEIGHTS = (4 * 3 + 3) * 4


def _cuda_skip() -> str | None:
    if not torch.cuda.is_available():
        return f"no CUDA device for this PyTorch ({torch.__version__})"
    return None


def _loaded(root: Path, kind: str, count: int, sharing: bool = False) -> tuple[Any, list[Any]]:
    version_dir = root / "affine" / "1"
    version_dir.mkdir(parents=True)
    models.save_script(models.Affine(), version_dir / "model.pt")
    text = CONFIG
    if sharing:
        text += 'parameters { key: "ENABLE_WEIGHT_SHARING" value { string_value: "true" } }\n'
    config = parse_config_text(textwrap.dedent(text), str(root / "affine" / "config.pbtxt"))
    backend = pytorch_backend.PyTorchBackend()
    normalize(config, "affine", backend.default_model_filename)
    model = backend.load_model(ModelLoadContext("affine", 1, config, root / "affine", version_dir, root))
    instances = [model.create_instance(InstanceSpec(f"affine_{i}", kind, 0, i, "affine")) for i in range(count)]
    return model, instances


def test_a_model_on_the_cpu_reports_nothing(tmp_path: Path) -> None:
    model, instances = _loaded(tmp_path, "KIND_CPU", 2)
    try:
        assert model.memory_usage() is None
        module = model._module(torch.device("cpu")).module
        assert pytorch_backend.tensor_bytes(module, torch.device("cpu")) == WEIGHTS
        assert pytorch_backend.tensor_bytes(module, torch.device("cuda", 0)) == 0  # none of it there
        assert pytorch_backend.tensor_bytes(object(), torch.device("cpu")) == 0  # no parameters at all
    finally:
        for instance in instances:
            instance.close()
        model.unload()


@pytest.mark.gpu
@pytest.mark.parametrize(("sharing", "copies"), [(False, 2), (True, 1)])
def test_a_model_on_a_gpu_reports_what_its_modules_took_there(tmp_path: Path, sharing: bool, copies: int) -> None:
    skip = _cuda_skip()
    if skip is not None:
        pytest.skip(skip)
    model, instances = _loaded(tmp_path, "KIND_GPU", 2, sharing)
    try:
        usage = model.memory_usage()
        assert usage is not None and usage.host_bytes == 0 and set(usage.device_bytes) == {"cuda:0"}
        # at least the weights of each copy (the caching allocator rounds each tensor up to 512 bytes)
        assert copies * WEIGHTS <= usage.device_bytes["cuda:0"] <= copies * 4 * (2 << 20)
    finally:
        for instance in instances:
            instance.close()
        model.unload()
