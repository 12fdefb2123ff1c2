"""The scheduler contract and the instance machinery every scheduler shares.

A scheduler owns the queue between the data plane and a model version's instances. Each
:class:`InstanceRunner` wraps one backend :class:`~inferd.backend.Instance` with its own thread,
so ``execute`` never runs concurrently on one instance and never blocks the event loop.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.errors import InferdError, InternalError, Unavailable
from inferd.logging_settings import REQUEST_ID
from inferd.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from inferd.backend import Instance, InstanceSpec
    from inferd.model import ModelVersion


@dataclass(slots=True)
class Execution:
    """What one ``execute`` call returned, with its timing (monotonic ns)."""

    results: list[InferResponse | InferdError]
    start_ns: int
    end_ns: int


class InstanceRunner:
    """One backend instance and the thread it runs on.

    A plain thread fed by a ``SimpleQueue``: each job resolves an asyncio future through
    ``call_soon_threadsafe``, which costs less per call than ``run_in_executor``'s chained
    futures on this hot path.
    """

    def __init__(self, instance: Instance, spec: InstanceSpec) -> None:
        self.instance = instance
        self.spec = spec
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._work, name=f"inferd-{spec.name}", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, done = job
            try:
                result = fn()
            except BaseException as exc:  # handed to the waiting side
                done(None, exc)
            else:
                done(result, None)

    def _call(self, requests: Sequence[InferRequest]) -> Execution:
        # Lines the model logs while it runs one request carry that request's id.
        token = REQUEST_ID.set(requests[0].id if len(requests) == 1 else "")
        start = time.monotonic_ns()
        try:
            results = self.instance.execute(requests)
        except InferdError as exc:
            results = [exc] * len(requests)
        except Exception as exc:
            err = InternalError(f"instance '{self.spec.name}' failed: {type(exc).__name__}: {exc}")
            results = [err] * len(requests)
        finally:
            REQUEST_ID.reset(token)
        return Execution(list(results), start, time.monotonic_ns())

    async def execute(self, requests: Sequence[InferRequest]) -> Execution:
        """Run ``requests`` on this instance's thread; never raises for backend errors."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Execution] = loop.create_future()

        def done(result: Any, exc: BaseException | None) -> None:
            loop.call_soon_threadsafe(_resolve, future, result, exc)

        self._jobs.put((lambda: self._call(requests), done))
        execution = await future
        if not execution.results and not any(r.response_sender for r in requests):
            err = InternalError(f"instance '{self.spec.name}' returned no responses")
            execution.results = [err] * len(requests)
        elif execution.results and len(execution.results) != len(requests):
            err = InternalError(
                f"instance '{self.spec.name}' returned {len(execution.results)} responses "
                f"for {len(requests)} requests"
            )
            execution.results = [err] * len(requests)
        return execution

    def close(self) -> None:
        """Close the instance on its own thread, then stop the thread (blocking)."""
        finished: concurrent.futures.Future[None] = concurrent.futures.Future()

        def done(result: Any, exc: BaseException | None) -> None:
            if exc is None:
                finished.set_result(None)
            else:
                finished.set_exception(exc)

        self._jobs.put((self.instance.close, done))
        try:
            finished.result()
        finally:
            self._jobs.put(None)
            self._thread.join()


def _resolve(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


class InstancePool:
    """Free instances of a model version; ``acquire`` waits for one, first come first served.

    A released instance is handed straight to the oldest waiter, so a request that just arrived
    can never take it from one that has been waiting (``asyncio.Queue`` lets it, and under load
    that starves unlucky requests for seconds).
    """

    def __init__(self, runners: Sequence[InstanceRunner]) -> None:
        self.runners = list(runners)
        self._free: deque[InstanceRunner] = deque(self.runners)
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
                self.release(waiter.result())  # handed over just as we were cancelled
            else:
                self._waiters.remove(waiter)
            raise

    def release(self, runner: InstanceRunner) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(runner)
                return
        self._free.append(runner)

    def __len__(self) -> int:
        return len(self.runners)


class Scheduler(abc.ABC):
    """Queues a model version's requests onto its instances.

    Subclasses implement :meth:`_schedule`; the base class counts requests in flight so that
    :meth:`stop` can drain them (a reload lets in-flight requests finish on the old version).
    """

    def __init__(self, version: ModelVersion) -> None:
        self.version = version
        self._inflight = 0
        #: Requests handed to an instance and not yet done; subclasses keep it current so that
        #: :meth:`pending` (``nv_inference_pending_request_count``) is right.
        self.executing = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False

    async def enqueue(self, request: InferRequest) -> InferResponse:
        """Schedule one request and return its response (or raise its error)."""
        if self._stopping:
            raise Unavailable(f"model '{self.version.name}' version {self.version.version} is unloading")
        self._inflight += 1
        self._idle.clear()
        try:
            return await self._schedule(request)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    @abc.abstractmethod
    async def _schedule(self, request: InferRequest) -> InferResponse:
        """Run one request through the queue and an instance."""

    def inflight(self) -> int:
        """Requests accepted and not yet answered."""
        return self._inflight

    def pending(self) -> int:
        """Requests accepted and not yet executing (waiting in the queue)."""
        return max(0, self._inflight - self.executing)

    async def stop(self) -> None:
        """Refuse new requests, then wait until every accepted one is answered."""
        self._stopping = True
        await self._idle.wait()
