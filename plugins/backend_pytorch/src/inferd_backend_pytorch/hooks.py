"""Plugin registration. Imports no torch: the backend module loads when a model needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl
from inferd_backend_pytorch.options import BACKEND_SETTINGS

if TYPE_CHECKING:
    from inferd.api import Backend

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)


def _make_backend(settings: dict[str, str]) -> Backend:
    from inferd_backend_pytorch.backend import PyTorchBackend

    return PyTorchBackend(settings)


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "pytorch" backend (platform ``pytorch_libtorch``)."""
    register("pytorch", _make_backend, model_filenames=("model.pt", "model.pt2"), settings=BACKEND_SETTINGS)
