"""Runs inference requests on the versions the model table serves.

The router runs a request once a frontend decoded it (frontends reach it through the data
plane), and it is how models call other models: ensembles from the event loop, Python models
(Triton's BLS) from their instance threads. It sets the request id for log lines and samples
traces.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, cast

from inferd.contracts.errors import (
    ErrorKind,
    InferdError,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unsupported,
)
from inferd.contracts.log_context import REQUEST_ID, REQUEST_MODEL
from inferd.contracts.trace import TRACE_KEY
from inferd.contracts.types import PICKED, InferRequest, InferResponse
from inferd.engine.shadow_copies import ShadowCopies
from inferd.engine.thread_bridge import ThreadStream, response_sender
from inferd.engine.trace import RequestTrace, Tracer

if TYPE_CHECKING:
    from inferd import config as cfg
    from inferd.contracts.model_info import ModelInfo, Servable
    from inferd.engine.health import ServerHealth
    from inferd.engine.model_table import ModelTable
    from inferd.engine.stats import ModelStats

log = logging.getLogger(__name__)


class Router:
    """Resolves, runs and streams requests: the server's :class:`~inferd.lifecycle.builder.ServerModels`."""

    def __init__(self, table: ModelTable, tracer: Tracer, health: ServerHealth) -> None:
        self.table = table
        self.tracer = tracer
        self.health = health
        #: Weighted versions by model name (the table's; empty when no model has a split).
        self.splits = table.traffic.splits
        #: Copies of answered requests run on shadow versions (docs/traffic.md, "Shadow traffic").
        self.shadows = ShadowCopies(table, self._run)
        #: ``--server-timing``: every request is timed as if it asked ``"timing": true``.
        self.time_every_request = False

    def resolve(self, name: str, version: str = "") -> ModelInfo:
        """The version that serves a request for ``name``/``version`` now; pass it to :meth:`infer`
        or :meth:`stream` so the request runs on the version it was decoded for. With
        ``--model-load-on-demand``, a model that serves no version resolves to a placeholder:
        :meth:`infer` and :meth:`stream` load it first."""
        try:
            return self.table.resolve(name, version).info
        except NotFound:
            pending = self.table.on_demand.pending(name, version) if self.table.on_demand is not None else None
            if pending is None:
                raise
            return pending

    def step_key(self, namespace: str, name: str) -> str:
        return self.table.step_key(namespace, name)

    def resolve_key(self, key: str, version: str = "") -> ModelInfo:
        """:meth:`resolve` for a model key (``ModelCaller.step_key``): an ensemble's step."""
        return self.table.resolve_key(key, version).info

    def model_config(self, key: str, version: str = "") -> cfg.ModelConfig:
        return self.table.resolve_key(key, version).config

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.table.index(ready_only)

    def model_labels(self, key: str, version: str = "") -> dict[str, list[str]]:
        return self.table.resolve_key(key, version).labels()

    async def infer(self, request: InferRequest, model: ModelInfo | None = None) -> InferResponse:
        """Run one request to completion on ``model`` (from :meth:`resolve`; resolved from the
        request when not given). Decoupled models must go through :meth:`stream`."""
        info = model or self.resolve(request.model_name, request.model_version)
        if self.table.on_demand is not None and info.handle() is None:
            info = await self.table.on_demand.ready(info.name, request.model_version)
        if info.decoupled:
            raise Unsupported(
                f"model '{info.name}' is decoupled (it may send any number of responses): "
                f"call it through gRPC ModelStreamInfer or the generate_stream route"
            )
        if self.time_every_request or (request.parameters and TIMING in request.parameters):
            return await self._timed(info, request)
        if self.splits and info.name in self.splits:
            if not request.model_version:
                return await self._run_split(self._pick(info, request), request)
            if PICKED in request.context:  # the caller picked through the split: judged all the same
                return await self._run_split(info, request)
        return await self._run(info, request)

    async def _timed(self, info: ModelInfo, request: InferRequest) -> InferResponse:
        """:meth:`infer` for a request asking ``"timing": true`` (every request with
        ``--server-timing``): its queue and compute times, as Triton's statistics split them, in
        the response's parameters (docs/traffic.md)."""
        wanted = request.parameters.pop(TIMING, True) if self.time_every_request else request.parameters.get(TIMING)
        if wanted is not True:
            if wanted is False:
                request.parameters.pop(TIMING, None)
                return await self._untimed(info, request)
            raise InvalidArgument(f"model '{info.name}': request parameter '{TIMING}' must be true or false")
        request.parameters.pop(TIMING, None)  # the model does not see it
        timing = request.context.get(TRACE_KEY)  # --access-log's, when on
        if not isinstance(timing, RequestTiming):
            timing = RequestTiming(request.arrival_ns)
            request.context.setdefault(TRACE_KEY, timing)
        response = await self._untimed(info, request)
        response.parameters.update(timing.parameters(time.monotonic_ns()))
        return response

    async def _untimed(self, info: ModelInfo, request: InferRequest) -> InferResponse:
        """:meth:`infer` past its timing check (the same steps: :meth:`infer` has them inline)."""
        if self.splits and info.name in self.splits:
            if not request.model_version:
                return await self._run_split(self._pick(info, request), request)
            if PICKED in request.context:
                return await self._run_split(info, request)
        return await self._run(info, request)

    def _pick(self, info: ModelInfo, request: InferRequest) -> ModelInfo:
        """The version the model's traffic split picks for a request naming none (``info`` when
        the picked version is not serving)."""
        version = self.splits[info.name].pick(request.id)
        record = self.table.by_name.get(info.name)
        mv = record.serving.get(version) if record is not None else None
        return mv.info if mv is not None else info

    async def _run_split(self, info: ModelInfo, request: InferRequest) -> InferResponse:
        """:meth:`_run` on the version the split picked; its outcome feeds the canary policy
        (a cancelled request, or one whose client went away, says nothing of the version)."""
        start = time.perf_counter_ns()
        try:
            response = await self._run(info, request)
        except InferdError as exc:
            if exc.kind is not ErrorKind.CANCELLED:
                self._observe(info, False, start)
            raise
        self._observe(info, True, start)
        split = self.splits.get(info.name)
        if split is not None and split.shadow is not None:
            self.shadows.copy(split, info, request, response)
        return response

    def _observe(self, info: ModelInfo, ok: bool, start: int, end: int = 0) -> None:
        split = self.splits.get(info.name)
        if split is not None and split.observe(info.version, ok, (end or time.perf_counter_ns()) - start):
            self.table.traffic.decided(info.name)

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
        token, model = REQUEST_ID.set(request.id), REQUEST_MODEL.set(info.name)
        try:
            return await self._servable(info).infer(request)
        except InferdError as exc:
            log.debug("model '%s' version %d: request failed: %s", info.name, info.version, exc.message)
            raise
        finally:
            REQUEST_ID.reset(token)
            REQUEST_MODEL.reset(model)

    async def _run_traced(self, info: ModelInfo, request: InferRequest, trace: RequestTrace) -> InferResponse:
        token, model = REQUEST_ID.set(request.id), REQUEST_MODEL.set(info.name)
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
            REQUEST_MODEL.reset(model)

    async def stream(
        self, request: InferRequest, model: ModelInfo | None = None
    ) -> AsyncIterator[InferResponse | InferdError]:
        """Yield every response of a request on ``model`` (resolved from the request when not
        given): one for ordinary models, 0..N for decoupled ones."""
        info = model or self.resolve(request.model_name, request.model_version)
        if self.table.on_demand is not None and info.handle() is None:
            info = await self.table.on_demand.ready(info.name, request.model_version)
        split = (
            bool(self.splits) and info.name in self.splits and (not request.model_version or PICKED in request.context)
        )
        if split and not request.model_version:
            info = self._pick(info, request)
        if not info.decoupled:
            try:
                yield await (self._run_split(info, request) if split else self._run(info, request))
            except InferdError as exc:
                yield exc
            return
        if split:
            async for item in self._judged_stream(info, request):
                yield item
            return
        async for item in self._stream_decoupled(info, request):
            yield item

    async def _judged_stream(
        self, info: ModelInfo, request: InferRequest
    ) -> AsyncIterator[InferResponse | InferdError]:
        """A decoupled request on the version the split picked: the canary policy judges its time to
        the first response (an LLM's time to first token) and whether any response was an error;
        a stream its caller closed early says nothing of the version."""
        start = time.perf_counter_ns()
        first = 0
        ok = True
        async for item in self._stream_decoupled(info, request):
            if not first:
                first = time.perf_counter_ns()
            if isinstance(item, InferdError) and item.kind is not ErrorKind.CANCELLED:
                ok = False
            yield item
        self._observe(info, ok, start, first)

    async def _stream_decoupled(
        self, info: ModelInfo, request: InferRequest
    ) -> AsyncIterator[InferResponse | InferdError]:
        """Run ``request`` with a response sender and yield what the model sends, up to the final one."""
        queue: asyncio.Queue[tuple[InferResponse | InferdError | None, bool]] = asyncio.Queue()

        def finished(task: asyncio.Future[InferResponse]) -> None:
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                queue.put_nowait((exc if isinstance(exc, InferdError) else InferdError(str(exc)), True))

        stats = cast("ModelStats", self._servable(info).stats)  # the engine's versions count in ModelStats
        request.response_sender = response_sender(request, stats, queue)
        task = asyncio.ensure_future(self._run(info, request))
        task.add_done_callback(finished)
        final = False
        try:
            while not final:
                response, final = await queue.get()
                if isinstance(response, InferResponse):
                    response.final = final
                if response is not None:
                    yield response
        finally:
            if not final:  # the caller closed the stream early: the model may stop generating
                request.cancelled = True

    def infer_from_thread(self, request: InferRequest) -> InferResponse:
        """Blocking :meth:`infer` for code on a worker thread (Python models calling models)."""
        return asyncio.run_coroutine_threadsafe(self._infer_for_thread(request), self._loop()).result()

    async def _infer_for_thread(self, request: InferRequest) -> InferResponse:
        info = self.resolve(request.model_name, request.model_version)
        if self.table.on_demand is not None and info.handle() is None:
            info = await self.table.on_demand.ready(info.name, request.model_version)
        if info.decoupled:
            raise Unsupported(
                f"Model {info.name} is using the decoupled. The current BLS request call doesn't support models "
                "using the decoupled transaction policy. Please use 'decoupled=True' argument to the 'exec' or "
                "'async_exec' calls for decoupled models."
            )
        return await self.infer(request, info)

    def stream_from_thread(self, request: InferRequest) -> Iterator[InferResponse | InferdError]:
        """:meth:`stream` for code on a worker thread: started now, each response as it comes.

        Raises :class:`~inferd.contracts.errors.InferdError` when the model cannot be resolved."""

        def open_stream() -> AsyncIterator[InferResponse | InferdError]:
            return self.stream(request, self.resolve(request.model_name, request.model_version))

        return ThreadStream(open_stream, self._loop())

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self.health.loop
        if loop is None:
            raise Unavailable("the server is not running")
        return loop


#: The request parameter that asks for the request's timings in its response.
TIMING = "timing"


class RequestTiming:
    """The marks the recorder makes on a traced request (``context[TRACE_KEY]``), kept for one
    request that asked for its timings: queue, compute input, infer and output, in microseconds."""

    __slots__ = ("arrival", "marks")

    def __init__(self, arrival_ns: int) -> None:
        self.arrival = arrival_ns
        self.marks: tuple[int, int, int, int] | None = None

    def mark(self, name: str, ns: int | None = None) -> None:
        """Triton's trace marks: none is needed beyond :meth:`compute`'s."""

    def compute(self, start_ns: int, input_end_ns: int, output_start_ns: int, end_ns: int) -> None:
        """The four compute timestamps of the execution (the first one ends the queue)."""
        self.marks = (start_ns, input_end_ns, output_start_ns, end_ns)

    def parameters(self, now_ns: int) -> dict[str, int]:
        """``timing_*_us`` response parameters (``timing_total_us`` always; the others once a
        scheduler ran the request on an instance)."""
        out = {"timing_total_us": (now_ns - self.arrival) // 1000}
        if self.marks is not None:
            start, input_end, output_start, end = self.marks
            out["timing_queue_us"] = max(0, start - self.arrival) // 1000
            out["timing_compute_input_us"] = (input_end - start) // 1000
            out["timing_compute_infer_us"] = (output_start - input_end) // 1000
            out["timing_compute_output_us"] = (end - output_start) // 1000
        return out
