"""ONNX Runtime sessions: opening one on a model file, its options from the model's settings, its errors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnxruntime as ort

from inferd.api import ConfigError, InvalidArgument
from inferd_backend_onnx import options

if TYPE_CHECKING:
    from inferd_backend_onnx.options import SessionSettings

_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ")


def resolve_model_path(path: Path) -> Path:
    """``model.onnx`` may be a directory holding ``model.onnx`` and its external data (as in Triton)."""
    return path / "model.onnx" if path.is_dir() else path


def open_session(path: Path, model: str, so: Any, providers: Sequence[options.Provider]) -> Any:
    """An ``InferenceSession`` on ``path``; loading from the path lets external data beside it load."""
    try:
        return ort.InferenceSession(
            str(path),
            sess_options=so,
            providers=[name for name, _ in providers],
            provider_options=[opts for _, opts in providers],
        )
    except Exception as exc:  # onnxruntime raises its own classes (InvalidProtobuf, Fail, ...)
        message = ort_message(exc).replace(f"Load model from {path} failed:", "")
        raise InvalidArgument(f"unable to load model '{model}': onnxruntime cannot load '{path}': {message}") from None


def ort_message(exc: BaseException) -> str:
    """onnxruntime's message without its ``[ONNXRuntimeError] : <code> : <STATUS> :`` prefix."""
    return _ORT_PREFIX.sub("", str(exc)).strip()


def probe_options(shared_threads: bool) -> Any:
    """Options for a session that only reads the model's inputs and outputs (on the global thread
    pools when they are on: onnxruntime then refuses sessions with their own)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if shared_threads:
        so.use_per_session_threads = False
    else:
        so.intra_op_num_threads = 1
    return so


def session_options(settings: SessionSettings, model: str) -> Any:
    """A fresh ``SessionOptions`` from a model's settings (one per session)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, settings.graph_level)
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if settings.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = settings.intra_op_threads
    so.inter_op_num_threads = settings.inter_op_threads
    if settings.shared_threads:
        so.use_per_session_threads = False
    if settings.mem_arena is not None:
        so.enable_cpu_mem_arena = settings.mem_arena
    if settings.mem_pattern is not None:
        so.enable_mem_pattern = settings.mem_pattern
    for key, value in settings.session_entries.items():
        try:
            so.add_session_config_entry(key, value)
        except Exception as exc:
            raise ConfigError(f"model '{model}': parameter '{key}': {ort_message(exc)}") from None
    return so


def run_options(settings: SessionSettings) -> Any:
    """The ``RunOptions`` every execution of a model passes (its run config entries)."""
    options = ort.RunOptions()
    for key, value in settings.run_entries.items():
        options.add_run_config_entry(key, value)
    return options
