"""Plugin registration. Imports nothing heavy: the backend module loads when a model needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl

if TYPE_CHECKING:
    from inferd.api import Backend, ServerView

#: ``--backend-config=python,<key>=<value>``: the bounds of an unpacked EXECUTION_ENV_PATH archive
#: (:mod:`inferd_backend_python.env`).
MAX_BYTES_SETTING = "execution-env-max-bytes"
MAX_MEMBERS_SETTING = "execution-env-max-members"


def _make_backend(settings: dict[str, str]) -> Backend:
    from inferd_backend_python.backend import PythonBackend

    return PythonBackend(settings)


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "python" backend."""
    register("python", _make_backend, model_filenames=("model.py",), settings=(MAX_BYTES_SETTING, MAX_MEMBERS_SETTING))


@hookimpl
def inferd_startup(server: ServerView) -> None:
    """Remove the environments unpacked by inferd processes that died (their directories stay)."""
    from inferd_backend_python import env

    env.remove_stale()
