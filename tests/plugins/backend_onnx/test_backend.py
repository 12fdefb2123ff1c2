"""The onnxruntime backend without a server: options, auto-complete rules, checks, providers, errors."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from inferd.config import config_to_json, normalize, parse_config_text
from inferd.contracts.backend import InstanceSpec, ModelLoadContext
from inferd.contracts.errors import ConfigError, InternalError, InvalidArgument
from inferd_backend_onnx import options
from inferd_backend_onnx.signature import GraphTensor, check_config
from tests.lazy import lazy_import

from . import models as m

ort = lazy_import("onnxruntime")
#: The backend module (it imports onnxruntime): loaded by the first test that uses it.
onnx_backend = lazy_import("inferd_backend_onnx.backend")
onnx_session = lazy_import("inferd_backend_onnx.session")


def config(text: str, name: str = "m"):
    return parse_config_text(f'name: "{name}"\n' + text, "config.pbtxt")


def write(tmp_path: Path, name: str, model, text: str | None) -> Path:
    m.save(model, tmp_path / name / "1" / "model.onnx")
    if text is not None:
        (tmp_path / name / "config.pbtxt").write_text(text)
    return tmp_path / name


def load(model_dir: Path, text: str, kind: str = "KIND_CPU"):
    """Auto-complete, normalize and load like the lifecycle does; returns (model, instance)."""
    backend = onnx_backend.OnnxBackend()
    cfg = config(text, model_dir.name)
    backend.autocomplete_config(cfg, model_dir, model_dir / "1")
    normalize(cfg, model_dir.name, backend.default_model_filename, backend.default_cpu_instance_count)
    ctx = ModelLoadContext(model_dir.name, 1, cfg, model_dir, model_dir / "1", model_dir.parent)
    model = backend.load_model(ctx)
    return model, model.create_instance(InstanceSpec(f"{model_dir.name}_0", kind, 0, 0, model_dir.name))


# -- session options ------------------------------------------------------------------------------


def test_session_settings_from_parameters() -> None:
    cfg = config("""
        optimization { graph { level: -1 } }
        parameters { key: "intra_op_thread_count" value: { string_value: "3" } }
        parameters { key: "inter_op_thread_count" value: { string_value: "2" } }
        parameters { key: "execution_mode" value: { string_value: "1" } }
        parameters { key: "enable_mem_arena" value: { string_value: "0" } }
        parameters { key: "enable_mem_pattern" value: { string_value: "true" } }
        parameters { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" } }
        parameters { key: "session.use_device_allocator_for_initializers" value: { string_value: "1" } }
        parameters { key: "cudnn_conv_algo_search" value: { string_value: "1" } }
    """)  # fmt: skip
    s = options.session_settings(cfg, "m")
    assert (s.graph_level, s.parallel, s.intra_op_threads, s.inter_op_threads) == ("ORT_ENABLE_BASIC", True, 3, 2)
    assert (s.mem_arena, s.mem_pattern) == (False, True)
    assert s.run_entries == {"memory.enable_memory_arena_shrinkage": "cpu:0"}
    assert s.session_entries == {"session.use_device_allocator_for_initializers": "1"}
    assert s.cuda_options == {"cudnn_conv_algo_search": "HEURISTIC"}


@pytest.mark.parametrize(("level", "name"), [(-1, "ORT_ENABLE_BASIC"), (0, "ORT_ENABLE_ALL"), (1, "ORT_ENABLE_EXTENDED"),
                                         (2, "ORT_DISABLE_ALL")])  # fmt: skip
def test_graph_levels_follow_triton(level: int, name: str) -> None:
    assert options.session_settings(config(f"optimization {{ graph {{ level: {level} }} }}"), "m").graph_level == name


def test_default_intra_op_threads_share_the_cores() -> None:
    s = options.session_settings(config(""), "m", instance_count=2)
    assert s.intra_op_threads == max(1, len(os.sched_getaffinity(0)) // 2)  # no cores given: this process's
    assert options.session_settings(config(""), "m", 2, cores=8).intra_op_threads == 4
    assert options.session_settings(config(""), "m", 3, cores=2).intra_op_threads == 1  # at least one
    explicit = config('parameters { key: "intra_op_thread_count" value: { string_value: "0" } }')
    assert options.session_settings(explicit, "m", 2).intra_op_threads == 0  # 0: onnxruntime decides


def test_bad_execution_mode() -> None:
    cfg = config('parameters { key: "execution_mode" value: { string_value: "2" } }')
    with pytest.raises(
        ConfigError, match="model 'm'.*execution_mode.*0 \\(sequential\\) or 1 \\(parallel\\) but got 2"
    ):
        options.session_settings(cfg, "m")


def test_providers_for_gpu_and_cpu_accelerators() -> None:
    cfg = config("""
        optimization { execution_accelerators {
          gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" }
                                         parameters { key: "max_workspace_size_bytes" value: "1073741824" } },
                                       { name: "cuda" parameters { key: "cudnn_conv_use_max_workspace" value: "0" } } ]
          cpu_execution_accelerator: [ { name: "openvino" } ] } }
    """)  # fmt: skip
    gpu = options.providers_for(cfg, "m", "KIND_GPU", 1, {"gpu_mem_limit": "1024"})
    assert gpu == [
        (options.TENSORRT, {"trt_fp16_enable": "1", "trt_max_workspace_size": "1073741824", "device_id": "1"}),
        (options.CUDA, {"gpu_mem_limit": "1024", "cudnn_conv_use_max_workspace": "0", "device_id": "1"}),
        (options.OPENVINO, {"device_type": "CPU"}),
        (options.CPU, {}),
    ]
    assert options.providers_for(cfg, "m", "KIND_CPU", 0, {}) == [
        (options.OPENVINO, {"device_type": "CPU"}),
        (options.CPU, {}),
    ]
    assert options.providers_for(config(""), "m", "KIND_GPU", 0, {}) == [
        (options.CUDA, {"device_id": "0"}),
        (options.CPU, {}),
    ]


@pytest.mark.parametrize(("text", "needle"), [
    ('gpu_execution_accelerator: [ { name: "rocm" } ]', "unknown Execution Accelerator 'rocm'"),
    ('cpu_execution_accelerator: [ { name: "dnnl" } ]', "unknown Execution Accelerator 'dnnl'"),
    ('gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "bogus" value: "1" } } ]', "unknown parameter 'bogus'"),
    ('gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP8" } } ]', "precision mode 'FP8'"),
])  # fmt: skip
def test_bad_accelerators(text: str, needle: str) -> None:
    cfg = config(f"optimization {{ execution_accelerators {{ {text} }} }}")
    with pytest.raises(ConfigError, match=needle):
        options.providers_for(cfg, "m", "KIND_GPU", 0, {})


# -- config checks --------------------------------------------------------------------------------

GRAPH_IN = [GraphTensor("A", "TYPE_FP32", (-1, 4), "tensor(float)")]
GRAPH_OUT = [GraphTensor("Y", "TYPE_FP32", (-1, 3), "tensor(float)")]


@pytest.mark.parametrize(("text", "needle"), [
    ('input [{name: "A" data_type: TYPE_FP32 dims: [4]}] output [{name: "Y" data_type: TYPE_FP32 dims: [3]}]', None),
    ('input [{name: "A" data_type: TYPE_FP32 dims: [-1]}] output [{name: "Y" data_type: TYPE_FP32 dims: [3]}]',
     "model 'm', tensor 'A': the model expects 2 dimensions (shape [-1,4]) but the model configuration specifies 2 "
     "dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making "
     "complete shape [-1,-1])"),
    ('input [{name: "A" data_type: TYPE_FP32 dims: [4]}] output [{name: "Y" data_type: TYPE_FP32 dims: [-1]}]',
     "model 'm', tensor 'Y': the model expects 2 dimensions (shape [-1,3])"),
    ('input [{name: "A" data_type: TYPE_INT64 dims: [4]}] output [{name: "Y" data_type: TYPE_FP32 dims: [3]}]',
     "unable to load model 'm', configuration expects datatype TYPE_INT64 for input 'A', model provides TYPE_FP32"),
    ('input [{name: "A" data_type: TYPE_FP32 dims: [4]}] output [{name: "Z" data_type: TYPE_FP32 dims: [3]}]',
     "unexpected inference output 'Z', allowed outputs are: Y; model 'm', configuration output[0]"),
    ('input [{name: "A" data_type: TYPE_FP32 dims: [4]}, {name: "B" data_type: TYPE_FP32 dims: [4]}] '
     'output [{name: "Y" data_type: TYPE_FP32 dims: [3]}]',
     "unable to load model 'm', configuration expects 2 inputs, model provides 1; configuration input(s) 'B' are not"),
    ('output [{name: "Y" data_type: TYPE_FP32 dims: [3]}]',
     "unable to load model 'm', configuration expects 0 inputs, model provides 1; model input(s) 'A' are not"),
])  # fmt: skip
def test_check_config(text: str, needle: str | None) -> None:
    cfg = config("max_batch_size: 2\n" + text)
    if needle is None:
        check_config(cfg, "m", GRAPH_IN, GRAPH_OUT)
        return
    with pytest.raises(ConfigError) as info:
        check_config(cfg, "m", GRAPH_IN, GRAPH_OUT)
    assert str(info.value).startswith(needle)


def test_check_config_hints_at_max_batch_size() -> None:
    cfg = config('input [{name: "A" data_type: TYPE_FP32 dims: [4]}]')
    with pytest.raises(
        ConfigError,
        match="specifies 1 dimensions \\(shape \\[4\\]\\); the model's first dimension is dynamic: set max_batch_size > 0",
    ):
        check_config(cfg, "m", GRAPH_IN, [])


def test_bf16_is_refused_at_load() -> None:
    bf16 = [GraphTensor("A", "TYPE_BF16", (-1, 4), "tensor(bfloat16)")]
    cfg = config('max_batch_size: 2 input [{name: "A" data_type: TYPE_BF16 dims: [4]}]')
    with pytest.raises(ConfigError, match="input 'A' is bfloat16"):
        check_config(cfg, "m", bf16, [])


def test_check_config_batching_needs_a_dynamic_first_dim() -> None:
    fixed = [GraphTensor("A", "TYPE_FP32", (2, 4), "tensor(float)")]
    cfg = config('max_batch_size: 2 input [{name: "A" data_type: TYPE_FP32 dims: [4]}]')
    with pytest.raises(
        ConfigError,
        match="for the model to support batching the shape should have at least 1 dimension and the first dimension must be -1",
    ):
        check_config(cfg, "m", fixed, [])


# -- auto-complete --------------------------------------------------------------------------------


def test_autocomplete_fills_from_the_graph(tmp_path: Path) -> None:
    model_dir = write(tmp_path, "auto", m.add_matmul(), None)
    cfg = config("", "auto")
    onnx_backend.OnnxBackend().autocomplete_config(cfg, model_dir, model_dir / "1")
    got = config_to_json(cfg)
    assert got["backend"] == "onnxruntime" and got["max_batch_size"] == 4 and "dynamic_batching" in got
    assert [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in got["input"]] == [
        ("A", "TYPE_FP32", [4]), ("B", "TYPE_FP32", [4])]  # fmt: skip
    assert [(t["name"], [int(d) for d in t["dims"]]) for t in got["output"]] == [("SUM", [4]), ("MM", [3])]


def test_autocomplete_keeps_what_the_config_says(tmp_path: Path) -> None:
    model_dir = write(tmp_path, "auto", m.add_matmul(), None)
    cfg = config(
        'max_batch_size: 16\ninput [{name: "A" data_type: TYPE_FP32 dims: [4]}, {name: "B" data_type: TYPE_FP32 dims: [4]}]',
        "auto",
    )
    onnx_backend.OnnxBackend().autocomplete_config(cfg, model_dir, model_dir / "1")
    assert cfg.max_batch_size == 16 and [o.name for o in cfg.output] == ["SUM", "MM"]
    assert len(cfg.input) == 2


def test_autocomplete_refuses_batching_for_fixed_shapes(tmp_path: Path) -> None:
    model_dir = write(tmp_path, "fixed", m.fixed_int(), None)
    with pytest.raises(
        ConfigError,
        match="model does not support batching while non-zero max_batch_size is specified; max_batch_size is 8",
    ):
        onnx_backend.OnnxBackend().autocomplete_config(config("max_batch_size: 8", "fixed"), model_dir, model_dir / "1")


def test_autocomplete_scalar_output_is_dims_1(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    model = m.make_model(
        [helper.make_node("ReduceSum", ["X"], ["S"], keepdims=0), helper.make_node("Identity", ["X"], ["I"])],
        [m.vi("X", TensorProto.FLOAT, ["b", 3])], [m.vi("S", TensorProto.FLOAT, []), m.vi("I", TensorProto.FLOAT, ["b", 3])],
    )  # fmt: skip
    model_dir = write(tmp_path, "scalar", model, None)
    cfg = config("", "scalar")
    onnx_backend.OnnxBackend().autocomplete_config(cfg, model_dir, model_dir / "1")
    assert cfg.max_batch_size == 0  # a scalar output cannot batch
    assert list(cfg.output[0].dims) == [1] and not cfg.output[0].HasField("reshape")
    _, instance = load(model_dir, "")
    out = instance.run({"X": np.ones((2, 3), np.float32)})
    assert out["S"].shape == (1,) and out["S"][0] == 6.0


def test_autocomplete_batch_only_output_gets_a_reshape(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    axes = numpy_helper.from_array(np.array([1], np.int64), "AXES")
    model = m.make_model(
        [helper.make_node("ReduceSum", ["X", "AXES"], ["S"], keepdims=0)],
        [m.vi("X", TensorProto.FLOAT, ["b", 3])], [m.vi("S", TensorProto.FLOAT, ["b"])], [axes],
    )  # fmt: skip
    model_dir = write(tmp_path, "rows", model, None)
    cfg = config("", "rows")
    onnx_backend.OnnxBackend().autocomplete_config(cfg, model_dir, model_dir / "1")
    assert cfg.max_batch_size == 4
    assert list(cfg.output[0].dims) == [1] and cfg.output[0].HasField("reshape") and not cfg.output[0].reshape.shape
    _, instance = load(model_dir, "")
    out = instance.run({"X": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out["S"], [[3.0], [3.0]])


# -- instances ------------------------------------------------------------------------------------


def test_session_options_apply(tmp_path: Path) -> None:
    text = """
        optimization { graph { level: 2 } }
        parameters { key: "execution_mode" value: { string_value: "1" } }
        parameters { key: "inter_op_thread_count" value: { string_value: "1" } }
        parameters { key: "enable_mem_arena" value: { string_value: "true" } }
        parameters { key: "enable_mem_pattern" value: { string_value: "0" } }
        parameters { key: "session.intra_op.allow_spinning" value: { string_value: "0" } }
        parameters { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" } }
    """
    model, instance = load(write(tmp_path, "am", m.add_matmul(), None), text)
    so = onnx_session.session_options(model.settings, model.name)
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert (so.enable_cpu_mem_arena, so.enable_mem_pattern) == (True, False)
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    a = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(instance.run({"A": a, "B": a})["SUM"], a + a)


def test_wrong_rank_is_invalid_argument_with_model_name(tmp_path: Path) -> None:
    _, instance = load(write(tmp_path, "am", m.add_matmul(), None), "")
    with pytest.raises(
        InvalidArgument, match="model 'am': onnxruntime rejected the request: Invalid rank for input: A"
    ):
        instance.run({"A": np.ones((2, 4, 1), np.float32), "B": np.ones((2, 4), np.float32)})


def test_runtime_failure_is_internal_with_model_name(tmp_path: Path) -> None:
    model_dir = write(tmp_path, "am", m.add_matmul(), None)
    _, instance = load(model_dir, "")
    # Shapes that pass the rank check but cannot broadcast in Add.
    with pytest.raises(InternalError, match="model 'am': onnxruntime failed to run the request"):
        instance.run({"A": np.ones((2, 4), np.float32), "B": np.ones((3, 4), np.float32)})


def test_gpu_instance_falls_back_to_cpu_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inferd_backend_onnx")
    model_dir = write(tmp_path, "am", m.add_matmul(), None)
    _, instance = load(model_dir, "", kind="KIND_GPU")
    active = instance.session.get_providers()
    if "CUDAExecutionProvider" in active:
        assert "session on CUDAExecutionProvider(device_id=0)" in caplog.text
    else:
        assert "CUDAExecutionProvider" in caplog.text and "CPUExecutionProvider" in caplog.text
        assert any(r.levelno == logging.WARNING for r in caplog.records)
    a = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(instance.run({"A": a, "B": a})["SUM"], a + a)


def test_missing_model_file(tmp_path: Path) -> None:
    model_dir = tmp_path / "empty"
    (model_dir / "1").mkdir(parents=True)
    with pytest.raises(ConfigError, match="unable to find '.*empty/1/model.onnx'"):
        onnx_backend.OnnxBackend().autocomplete_config(config("", "empty"), model_dir, model_dir / "1")


@pytest.mark.gpu
@pytest.mark.skipif("'CUDAExecutionProvider' not in ort.get_available_providers()", reason="onnxruntime has no CUDA EP")
def test_cuda_session_on_gpu(tmp_path: Path) -> None:
    model_dir = write(tmp_path, "am", m.add_matmul(), None)
    _, instance = load(model_dir, "", kind="KIND_GPU")
    if "CUDAExecutionProvider" not in instance.session.get_providers():
        pytest.skip("CUDA EP could not start here (no GPU or CUDA libraries)")
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = instance.run({"A": a, "B": a})
    np.testing.assert_allclose(out["MM"], a @ m.MATMUL_W, rtol=1e-4, atol=1e-5)
