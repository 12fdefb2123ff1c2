"""Plugin registration. Imports no framework: onnxruntime loads when a model needs the backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl
from inferd_backend_onnx.options import BACKEND_SETTINGS

if TYPE_CHECKING:
    from inferd.api import Backend

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)


def _make_backend(settings: dict[str, str]) -> Backend:
    # backend.py imports onnxruntime; an ImportError here reaches the lifecycle, which reports
    # "model '...' needs backend 'onnxruntime' ..., whose framework is not installed".
    from inferd_backend_onnx.backend import OnnxBackend

    return OnnxBackend(settings)


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "onnxruntime" backend (platform "onnxruntime_onnx")."""
    register("onnxruntime", _make_backend, model_filenames=("model.onnx",), settings=BACKEND_SETTINGS)
