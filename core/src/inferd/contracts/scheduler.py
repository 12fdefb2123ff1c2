"""The scheduler contract: what a scheduler factory receives and what a scheduler implements.

A scheduler decides *what runs where and when*: it queues a model version's requests and hands
batches to the version's :class:`~inferd.contracts.runner.InstanceRunner` objects. Core does the rest: the
runners time every execution and record its statistics and traces, and :meth:`Scheduler.enqueue`
marks QUEUE_START, counts requests in flight (``pending()``) and drains them on unload. Like
Triton's scheduler interface (Enqueue / InflightInferenceCount / Stop), a scheduler records nothing.
"""

from __future__ import annotations

import abc
import asyncio
import time
import warnings
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from inferd.contracts.errors import InferdError, Unavailable
from inferd.contracts.recorder import Recorder
from inferd.contracts.runner import InstanceRunner
from inferd.contracts.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from inferd.config import ModelConfig
    from inferd.contracts.model_info import ModelInfo


class ModelCaller(Protocol):
    """Calls the server's other models (an ensemble's steps). The server's router is one.

    A step's model is named by its *key*: :meth:`step_key` says which model an ensemble's step
    name means (the model's name, or with ``--model-namespacing`` the one in the ensemble's own
    repository first), once, when the ensemble loads.
    """

    def step_key(self, namespace: str, name: str) -> str:
        """The key of the model an ensemble found in ``namespace`` calls by ``name``; raises when
        the name is ambiguous."""
        ...

    def resolve_key(self, key: str, version: str = "") -> ModelInfo:
        """The version that serves the model ``key`` now (raises when none is ready)."""
        ...

    async def infer(self, request: InferRequest, model: ModelInfo | None = None) -> InferResponse:
        """Run ``request`` on ``model`` (from :meth:`resolve_key`)."""
        ...

    def stream(
        self, request: InferRequest, model: ModelInfo | None = None
    ) -> AsyncIterator[InferResponse | InferdError]:
        """Every response of a request: one for ordinary models, 0..N for decoupled ones."""
        ...

    def model_config(self, key: str, version: str = "") -> ModelConfig:
        """The config of the version that would serve the model ``key``; raises when none is ready."""
        ...

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every model in the repositories (``{"name": ...}`` entries and their versions)."""
        ...

    def model_labels(self, key: str, version: str = "") -> dict[str, list[str]]:
        """The class labels (``label_filename``) of the version that would serve the model ``key``, by output."""
        ...


@dataclass(frozen=True, slots=True)
class SchedulerContext:
    """What a scheduler factory receives: the model version it schedules and its instances."""

    name: str
    version: int
    config: ModelConfig
    #: One per instance: ``await runner.run(batch)`` executes and records a batch.
    runners: Sequence[InstanceRunner]
    #: Core's recording for this version; :class:`Scheduler` uses it, a subclass never needs to.
    recorder: Recorder
    #: ``<repository>/<model>``: where config-relative files (initial_state data) live.
    model_dir: Path | None = None
    #: Calls other models (ensembles); ``None`` where the server offers none (tests).
    models: ModelCaller | None = None
    #: With ``--model-namespacing``, the repository the model was found in ("" otherwise).
    namespace: str = ""

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size


class Rejected(Unavailable):
    """A request the scheduler refused or dropped from its queue (queue full, timeout expired).

    Raise it from :meth:`Scheduler.schedule`: core counts it as Triton's REJECTED failure.
    """


class Scheduler(abc.ABC):
    """Queues a model version's requests onto its instances.

    Subclasses implement :meth:`schedule` and run requests with ``runner.run(batch)``; the base
    class marks QUEUE_START, counts requests in flight so that :meth:`stop` can drain them (a reload
    lets in-flight requests finish on the old version), and counts :class:`Rejected` requests.
    A subclass that implements only the old name ``_schedule`` still works until the next release,
    with one :class:`DeprecationWarning` when it is defined.
    """

    #: True for a scheduler that answers by calling other models instead of running instances
    #: (an ensemble): core then records each request as one execution, and no QUEUE_START (its
    #: steps are queued by their own models).
    composing: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        legacy = _legacy_schedule(cls)
        if legacy is not None:
            warnings.warn(
                f"scheduler {cls.__module__}.{cls.__qualname__} implements _schedule(), which is now "
                "schedule(); rename it (_schedule stops working in the next release)",
                DeprecationWarning,
                stacklevel=3,  # the class statement (type.__new__ and ABCMeta.__new__ in between)
            )
            cls.schedule = legacy  # type: ignore[method-assign]

    def __init__(self, context: SchedulerContext) -> None:
        self.context = context
        self._recorder = context.recorder
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False

    async def enqueue(self, request: InferRequest) -> InferResponse:
        """Schedule one request and return its response (or raise its error)."""
        if self._stopping:
            raise Unavailable(f"model '{self.context.name}' version {self.context.version} is unloading")
        self._inflight += 1
        self._idle.clear()
        try:
            if self.composing:
                return await self._compose(request)
            self._recorder.queued(request)
            return await self.schedule(request)
        except Rejected:
            self._recorder.rejected(request)
            raise
        except asyncio.CancelledError:  # the client went away: a model polling is_cancelled() may stop
            request.cancelled = True
            raise
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _compose(self, request: InferRequest) -> InferResponse:
        started = time.monotonic_ns()
        try:
            response = await self.schedule(request)
        except InferdError:
            self._recorder.composition_failed(request)
            raise
        self._recorder.composed(request, started)
        return response

    @abc.abstractmethod
    async def schedule(self, request: InferRequest) -> InferResponse:
        """Run one request through the queue and an instance; return its response or raise its error.

        Core calls it through :meth:`enqueue`: queue the request, run it alone or in a batch with
        ``await runner.run(batch)`` on one of ``self.context.runners``, and return the request's
        outcome. Raise :class:`Rejected` for a request the queue refuses or drops.
        """

    def output_labels(self) -> dict[str, list[str]]:
        """Class labels this scheduler supplies for outputs whose config names no ``label_filename``
        (an ensemble's: those of the step outputs they come from); read once at load."""
        return {}

    def inflight(self) -> int:
        """Requests accepted and not yet answered."""
        return self._inflight

    def pending(self) -> int:
        """Requests accepted and not yet executing (waiting in the queue)."""
        if self.composing:
            return 0
        return max(0, self._inflight - sum(r.executing for r in self.context.runners))

    async def stop(self) -> None:
        """Refuse new requests, then wait until every accepted one is answered."""
        self._stopping = True
        await self._idle.wait()


def _legacy_schedule(cls: type[Scheduler]) -> Any:
    """The ``_schedule`` of a subclass written before the method was public, or ``None``: the
    first class in ``cls``'s MRO (below :class:`Scheduler`) that defines either name defines only it."""
    for klass in cls.__mro__:
        if klass is Scheduler:
            return None
        if "schedule" in vars(klass):
            return None
        if "_schedule" in vars(klass):
            return vars(klass)["_schedule"]
    return None


class InstancePool:
    """Free instances of a model version; ``acquire`` waits for one, first come first served.

    An instance with a ``depth`` of N (``Instance.pipeline_depth``) is free N times over; each
    instance's first turn is handed out before any instance's second.

    A released instance is handed straight to the oldest waiter, so a request that just arrived
    can never take it from one that has been waiting (``asyncio.Queue`` lets it, and under load
    that starves unlucky requests for seconds).
    """

    def __init__(self, runners: Sequence[InstanceRunner]) -> None:
        self.runners = list(runners)
        depth = max((getattr(r, "depth", 1) for r in self.runners), default=1)
        self._free: deque[InstanceRunner] = deque(
            r for turn in range(depth) for r in self.runners if turn < getattr(r, "depth", 1)
        )
        self._waiters: deque[asyncio.Future[InstanceRunner]] = deque()

    async def acquire(self) -> InstanceRunner:
        if self._free and not self._waiters:
            return self._free.popleft()
        waiter: asyncio.Future[InstanceRunner] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed over just as we were cancelled: pass it on
            elif waiter in self._waiters:  # a release() since the cancel has dropped it already
                self._waiters.remove(waiter)
            raise

    def release(self, runner: InstanceRunner) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(runner)
                return
        self._free.append(runner)

    async def run(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        """``runner.run(requests)`` on the next free instance."""
        runner = await self.acquire()
        try:
            return await runner.run(requests)
        finally:
            self.release(runner)

    def __len__(self) -> int:
        return len(self.runners)
