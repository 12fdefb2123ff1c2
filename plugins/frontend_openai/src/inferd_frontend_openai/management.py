"""Triton's OpenAI model management (server PR #8682): ``POST /v1/models/{model}/load`` and
``POST /v1/models/{model}/unload``, through inferd's model lifecycle (the v2 repository API's).

As Triton's frontend answers them: only with ``--model-control-mode=explicit`` (else 400); a load
answers the model's ``/v1/models`` entry once it is ready, an unload ``{"status": "success",
"model"}`` once it is gone; loading a loaded model and unloading one that is not loaded are 400s;
a failed load or unload is 400 when the request was wrong and 500 otherwise. Errors are OpenAI's
object, with Triton's ``detail`` (FastAPI's field) beside it carrying the same sentence.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from inferd.api import ErrorKind, InferdError
from inferd_frontend_openai.errors import OpenAIError

if TYPE_CHECKING:
    from inferd_frontend_openai.catalog import Catalog
    from inferd_frontend_openai.engine import StreamingDataPlane

#: Triton's sentence when the model control mode is not explicit.
NOT_EXPLICIT = "Model load/unload requires --model-control-mode=explicit"


class ManagementError(OpenAIError):
    """An OpenAI error that also carries Triton's ``{"detail": message}``."""

    def body(self) -> dict[str, object]:
        return {**super().body(), "detail": self.message}


def _client(message: str) -> ManagementError:
    return ManagementError(400, message, "invalid_request_error")


def _failed(what: str, name: str, exc: InferdError) -> ManagementError:
    """Triton's ``Failed to load model 'm': <cause>``: 400 for a wrong request, 500 otherwise."""
    message = f"Failed to {what} model '{name}': {exc.message}"
    if exc.kind is ErrorKind.INVALID_ARG:
        return _client(message)
    return ManagementError(500, message, "server_error")


class Management:
    """Loads and unloads models one at a time, as Triton's frontend does (a lock around each)."""

    def __init__(self, dataplane: StreamingDataPlane, catalog: Catalog) -> None:
        self.dataplane = dataplane
        self.catalog = catalog
        self._lock = asyncio.Lock()

    def _check_mode(self) -> None:
        try:
            self.dataplane.check_control()
        except InferdError:
            raise _client(NOT_EXPLICIT) from None

    def _loaded(self, name: str) -> bool:
        try:
            self.dataplane.served_model(name)
        except InferdError:
            return False
        return True

    async def load(self, name: str) -> dict[str, object]:
        """Load ``name``; its ``/v1/models`` entry once it is ready."""
        self._check_mode()
        async with self._lock:
            if self._loaded(name):
                raise _client(
                    f"Model '{name}' is already loaded; unload it first, or reload it with "
                    f"POST /v2/repository/models/{name}/load"
                )
            try:
                await self.dataplane.load_model(name)
            except InferdError as exc:
                raise _failed("load", name, exc) from None
        return self.catalog.entry(name)

    async def unload(self, name: str) -> None:
        """Unload ``name`` (its requests in flight finish first)."""
        self._check_mode()
        async with self._lock:
            if not self._loaded(name):
                raise _client(f"Unknown model: {name}")
            try:
                await self.dataplane.unload_model(name)
            except InferdError as exc:
                raise _failed("unload", name, exc) from None
