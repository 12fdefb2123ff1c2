"""Plugin registration. Imports no vLLM: the engine modules load when a model needs them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl

if TYPE_CHECKING:
    from inferd.api import Backend


def _make_backend() -> Backend:
    from inferd_backend_vllm.backend import VllmBackend

    return VllmBackend()


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "vllm" backend (models identified by ``<version>/model.json``)."""
    register("vllm", _make_backend, model_filenames=("model.json",), single_process=True)
