"""The pytorch backend run directly (no server): binding, batching, conversions, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.config import normalize, parse_config_text
from inferd.contracts.backend import InstanceSpec, ModelLoadContext
from inferd.contracts.errors import ConfigError, ErrorKind, InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd_backend_pytorch.binding import Argument, OutputPlan, index_suffix, plan_inputs
from inferd_backend_pytorch.options import parse_options
from tests.lazy import lazy_import

#: Loaded on first use: every xdist worker collects this file, few run it (torch costs ~2 s of CPU to import).
torch = lazy_import("torch")
pytorch_backend = lazy_import("inferd_backend_pytorch.backend")
models = lazy_import("tests.plugins.backend_pytorch.models")

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning"),
]

ADD_SUB_CONFIG = """
    platform: "pytorch_libtorch"
    max_batch_size: 8
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
            { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
             { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _context(root: Path, name: str, config_text: str) -> ModelLoadContext:
    model_dir = root / name
    config = parse_config_text(textwrap.dedent(config_text), str(model_dir / "config.pbtxt"))
    backend = pytorch_backend.PyTorchBackend()
    backend.autocomplete_config(config, model_dir, model_dir / "1")
    normalize(config, name, backend.default_model_filename)
    return ModelLoadContext(name, 1, config, model_dir, model_dir / "1", root)


@pytest.fixture
def load(tmp_path: Path) -> Callable[..., Any]:
    """``load(name, module_or_writer, config)`` -> one KIND_CPU instance of the saved model."""
    opened = []

    def make(name: str, module: Any, config: str, filename: str = "model.pt", kind: str = "KIND_CPU") -> Any:
        version_dir = tmp_path / name / "1"
        version_dir.mkdir(parents=True, exist_ok=True)
        if isinstance(module, torch.nn.Module):
            models.save_script(module, version_dir / filename)
        elif isinstance(module, bytes):
            (version_dir / filename).write_bytes(module)
        model = pytorch_backend.PyTorchBackend().load_model(_context(tmp_path, name, config))
        instance = model.create_instance(InstanceSpec(f"{name}_0", kind, 0, 0, name))
        opened.append((model, instance))
        return instance

    yield make
    for model, instance in opened:
        instance.close()
        model.unload()


def _request(inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = (), rid: str = "") -> InferRequest:
    tensors = {n: InferTensor.from_array(n, a) for n, a in inputs.items()}
    return InferRequest("m", id=rid, inputs=tensors, outputs=[RequestedOutput(o) for o in outputs])


def _readonly(array: np.ndarray) -> np.ndarray:
    """An array like the frontends decode: a read-only view over bytes."""
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)


# -- name binding (pure) ---------------------------------------------------------------------------

ARGS = (Argument("a", "tensor", "Tensor"), Argument("b", "tensor", "Tensor"))


def test_binding_by_forward_argument_names():
    plan = plan_inputs("m", ARGS, ["b", "a"])
    assert plan.positional == ("a", "b") and plan.convention == "forward argument"


def test_binding_by_index_suffix():
    plan = plan_inputs("m", ARGS, ["INPUT__1", "INPUT__0"])
    assert plan.positional == ("INPUT__0", "INPUT__1")
    assert index_suffix("OUTPUT__12") == 12 and index_suffix("a__b") is None and index_suffix("x") is None


def test_binding_falls_back_to_config_order():
    assert plan_inputs("m", ARGS, ["second", "first"]).positional == ("second", "first")


def test_binding_pt2_names_and_keywords():
    args = (Argument("x", "tensor"), Argument("k", "tensor", keyword_only=True))
    plan = plan_inputs("m", args, ["KWARGS[k]", "ARGS[0]"])
    assert plan.positional == ("ARGS[0]",) and plan.keywords == (("k", "KWARGS[k]"),)


def test_binding_errors_name_the_model_and_counts():
    with pytest.raises(
        ConfigError, match=r"unable to load model 'm', configuration expects 1 inputs, model provides 2"
    ):
        plan_inputs("m", ARGS, ["INPUT__0"])
    with pytest.raises(ConfigError, match="asks for forward argument 5"):
        plan_inputs("m", ARGS, ["INPUT__0", "INPUT__5"])
    with pytest.raises(ConfigError, match="both name forward argument 0"):
        plan_inputs("m", ARGS, ["X__0", "Y__0"])
    with pytest.raises(ConfigError, match="type 'int'"):
        plan_inputs("m", (Argument("n", "other", "int"),), ["n"])


def test_output_plan_resolution():
    paths = (("double",), ("square",))
    assert OutputPlan("m", ["square", "double"]).resolve(paths) == [1, 0]
    assert OutputPlan("m", ["OUTPUT__1", "OUTPUT__0"]).resolve(paths) == [1, 0]
    assert OutputPlan("m", ["RESULT[square]"]).resolve(paths) == [1]
    assert OutputPlan("m", ["first", "second"]).resolve(((0,), (1,))) == [0, 1]
    with pytest.raises(InvalidArgument, match="asks for returned tensor 3"):
        OutputPlan("m", ["OUTPUT__3"]).resolve(((0,), (1,)))


def test_options_defaults_and_errors():
    config = parse_config_text('parameters { key: "INFERENCE_MODE" value { string_value: "false" } }', "x")
    assert parse_options(config, "m").inference_mode is False
    assert parse_options(parse_config_text("", "x"), "m").inference_mode is True  # Triton's default
    bad = parse_config_text('parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "maybe" } }', "x")
    with pytest.raises(ConfigError, match="DISABLE_OPTIMIZED_EXECUTION must be true or false"):
        parse_options(bad, "m")


# -- execution -------------------------------------------------------------------------------------


def test_add_sub_matches_the_module_and_batches_requests(load):
    instance = load("addsub", models.AddSub(), ADD_SUB_CONFIG)
    rng = np.random.default_rng(0)
    pairs = [(rng.random((n, 4), dtype=np.float32), rng.random((n, 4), dtype=np.float32)) for n in (1, 3, 2)]
    requests = [
        _request({"INPUT__0": _readonly(a), "INPUT__1": _readonly(b)}, rid=str(i)) for i, (a, b) in enumerate(pairs)
    ]
    responses = instance.execute(requests)
    for (a, b), response, rid in zip(pairs, responses, "012", strict=True):
        assert isinstance(response, InferResponse) and response.id == rid
        want0, want1 = models.AddSub()(torch.from_numpy(a), torch.from_numpy(b))
        np.testing.assert_array_equal(response.output("OUTPUT__0").data, want0.numpy())
        np.testing.assert_array_equal(response.output("OUTPUT__1").data, want1.numpy())


def test_inputs_are_not_copied_on_cpu(load, monkeypatch):
    instance = load("addsub", models.AddSub(), ADD_SUB_CONFIG)
    seen = []
    real = instance.module

    def spy(*args):
        seen.extend(args)
        return real(*args)

    monkeypatch.setattr(instance, "module", spy)
    a = _readonly(np.ones((8, 4), np.float32))  # 128 bytes: tiny read-only arrays are copied
    instance.execute([_request({"INPUT__0": a, "INPUT__1": a})])
    assert seen[0].data_ptr() == a.ctypes.data


def test_requested_outputs_only(load):
    instance = load("addsub", models.AddSub(), ADD_SUB_CONFIG)
    a = np.ones((1, 4), np.float32)
    [response] = instance.execute([_request({"INPUT__0": a, "INPUT__1": a}, outputs=("OUTPUT__1",))])
    assert [o.name for o in response.outputs] == ["OUTPUT__1"]


def test_named_arguments_in_any_config_order(load):
    config = """
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "scale" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """
    instance = load("affine", models.Affine(), config)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    scale = np.array([[2.0], [3.0]], np.float32)
    [response] = instance.execute([_request({"scale": scale, "x": x})])
    with torch.no_grad():
        want = models.Affine()(torch.from_numpy(x), torch.from_numpy(scale)).numpy()
    np.testing.assert_allclose(response.output("y").data, want, rtol=1e-6)


def test_dict_input_and_dict_output(load):
    dict_in = """
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "left" data_type: TYPE_INT64 dims: [ 2 ] }, { name: "right" data_type: TYPE_INT64 dims: [ 2 ] } ]
        output [ { name: "product" data_type: TYPE_INT64 dims: [ 2 ] } ]
    """
    instance = load("dictin", models.DictIn(), dict_in)
    left, right = np.array([[2, 3]], np.int64), np.array([[4, 5]], np.int64)
    [response] = instance.execute([_request({"left": left, "right": right})])
    np.testing.assert_array_equal(response.output("product").data, [[8, 15]])
    dict_out = """
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_INT64 dims: [ 3 ] } ]
        output [ { name: "total" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "square" data_type: TYPE_INT64 dims: [ 3 ] } ]
    """
    instance = load("dictout", models.DictOut(), dict_out)
    [response] = instance.execute([_request({"x": np.array([[1, 2, 3]], np.int64)})])
    np.testing.assert_array_equal(response.output("total").data, [[6]])
    np.testing.assert_array_equal(response.output("square").data, [[1, 4, 9]])


def test_string_lists(load):
    config = """
        platform: "pytorch_libtorch"
        input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
    """
    instance = load("upper", models.Upper(), config)
    words = np.array([b"abc", b"d"], dtype=np.object_)
    [response] = instance.execute([_request({"INPUT__0": words})])
    assert response.output("OUTPUT__0").data.tolist() == [b"ABC", b"D"]


def test_forward_failure_is_an_internal_error_naming_the_model(load):
    instance = load(
        "addsub",
        models.AddSub(),
        ADD_SUB_CONFIG.replace(
            'dims: [ 4 ] },\n            { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ]',
            'dims: [ 4 ] },\n            { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 3 ]',
        ),
    )
    [error] = instance.execute(
        [_request({"INPUT__0": np.ones((1, 4), np.float32), "INPUT__1": np.ones((1, 3), np.float32)})]
    )
    assert isinstance(error, InferdError) and error.kind is ErrorKind.INTERNAL
    assert "model 'addsub' version 1: PyTorch execute failure:" in error.message
    assert "size of tensor a (4) must match the size of tensor b (3)" in error.message


def test_output_dtype_mismatch_is_reported(load):
    instance = load(
        "addsub",
        models.AddSub(),
        ADD_SUB_CONFIG.replace('OUTPUT__1" data_type: TYPE_FP32', 'OUTPUT__1" data_type: TYPE_INT32'),
    )
    a = np.ones((1, 4), np.float32)
    [error] = instance.execute([_request({"INPUT__0": a, "INPUT__1": a})])
    assert "configuration expects datatype TYPE_INT32 for output 'OUTPUT__1', model provides TYPE_FP32" in error.message


def test_input_count_mismatch_is_a_load_error(load):
    config = ADD_SUB_CONFIG.replace(',\n            { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }', "")
    with pytest.raises(ConfigError, match="configuration expects 1 inputs, model provides 2"):
        load("addsub", models.AddSub(), config)


def test_config_without_inputs_is_a_clear_load_error(load):
    with pytest.raises(ConfigError, match="cannot auto-complete inputs and outputs"):
        load("addsub", models.AddSub(), 'platform: "pytorch_libtorch"')


def test_corrupt_file_is_a_load_error(load):
    with pytest.raises(InvalidArgument, match=r"cannot load TorchScript file .*model.pt"):
        load("broken", b"not a zip archive", ADD_SUB_CONFIG)


@pytest.mark.skipif("torch.cuda.is_available()", reason="checks the error when CUDA is missing")
def test_kind_gpu_without_cuda_is_a_clear_error(load):
    with pytest.raises(InvalidArgument, match="KIND_GPU .* sees no CUDA device"):
        load("addsub", models.AddSub(), ADD_SUB_CONFIG, kind="KIND_GPU")


def test_every_triton_parameter_is_accepted(load, caplog):
    values = {  # PyTorch's defaults, so that the process-wide ones change nothing in this test process
        "INFERENCE_MODE": "true", "DISABLE_OPTIMIZED_EXECUTION": "false", "DISABLE_CUDNN": "false",
        "ENABLE_CACHE_CLEANING": "true", "ENABLE_WEIGHT_SHARING": "true", "ENABLE_JIT_EXECUTOR": "true",
        "ENABLE_JIT_PROFILING": "true", "ENABLE_TENSOR_FUSER": "true", "ENABLE_NVFUSER": "true",
        "INTRA_OP_THREAD_COUNT": str(torch.get_num_threads()),
    }  # fmt: skip
    params = "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in values.items())
    instance = load("addsub", models.AddSub(), ADD_SUB_CONFIG + params)
    a = np.ones((2, 4), np.float32)
    [response] = instance.execute([_request({"INPUT__0": a, "INPUT__1": a})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, a + a)
    assert "ENABLE_NVFUSER" in caplog.text


@pytest.mark.parametrize("share", [True, False])
def test_weight_sharing_between_instances_on_one_device(tmp_path: Path, share: bool):
    (tmp_path / "affine" / "1").mkdir(parents=True)
    models.save_script(models.Affine(), tmp_path / "affine" / "1" / "model.pt")
    config = (
        """
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "scale" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """
        + f'parameters {{ key: "ENABLE_WEIGHT_SHARING" value {{ string_value: "{str(share).lower()}" }} }}'
    )
    model = pytorch_backend.PyTorchBackend().load_model(_context(tmp_path, "affine", config))
    first, second = (model.create_instance(InstanceSpec(f"affine_{i}", "KIND_CPU", 0, i, "affine")) for i in (0, 1))
    assert (first.module is second.module) is share


def test_pt2_is_chosen_when_it_is_the_only_file(tmp_path: Path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.pt2").write_bytes(b"")
    config = parse_config_text("", "x")
    pytorch_backend.PyTorchBackend().autocomplete_config(config, tmp_path / "m", tmp_path / "m" / "1")
    assert config.default_model_filename == "model.pt2"


def test_hooks_import_no_torch():
    code = "import inferd_backend_pytorch.hooks, sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
