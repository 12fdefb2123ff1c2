"""Plugin registration. Imports neither TensorRT nor CUDA: they load when a model needs them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl

if TYPE_CHECKING:
    from inferd.api import Backend


def _make_backend() -> Backend:
    from inferd_backend_tensorrt.backend import TensorRTBackend

    return TensorRTBackend()


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "tensorrt" backend (platform ``tensorrt_plan``, file ``model.plan``)."""
    register("tensorrt", _make_backend, model_filenames=("model.plan",), single_process=True)
