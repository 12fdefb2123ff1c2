"""The one API every frontend calls. It knows no wire format.

Frontends decode into :class:`~inferd.types.InferRequest`, call the data plane, and encode what it
returns. Errors are raised as :class:`~inferd.errors.InferdError` with a kind each frontend maps
to its status codes.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from inferd import __version__
from inferd import config as cfg
from inferd.errors import InferdError, InvalidArgument, Unavailable, Unsupported
from inferd.lifecycle import ControlMode, ModelManager
from inferd.logging_settings import REQUEST_ID
from inferd.logging_settings import SETTINGS as LOG_SETTINGS
from inferd.model_info import ModelInfo, Servable, describe
from inferd.trace import TRACE_KEY, RequestTrace, Tracer
from inferd.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from inferd.model import ModelVersion
    from inferd.stats import ModelStats

#: Extensions listed in server metadata: only those inferd implements.
EXTENSIONS: list[str] = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]

log = logging.getLogger(__name__)


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
        #: Trace settings and sampling (the trace extension).
        self.tracer = Tracer()
        #: The process's log settings (the logging extension).
        self.log_config = LOG_SETTINGS
        #: The description of each loaded version, built on its first request (weakly held both
        #: ways: an unloaded version leaves the cache).
        self._infos: weakref.WeakKeyDictionary[ModelVersion, ModelInfo] = weakref.WeakKeyDictionary()

    # -- health and metadata --------------------------------------------------------------------

    def is_live(self) -> bool:
        return self.live

    def is_ready(self) -> bool:
        """Ready once start-up loading finished and the frontends accept requests."""
        return self.live and self.accepting

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.server_name, "version": __version__, "extensions": self.extensions}

    def resolve(self, name: str, version: str = "") -> ModelInfo:
        """The version that serves a request for ``name``/``version`` now; pass it to :meth:`infer`
        or :meth:`stream` so the request runs on the version it was decoded for."""
        mv = self.manager.resolve(name, version)
        info = self._infos.get(mv)
        if info is None:
            info = self._infos[mv] = describe(mv)
        return info

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.manager.resolve(name, version)
        except InferdError:
            return False
        return True

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        info = self.resolve(name, version)
        return info.metadata([str(v) for v in self.manager.ready_versions(name)])

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

    # -- trace and logging extensions -------------------------------------------------------------

    def trace_settings(self, model: str = "") -> dict[str, Any]:
        """Triton's trace settings JSON, global or for ``model``."""
        if model:
            self._check_known(model)
        return self.tracer.settings(model)

    def update_trace_settings(self, settings: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Change some trace settings (a null value resets one); returns them all."""
        if model:
            self._check_known(model)
        return self.tracer.update(settings, model)

    def log_settings(self) -> dict[str, Any]:
        return self.log_config.as_json()

    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Change some log settings, applied to Python logging at once; returns them all."""
        return self.log_config.update(settings)

    def _check_known(self, name: str) -> None:
        if name not in self.manager.records and name not in self.manager.snapshot.models:
            raise InvalidArgument(f"Request for unknown model : '{name}' is not in the model repository")

    # -- inference ------------------------------------------------------------------------------

    async def infer(self, request: InferRequest, model: ModelInfo | None = None) -> InferResponse:
        """Run one request to completion on ``model`` (from :meth:`resolve`; resolved from the
        request when not given). Decoupled models must go through :meth:`stream`."""
        info = model or self.resolve(request.model_name, request.model_version)
        if info.decoupled:
            raise Unsupported(
                f"model '{info.name}' is decoupled (it may send any number of responses): "
                f"call it through gRPC ModelStreamInfer or the generate_stream route"
            )
        return await self._run(info, request)

    @staticmethod
    def _servable(info: ModelInfo) -> Servable:
        version = info.handle()
        if version is None:
            raise Unavailable(f"model '{info.name}' version {info.version} is no longer loaded")
        return version

    async def _run(self, info: ModelInfo, request: InferRequest) -> InferResponse:
        """The version's ``infer`` with the request id set for log lines, traced when sampled."""
        if self.tracer.active:
            trace = self.tracer.sample(request, info.name, info.version)
            if trace is not None:
                return await self._run_traced(info, request, trace)
        token = REQUEST_ID.set(request.id)
        try:
            return await self._servable(info).infer(request)
        except InferdError as exc:
            log.debug("model '%s' version %d: request failed: %s", info.name, info.version, exc.message)
            raise
        finally:
            REQUEST_ID.reset(token)

    async def _run_traced(self, info: ModelInfo, request: InferRequest, trace: RequestTrace) -> InferResponse:
        token = REQUEST_ID.set(request.id)
        trace.mark("REQUEST_START")
        trace.record_tensors("TENSOR_QUEUE_INPUT", request.inputs.values())
        try:
            response = await self._servable(info).infer(request)
            trace.record_tensors("TENSOR_BACKEND_OUTPUT", response.outputs)
            if request.response_sender is None:
                trace.mark("INFER_RESPONSE_COMPLETE")
            return response
        except InferdError as exc:
            log.debug("model '%s' version %d: request failed: %s", info.name, info.version, exc.message)
            raise
        finally:
            trace.mark("REQUEST_END")
            self.tracer.finish(trace)
            REQUEST_ID.reset(token)

    async def stream(
        self, request: InferRequest, model: ModelInfo | None = None
    ) -> AsyncIterator[InferResponse | InferdError]:
        """Yield every response of a request on ``model`` (resolved from the request when not
        given): one for ordinary models, 0..N for decoupled ones."""
        info = model or self.resolve(request.model_name, request.model_version)
        if not info.decoupled:
            try:
                yield await self._run(info, request)
            except InferdError as exc:
                yield exc
            return
        async for item in self._stream_decoupled(info, request):
            yield item

    async def _stream_decoupled(
        self, info: ModelInfo, request: InferRequest
    ) -> AsyncIterator[InferResponse | InferdError]:
        """Run ``request`` with a response sender and yield what the model sends, up to the final one."""
        queue: asyncio.Queue[tuple[InferResponse | InferdError | None, bool]] = asyncio.Queue()

        def finished(task: asyncio.Future[InferResponse]) -> None:
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                queue.put_nowait((exc if isinstance(exc, InferdError) else InferdError(str(exc)), True))

        request.response_sender = _response_sender(request, self._servable(info).stats, queue)
        task = asyncio.ensure_future(self._run(info, request))
        task.add_done_callback(finished)
        while True:
            response, final = await queue.get()
            if isinstance(response, InferResponse):
                response.final = final
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
        """Unload ``name`` (and the ensembles that call it; see :meth:`ModelManager.unload`)."""
        self._check_control()
        await self.manager.unload(name, unload_dependents)


def _response_sender(
    request: InferRequest, stats: ModelStats, queue: asyncio.Queue[tuple[InferResponse | InferdError | None, bool]]
) -> Callable[[InferResponse | InferdError | None, bool], None]:
    """The ``response_sender`` of a decoupled request: records each response's statistics and
    trace mark, then hands it to ``queue`` on the event loop (models call it from any thread)."""
    loop = asyncio.get_running_loop()
    put = queue.put_nowait
    state = [time.monotonic_ns(), 0]  # when the previous response was sent, responses so far

    def sender(response: InferResponse | InferdError | None, final: bool) -> None:
        now = time.monotonic_ns()
        start = request.context.get("compute_start_ns", state[0]) if state[1] == 0 else state[0]
        index = state[1]
        if response is None:
            stats.record_response(index, now - start, empty=True)
        else:
            stats.record_response(index, now - start, ok=not isinstance(response, InferdError))
            if index == 0:
                stats.observe_first_response(now - request.arrival_ns)
        trace = request.context.get(TRACE_KEY)
        if trace is not None:
            trace.mark("INFER_RESPONSE_COMPLETE", now)
        state[0], state[1] = now, index + 1
        loop.call_soon_threadsafe(put, (response, final))

    return sender


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
