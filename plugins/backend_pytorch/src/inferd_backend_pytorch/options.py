"""The ``parameters`` of Triton's pytorch backend, read once per model, and the backend's
``--backend-config=pytorch,<key>=<value>`` settings (no torch import here)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inferd.api import ModelParameters, setting_integer

log = logging.getLogger("inferd.pytorch")

#: Parameters Triton documents that have no effect here, and why.
_NO_EFFECT = {
    "ENABLE_NVFUSER": "nvFuser was removed from PyTorch (2.2+); the parameter is ignored",
    "TORCH_COMPILE_OPTIONAL_PARAMETERS": "torch.compile applies to Triton's Python-based model.py flavour only; ignored",
}


@dataclass(frozen=True, slots=True)
class TorchOptions:
    """Execution settings of one model, with Triton's defaults.

    ``None`` for the JIT switches means "leave PyTorch's process-wide setting alone", as Triton
    does when the parameter is absent.
    """

    inference_mode: bool = True  # INFERENCE_MODE (Triton's default is true)
    optimized_execution: bool = True  # not DISABLE_OPTIMIZED_EXECUTION
    cudnn: bool = True  # not DISABLE_CUDNN
    cache_cleaning: bool = False  # ENABLE_CACHE_CLEANING
    weight_sharing: bool = False  # ENABLE_WEIGHT_SHARING
    jit_executor: bool | None = None  # ENABLE_JIT_EXECUTOR
    jit_profiling: bool | None = None  # ENABLE_JIT_PROFILING
    tensor_fuser: bool | None = None  # ENABLE_TENSOR_FUSER
    intra_op_threads: int = 0  # INTRA_OP_THREAD_COUNT / NUM_THREADS (0: PyTorch's default)
    inter_op_threads: int = 0  # INTER_OP_THREAD_COUNT / NUM_INTEROP_THREADS


#: ``--backend-config=pytorch,<key>=<value>`` keys: PyTorch's process-wide thread pools, named as the
#: onnxruntime backend names its own (and as the model parameters, upper case). Triton's pytorch
#: backend reads these only as model parameters; as server settings they apply before any model
#: loads, and a model asking for other counts is then logged and ignored.
BACKEND_SETTINGS = ("intra_op_thread_count", "inter_op_thread_count", "INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT")


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """The backend's ``--backend-config`` settings (0: PyTorch's default, or the first model's)."""

    intra_op_threads: int = 0
    inter_op_threads: int = 0


def backend_options(settings: Mapping[str, str]) -> BackendOptions:
    """Read :data:`BACKEND_SETTINGS` (lower-case keys win); a bad value is a ConfigError naming the flag."""

    def count(key: str) -> int:
        upper = setting_integer(settings, "pytorch", key.upper(), 0)
        return setting_integer(settings, "pytorch", key, upper)

    return BackendOptions(count("intra_op_thread_count"), count("inter_op_thread_count"))


def parse_options(config: Any, model: str) -> TorchOptions:
    """Read Triton's pytorch parameters from ``config.parameters``; unknown keys are ignored."""
    params = ModelParameters(config, model)
    for key, why in _NO_EFFECT.items():
        if key in params:
            log.warning("model '%s': parameter %s: %s", model, key, why)

    flag = params.flag

    def count(*keys: str) -> int:
        for key in keys:
            if key in params:
                return max(params.integer(key, 0), 0)
        return 0

    return TorchOptions(
        inference_mode=bool(flag("INFERENCE_MODE", True)),
        optimized_execution=not flag("DISABLE_OPTIMIZED_EXECUTION", False),
        cudnn=not flag("DISABLE_CUDNN", False),
        cache_cleaning=bool(flag("ENABLE_CACHE_CLEANING", False)),
        weight_sharing=bool(flag("ENABLE_WEIGHT_SHARING", False)),
        jit_executor=flag("ENABLE_JIT_EXECUTOR", None),
        jit_profiling=flag("ENABLE_JIT_PROFILING", None),
        tensor_fuser=flag("ENABLE_TENSOR_FUSER", None),
        intra_op_threads=count("INTRA_OP_THREAD_COUNT", "NUM_THREADS"),
        inter_op_threads=count("INTER_OP_THREAD_COUNT", "NUM_INTEROP_THREADS"),
    )
