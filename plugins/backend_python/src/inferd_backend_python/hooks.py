"""Plugin registration. Imports nothing heavy: the backend module loads when a model needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl
from inferd_backend_python.options import BACKEND_SETTINGS

if TYPE_CHECKING:
    from inferd.api import Backend, ServerView


def _make_backend(settings: dict[str, str]) -> Backend:
    from inferd_backend_python.backend import PythonBackend

    return PythonBackend(settings)


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "python" backend."""
    register("python", _make_backend, model_filenames=("model.py",), settings=BACKEND_SETTINGS)


@hookimpl
def inferd_startup(server: ServerView) -> None:
    """Remove the environments unpacked by inferd processes that died (their directories stay)."""
    from inferd_backend_python import env

    env.remove_stale()
