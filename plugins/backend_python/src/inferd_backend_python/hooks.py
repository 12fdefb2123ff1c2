"""Plugin registration. Imports nothing heavy: the backend module loads when a model needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl

if TYPE_CHECKING:
    from inferd.api import Backend


def _make_backend() -> Backend:
    from inferd_backend_python.backend import PythonBackend

    return PythonBackend()


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "python" backend."""
    register("python", _make_backend, model_filenames=("model.py",))
