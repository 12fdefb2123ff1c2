"""Plugin registration. Imports no xgboost or treelite: the backend module loads when a model needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl

if TYPE_CHECKING:
    from inferd.api import Backend

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)


def _make_backend() -> Backend:
    from inferd_backend_fil.backend import FilBackend

    return FilBackend()


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "fil" backend."""
    register(
        "fil",
        _make_backend,
        model_filenames=("xgboost.json", "xgboost.ubj", "xgboost.model", "checkpoint.tl", "model.txt"),
    )
