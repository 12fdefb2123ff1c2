"""Session options and execution providers from a Triton model configuration.

Framework-free: this module turns config.pbtxt into plain values (:class:`SessionSettings`, a
provider list); ``backend.py`` applies them to ``onnxruntime``. Keys and meanings are those of
Triton's onnxruntime backend:

- ``parameters``: ``intra_op_thread_count``, ``inter_op_thread_count``, ``execution_mode`` (0
  sequential, 1 parallel), ``enable_mem_arena``, ``enable_mem_pattern``,
  ``memory.enable_memory_arena_shrinkage`` (a run option),
  ``session.use_device_allocator_for_initializers`` (and any other ``session.*`` key, passed to
  ``SessionOptions.add_session_config_entry``), and the deprecated CUDA keys
  ``cudnn_conv_algo_search``, ``gpu_mem_limit``, ``arena_extend_strategy``,
  ``do_copy_in_default_stream``.
- ``optimization { graph { level } }``: -1 basic, 1 extended, 2 none, anything else all.
- ``optimization { execution_accelerators { gpu_execution_accelerator [ {name: "tensorrt" | "cuda"
  parameters {...}} ] cpu_execution_accelerator [ {name: "openvino"} ] } }``.
- ``--backend-config=onnxruntime,<key>=<value>`` (:data:`BACKEND_SETTINGS`, :class:`BackendOptions`):
  ``default-max-batch-size`` (auto-complete's max_batch_size, default 4), and
  ``enable-global-threadpool`` with ``intra_op_thread_count`` / ``inter_op_thread_count``: one
  thread pool shared by every session; the models' own thread counts are then ignored, as in Triton.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inferd.api import ConfigError, ModelParameters, process_cores, setting_flag, setting_integer

if TYPE_CHECKING:
    from inferd.api import ModelConfig

TENSORRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"

#: optimization.graph.level -> onnxruntime.GraphOptimizationLevel member name.
GRAPH_LEVELS = {-1: "ORT_ENABLE_BASIC", 1: "ORT_ENABLE_EXTENDED", 2: "ORT_DISABLE_ALL"}

# Triton's tensorrt accelerator keys: config key -> TensorRT EP option ("" = same name).
_TRT_RENAMES = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "int8_calibration_table_name": "trt_int8_calibration_table_name",
    "int8_use_native_calibration_table": "trt_int8_use_native_calibration_table",
}
_TRT_PRECISION = {"FP16": "trt_fp16_enable", "BF16": "trt_bf16_enable", "INT8": "trt_int8_enable", "FP32": ""}
_CUDNN_SEARCH = {0: "EXHAUSTIVE", 1: "HEURISTIC", 2: "DEFAULT"}
_ARENA_STRATEGY = {0: "kNextPowerOfTwo", 1: "kSameAsRequested"}


#: The ``--backend-config=onnxruntime,<key>=<value>`` keys this backend reads (Triton's names).
BACKEND_SETTINGS = (
    "default-max-batch-size",
    "enable-global-threadpool",
    "intra_op_thread_count",
    "inter_op_thread_count",
)


@dataclass(frozen=True)
class BackendOptions:
    """The backend's ``--backend-config`` settings, with Triton's defaults."""

    #: max_batch_size auto-complete gives a model that can batch and sets none (0: no batching).
    default_max_batch_size: int = 4
    #: One intra-op and one inter-op thread pool for every session (0 threads: onnxruntime's default).
    global_threadpool: bool = False
    intra_op_threads: int = 0
    inter_op_threads: int = 0


def backend_options(settings: Mapping[str, str]) -> BackendOptions:
    """Read :data:`BACKEND_SETTINGS`; a bad value is a ConfigError naming the flag."""
    name = "onnxruntime"
    return BackendOptions(
        default_max_batch_size=setting_integer(settings, name, "default-max-batch-size", 4),
        global_threadpool=setting_flag(settings, name, "enable-global-threadpool", False),
        intra_op_threads=setting_integer(settings, name, "intra_op_thread_count", 0),
        inter_op_threads=setting_integer(settings, name, "inter_op_thread_count", 0),
    )


@dataclass
class SessionSettings:
    """What the config says about a session, before it meets onnxruntime."""

    graph_level: str = "ORT_ENABLE_ALL"
    parallel: bool = False
    intra_op_threads: int = 0  # 0: onnxruntime's default (one per core)
    inter_op_threads: int = 0
    #: Run on the backend's global thread pools (``enable-global-threadpool``), not the session's own.
    shared_threads: bool = False
    mem_arena: bool | None = None
    mem_pattern: bool | None = None
    session_entries: dict[str, str] = field(default_factory=dict)
    run_entries: dict[str, str] = field(default_factory=dict)
    #: CUDA EP options from the deprecated top-level ``parameters`` keys.
    cuda_options: dict[str, str] = field(default_factory=dict)


def default_intra_op_threads(instance_count: int, cores: int) -> int:
    """``cores`` (what this serving process may use: ``ModelLoadContext.cores``) shared among the
    model's instances (at least 1)."""
    return max(1, cores // max(1, instance_count))


def session_settings(
    config: ModelConfig, model: str, instance_count: int = 1, shared_threads: bool = False, cores: int | None = None
) -> SessionSettings:
    """Parse the session-level options of ``config``; raise ConfigError for bad values.

    ``intra_op_thread_count`` unset means the cores divided among ``instance_count`` instances
    (Triton leaves it to onnxruntime, one thread per core per session, which oversubscribes a
    machine with several instances); "0" asks for onnxruntime's default. With ``shared_threads``
    (the global thread pools) the model's thread counts are ignored, as Triton ignores them.
    """
    params = ModelParameters(config, model)
    s = SessionSettings()
    if config.optimization.HasField("graph"):
        s.graph_level = GRAPH_LEVELS.get(config.optimization.graph.level, "ORT_ENABLE_ALL")
    mode = params.integer("execution_mode", 0)
    if mode not in (0, 1):
        raise ConfigError(
            f"model '{model}': invalid configuration value provided. Expected values for execution_mode "
            f"are 0 (sequential) or 1 (parallel) but got {mode}"
        )
    s.parallel = mode == 1
    s.shared_threads = shared_threads
    if shared_threads:
        s.intra_op_threads = 0
    elif "intra_op_thread_count" in params:
        s.intra_op_threads = max(0, params.integer("intra_op_thread_count", 0))
    else:
        s.intra_op_threads = default_intra_op_threads(instance_count, process_cores() if cores is None else cores)
    s.inter_op_threads = 0 if shared_threads else max(0, params.integer("inter_op_thread_count", 0))
    s.mem_arena = params.flag("enable_mem_arena", None)
    s.mem_pattern = params.flag("enable_mem_pattern", None)
    for key, value in params.items():
        if key.startswith("session."):
            s.session_entries[key] = value
        elif key == "memory.enable_memory_arena_shrinkage":
            s.run_entries[key] = value
    s.cuda_options = _deprecated_cuda_options(model, params)
    return s


def _deprecated_cuda_options(model: str, params: ModelParameters) -> dict[str, str]:
    out: dict[str, str] = {}
    if "cudnn_conv_algo_search" in params:
        n = params.integer("cudnn_conv_algo_search", 0)
        if n not in _CUDNN_SEARCH:
            raise ConfigError(
                f"model '{model}': unsupported cudnn_conv_algo_search value '{n}' is requested (0, 1 or 2)"
            )
        out["cudnn_conv_algo_search"] = _CUDNN_SEARCH[n]
    if "gpu_mem_limit" in params:
        out["gpu_mem_limit"] = str(params.integer("gpu_mem_limit", 0))
    if "arena_extend_strategy" in params:
        n = params.integer("arena_extend_strategy", 0)
        if n not in _ARENA_STRATEGY:
            raise ConfigError(f"model '{model}': unsupported arena_extend_strategy value '{n}' is requested (0 or 1)")
        out["arena_extend_strategy"] = _ARENA_STRATEGY[n]
    if "do_copy_in_default_stream" in params:
        out["do_copy_in_default_stream"] = params["do_copy_in_default_stream"]
    return out


Provider = tuple[str, dict[str, str]]


def providers_for(
    config: ModelConfig, model: str, kind: str, device_id: int, cuda_options: dict[str, str]
) -> list[Provider]:
    """The execution providers, in priority order, for one instance (CPU last, always).

    A KIND_GPU instance gets the configured GPU accelerators (TensorRT first) and then CUDA on
    ``device_id``; every instance gets the configured CPU accelerators (OpenVINO). An unknown
    accelerator name is a ConfigError, as in Triton.
    """
    accelerators = config.optimization.execution_accelerators
    providers: list[Provider] = []
    if kind == "KIND_GPU":
        cuda = {**cuda_options}
        for acc in accelerators.gpu_execution_accelerator:
            params = dict(acc.parameters)
            if acc.name == "tensorrt":
                providers.append((TENSORRT, {**_tensorrt_options(model, params), "device_id": str(device_id)}))
            elif acc.name == "cuda":
                cuda.update(params)
            else:
                raise ConfigError(
                    f"model '{model}': unknown Execution Accelerator '{acc.name}' is requested in "
                    f"optimization.execution_accelerators.gpu_execution_accelerator; known: tensorrt, cuda"
                )
        cuda["device_id"] = str(device_id)
        providers.append((CUDA, cuda))
    for acc in accelerators.cpu_execution_accelerator:
        if acc.name != "openvino":
            raise ConfigError(
                f"model '{model}': unknown Execution Accelerator '{acc.name}' is requested in "
                f"optimization.execution_accelerators.cpu_execution_accelerator; known: openvino"
            )
        providers.append((OPENVINO, {"device_type": "CPU", **dict(acc.parameters)}))
    providers.append((CPU, {}))
    return providers


def _tensorrt_options(model: str, params: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if key == "precision_mode":
            if value not in _TRT_PRECISION:
                raise ConfigError(
                    f"model '{model}': unsupported precision mode '{value}' is requested for the tensorrt "
                    f"accelerator; expected one of {', '.join(_TRT_PRECISION)}"
                )
            if _TRT_PRECISION[value]:
                out[_TRT_PRECISION[value]] = "1"
        elif key in _TRT_RENAMES:
            out[_TRT_RENAMES[key]] = value
        elif key.startswith("trt_"):
            out[key] = value
        else:
            raise ConfigError(
                f"model '{model}': unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
    return out


def describe(providers: list[Provider]) -> str:
    """``CUDAExecutionProvider(device_id=0), CPUExecutionProvider`` for log lines."""
    parts = []
    for name, opts in providers:
        parts.append(f"{name}({', '.join(f'{k}={v}' for k, v in sorted(opts.items()))})" if opts else name)
    return ", ".join(parts)
