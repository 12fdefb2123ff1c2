"""The one API every frontend calls. It knows no wire format.

Frontends decode into :class:`~inferd.types.InferRequest`, call the data plane, and encode what it
returns. Errors are raised as :class:`~inferd.errors.InferdError` with a kind each frontend maps
to its status codes.
"""

from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, Any, AsyncIterator

from inferd import __version__
from inferd import config as cfg
from inferd.errors import InferdError, InvalidArgument, Unavailable, Unsupported
from inferd.lifecycle import ControlMode, ModelManager
from inferd.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from inferd.model import ModelVersion

#: Extensions listed in server metadata: only those inferd implements.
EXTENSIONS: list[str] = [
    "model_repository",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
]


class DataPlane:
    """Health, metadata, inference, statistics and repository control for frontends."""

    def __init__(self, manager: ModelManager, server_name: str = "inferd") -> None:
        self.manager = manager
        manager.dataplane = self
        self.server_name = server_name
        self.extensions = list(EXTENSIONS)
        self.live = False
        self.accepting = False
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- health and metadata --------------------------------------------------------------------

    def is_live(self) -> bool:
        return self.live

    def is_ready(self) -> bool:
        """Ready once start-up loading finished and the frontends accept requests."""
        return self.live and self.accepting

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.server_name, "version": __version__, "extensions": self.extensions}

    def model(self, name: str, version: str = "") -> ModelVersion:
        """The version that would serve a request for ``name``/``version``."""
        return self.manager.resolve(name, version)

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.manager.resolve(name, version)
        except InferdError:
            return False
        return True

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        mv = self.manager.resolve(name, version)
        meta = dict(mv.metadata)
        meta["versions"] = [str(v) for v in self.manager.ready_versions(name)]
        return {"name": meta["name"], "versions": meta["versions"], "platform": meta["platform"],
                "inputs": meta["inputs"], "outputs": meta["outputs"]}  # fmt: skip

    def model_config(self, name: str, version: str = "") -> cfg.ModelConfig:
        return self.manager.resolve(name, version).config

    def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's ``model_stats`` list: every ready version, or those of one model."""
        if name:
            if version:
                return [self.manager.resolve(name, version).stats.as_dict()]
            record = self.manager.records.get(name)
            if record is None or not record.serving:
                raise InvalidArgument(f"requested model '{name}' is not available")
            return [mv.stats.as_dict() for _, mv in sorted(record.serving.items())]
        out = []
        for n in sorted(self.manager.records):
            for _, mv in sorted(self.manager.records[n].serving.items()):
                out.append(mv.stats.as_dict())
        return out

    # -- inference ------------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run one request to completion. Decoupled models must go through :meth:`stream`."""
        mv = self.manager.resolve(request.model_name, request.model_version)
        if mv.decoupled:
            raise Unsupported(
                f"model '{mv.name}' is decoupled (it may send any number of responses): "
                f"call it through gRPC ModelStreamInfer or the generate_stream route"
            )
        return await mv.infer(request)

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse | InferdError]:
        """Yield every response of a request: one for ordinary models, 0..N for decoupled ones."""
        mv = self.manager.resolve(request.model_name, request.model_version)
        if not mv.decoupled:
            try:
                yield await mv.infer(request)
            except InferdError as exc:
                yield exc
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[InferResponse | InferdError | None, bool]] = asyncio.Queue()

        def sender(response: InferResponse | InferdError | None, final: bool) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (response, final))

        def finished(task: asyncio.Future[InferResponse]) -> None:
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                queue.put_nowait((exc if isinstance(exc, InferdError) else InferdError(str(exc)), True))

        request.response_sender = sender
        task = asyncio.ensure_future(mv.infer(request))
        task.add_done_callback(finished)
        while True:
            response, final = await queue.get()
            if response is not None:
                yield response
            if final:
                break

    def infer_from_thread(self, request: InferRequest) -> InferResponse:
        """Blocking :meth:`infer` for code on a worker thread (Python models calling models)."""
        if self.loop is None:
            raise Unavailable("the server is not running")
        return asyncio.run_coroutine_threadsafe(self.infer(request), self.loop).result()

    # -- repository -----------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.manager.index(ready_only)

    def _check_control(self) -> None:
        mode = self.manager.options.mode
        if mode is ControlMode.POLL:
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")
        if mode is ControlMode.NONE:
            raise Unavailable("explicit model load / unload is not allowed if model control mode is 'none'")

    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        """Load or reload ``name``; ``parameters['config']`` (JSON) overrides its config.pbtxt."""
        self._check_control()
        override = None
        parameters = parameters or {}
        if "config" in parameters:
            override = cfg.config_from_json(parameters["config"], f"load request for '{name}'")
        files = {k[5:]: _file_bytes(name, k, v) for k, v in parameters.items() if k.startswith("file:")}
        unknown = [k for k in parameters if k != "config" and not k.startswith("file:")]
        if unknown:
            raise InvalidArgument(f"load request for '{name}': unknown parameter '{unknown[0]}'")
        await self.manager.load(name, override, files or None)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self._check_control()
        await self.manager.unload(name)


def _file_bytes(model: str, key: str, value: Any) -> bytes:
    """A ``file:`` load parameter: raw bytes (gRPC) or base64 text (HTTP)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise InvalidArgument(f"load request for '{model}': '{key}' is not valid base64") from None
    raise InvalidArgument(f"load request for '{model}': '{key}' must be base64 text or bytes")
