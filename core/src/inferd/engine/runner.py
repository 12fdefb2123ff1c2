"""Core owns execution: one :class:`Runner` per backend instance (schedulers see it as the
:class:`~inferd.contracts.scheduler.InstanceRunner` protocol).

The runner dispatches on the instance's type, once: a :class:`~inferd.contracts.backend.SyncInstance`
gets its own thread, so ``execute`` never runs concurrently on one instance and never blocks the
event loop for long (one that ``may_run_inline`` runs on the loop the executions its recent ones
predict to be quick); an :class:`~inferd.contracts.backend.AsyncInstance` gets no thread: its
coroutine runs on the loop, driven here so that a caller that leaves does not cancel it.
:meth:`Runner.run` is what schedulers call: it times the execution, records its statistics and
traces, counts the requests executing (``pending()``), and logs a backend's unexpected exception
once, with its traceback.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from inferd.contracts.backend import AsyncInstance, Outcome, RunOnThread, Started, SyncInstance
from inferd.contracts.errors import InferdError, InternalError, Unavailable
from inferd.contracts.log_context import REQUEST_ID, REQUEST_MODEL
from inferd.contracts.types import InferRequest

if TYPE_CHECKING:
    from inferd.contracts.backend import Instance, InstanceSpec
    from inferd.engine.rate_limiter import Gate
    from inferd.engine.recorder import Recorder

log = logging.getLogger(__name__)

_Job = tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]
#: An :class:`AsyncInstance`'s ``execute`` coroutine, once called.
_Execute = Coroutine[Any, Any, "Sequence[Outcome | None] | Started"]

#: An execution of an instance that ``may_run_inline`` runs on the event loop when its batch is
#: predicted to take at most this long (from the CPU time of its recent executions). Handing a
#: batch to the instance thread and its results back costs two thread wake-ups and a fight for
#: the GIL, and while the thread computes the loop dispatches smaller batches; on the loop the
#: requests that arrive meanwhile wait and join the next, larger batch. Measured with
#: benchmarks/vs_triton.py (A/B pairs, HTTP at c=64, 2 cores): the ONNX ``Add`` model (~50 µs a batch) +8-16% infer/s,
#: the ``mlp`` model (~0.6-1.3 ms a batch) +14-53% with one worker and up to +50% with two. Past
#: this limit the thread keeps the execution: a long one would hold up every other request of
#: the worker, and instances whose compute could overlap would run one at a time.
INLINE_LIMIT_NS = 2_000_000
#: Weight of the newest execution in the running averages the prediction uses.
_ESTIMATE_WEIGHT = 0.125


@dataclass(slots=True)
class Execution:
    """What one ``execute`` call returned, with its timing (monotonic ns). ``waited_ns``: how long
    the batch waited inside a pipelined instance behind an earlier one (:class:`Started`)."""

    results: Sequence[Outcome | None]
    start_ns: int
    end_ns: int
    waited_ns: int = 0


class Runner:
    """One backend instance, the thread it runs on, and the recording of its executions.

    A :class:`SyncInstance` runs on a plain thread fed by a ``SimpleQueue``: each job resolves an
    asyncio future through ``call_soon_threadsafe``, which costs less per call than
    ``run_in_executor``'s chained futures on this hot path. An :class:`AsyncInstance` gets no
    thread: its ``execute`` is called on the event loop.
    """

    def __init__(self, instance: Instance, spec: InstanceSpec, recorder: Recorder, gate: Gate | None = None) -> None:
        self.instance = instance
        self.spec = spec
        self.recorder = recorder
        #: The rate limiter's hold on this instance (``--rate-limit=execution_count`` and resources
        #: in its ``instance_group.rate_limiter``); ``None``: it runs as soon as it is free.
        self.gate = gate
        #: Requests handed to this instance and not yet answered (``pending()`` leaves them out).
        self.executing = 0
        if not isinstance(instance, (SyncInstance, AsyncInstance)):
            raise TypeError(
                f"instance '{spec.name}' is a {type(instance).__qualname__}, which is neither a SyncInstance nor an "
                "AsyncInstance; a backend's instance subclasses one of them (inferd.api)"
            )
        #: The instance's coroutine function when it is an :class:`AsyncInstance` (runs on the loop).
        self._async = instance.execute if isinstance(instance, AsyncInstance) else None
        if self._async is not None and not inspect.iscoroutinefunction(self._async):
            raise TypeError(
                f"instance '{spec.name}' ({type(instance).__qualname__}) is an AsyncInstance whose "
                "execute is not an 'async def'"
            )
        #: How many batches may execute at once (``AsyncInstance.pipeline_depth``; the instance orders them).
        self.depth = max(1, instance.pipeline_depth) if isinstance(instance, AsyncInstance) else 1
        self._turn = _Turns(self.depth)
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        #: The execution on the thread now: its future, what to call when it ends, how many
        #: requests it has, when it began.
        self._current: tuple[asyncio.Future[Execution], Callable[[], None] | None, int, float] | None = None
        #: Set by :meth:`abandon`: the thread is stuck in an execution and left behind.
        self._abandoned = False
        #: Whether executions predicted to be quick run on the loop (``SyncInstance.may_run_inline``).
        self._inline = isinstance(instance, SyncInstance) and instance.may_run_inline
        #: Running averages of recent executions: their CPU time (ns; ``None``: none ran yet) and
        #: how many requests each had.
        self._recent_ns: float | None = None
        self._recent_size = 1.0
        if isinstance(instance, SyncInstance):
            self._thread = threading.Thread(target=self._work, name=f"inferd-{spec.name}", daemon=True)
            self._thread.start()

    @property
    def name(self) -> str:
        """The instance's name (``<group name>_<index>``)."""
        return self.spec.name

    async def run(self, requests: Sequence[InferRequest]) -> list[Outcome]:
        """Execute one batch on this instance and record it; one response or error per request.

        Never raises for a backend's failure: a failed execution gives every request its error.
        Batches handed over while one executes wait their turn, in order. A caller cancelled
        while its batch executes leaves at once; the instance stays busy (its turn, its rate-limiter
        resources) until the execution ends.
        """
        gate = self.gate
        count = len(requests)
        if not self._turn.take():
            await self._turn.wait()  # a batch past the depth waits here, still pending, its queue time running
        if self._abandoned:
            self._turn.release()
            return [self._unloading()] * count
        if gate is not None:  # the rate limiter's wait is queue time too (as Triton counts it)
            try:
                await gate.acquire()
            except BaseException:
                self._turn.release()
                raise
        dequeued = time.monotonic_ns()
        for request in requests:
            if request.response_sender is not None:  # decoupled: the data plane times the first response
                request.context["compute_start_ns"] = dequeued
        self.executing += count

        def ended() -> None:  # on the loop, once the execution is over (not when its caller left)
            self.executing -= count
            self._turn.release()
            if gate is not None:
                gate.release()

        execution = await self.execute(requests, ended)
        results: Sequence[Outcome | None] = execution.results or [None] * len(requests)
        waited = execution.waited_ns  # a wait inside a pipelined instance is queue time, as it would be here
        return self.recorder.executed(
            requests, results, dequeued + waited, execution.start_ns + waited, execution.end_ns, time.monotonic_ns()
        )

    async def execute(self, requests: Sequence[InferRequest], then: Callable[[], None] | None = None) -> Execution:
        """Run ``requests`` on this instance's thread (an :class:`AsyncInstance`, or a quick
        execution of one that ``may_run_inline``: here, on the loop), unrecorded (model warmup uses
        it); ``then`` is called on the event loop once they ran."""
        if self._async is not None:
            execution = await self._execute_async(self._async, requests, then)
        elif self._inline and self._may_inline(requests):
            try:
                try:
                    execution = self._call(requests, on_loop=True)
                except RunOnThread:  # it must wait for the server: the same batch, on its thread
                    execution = await self._on_thread(requests, None)
            finally:
                if then is not None:
                    then()
        else:
            execution = await self._on_thread(requests, then)
        count = len(execution.results)
        if count == 0 and not any(r.response_sender for r in requests):
            execution.results = self._broken(requests, "returned no responses")
        elif count and count != len(requests):
            execution.results = self._broken(requests, f"returned {count} responses for {len(requests)} requests")
        return execution

    async def _execute_async(
        self,
        execute: Callable[[Sequence[InferRequest]], _Execute],
        requests: Sequence[InferRequest],
        then: Callable[[], None] | None,
    ) -> Execution:
        """Run an :class:`AsyncInstance`'s coroutine in the caller's task: the part before its
        first wait right away (one that never waits costs no task), then each wait through
        :class:`_Waiting`, so that the caller leaving (cancelled) does not cancel the execution:
        it runs on in a task of its own, and the instance stays busy until it ends."""
        execution = Execution((), time.monotonic_ns(), 0)
        count = len(requests)
        token = REQUEST_ID.set(requests[0].id if count == 1 else "")
        model = REQUEST_MODEL.set(self.recorder.stats.name)
        try:
            coro = execute(requests)
            done, value = self._step(coro, count)
        except Exception as exc:  # raised before its coroutine began (not an async def)
            done, value = True, self._failed(exc, count)
        finally:
            REQUEST_ID.reset(token)
            REQUEST_MODEL.reset(model)
        while not done:
            try:
                await _Waiting(value)
            except asyncio.CancelledError:  # our caller left: the execution runs on without it
                rest = asyncio.get_running_loop().create_task(self._finish(coro, value, count))
                rest.add_done_callback(functools.partial(_end, execution, then))
                raise
            done, value = self._step(coro, count)
        _end(execution, then)
        if type(value) is Started:  # the batch waited inside the instance behind another
            start_ns = value.start_ns
            if type(start_ns) is int and start_ns > execution.start_ns:
                execution.waited_ns = min(start_ns, execution.end_ns) - execution.start_ns
            value = value.results
        try:
            execution.results = list(value)
        except TypeError as exc:
            execution.results = self._failed(exc, count)
        return execution

    def _step(self, coro: _Execute, count: int) -> tuple[bool, Any]:
        """Run an execution's coroutine to its next wait: ``(False, what it waits on)``, or
        ``(True, its result)`` once it returned (or raised: each request's error)."""
        try:
            waits_on = coro.send(None)
        except StopIteration as returned:
            return True, returned.value
        except asyncio.CancelledError:  # a wait of the instance's own was cancelled
            return True, [InternalError(f"instance '{self.spec.name}' cancelled its execution")] * count
        except InferdError as exc:
            return True, [exc] * count
        except Exception as exc:
            return True, self._failed(exc, count)
        if waits_on is None or getattr(waits_on, "_asyncio_future_blocking", None) is True:
            return False, waits_on
        coro.close()
        return True, self._failed(RuntimeError(f"execute awaited {waits_on!r}, which is not an asyncio future"), count)

    async def _finish(self, coro: _Execute, waits_on: object, count: int) -> None:
        """The rest of an execution whose caller left (in a task of its own); its result is dropped."""
        done = False
        while not done:
            await _Waiting(waits_on)
            done, waits_on = self._step(coro, count)

    def _may_inline(self, requests: Sequence[InferRequest]) -> bool:
        """Whether this batch runs on the loop: the instance allows it now, it is predicted quick, and
        its inputs hold at most the instance's ``inline_max_bytes`` (asked only of a ``SyncInstance``)."""
        instance = cast("SyncInstance", self.instance)
        if not instance.may_run_inline or not self._quick(len(requests)):
            return False
        limit = instance.inline_max_bytes
        if limit:
            total = 0
            for request in requests:
                for tensor in request.inputs.values():
                    total += tensor.data.nbytes
            return total <= limit
        return True

    def _quick(self, size: int) -> bool:
        """Whether a batch of ``size`` requests is predicted to run within :data:`INLINE_LIMIT_NS`:
        as long as recent executions, or longer in proportion when it has more requests than they
        had (an execution's fixed cost makes time per request a poor guide for small batches)."""
        recent = self._recent_ns
        return recent is not None and recent * max(1.0, size / self._recent_size) <= INLINE_LIMIT_NS

    def _learn(self, ns: int, size: int) -> None:
        """One execution of ``size`` requests took ``ns`` of CPU (called where it ran)."""
        recent = self._recent_ns
        if recent is None:
            self._recent_ns, self._recent_size = float(ns), float(size)
            return
        self._recent_ns = recent + (ns - recent) * _ESTIMATE_WEIGHT
        self._recent_size += (size - self._recent_size) * _ESTIMATE_WEIGHT

    async def _on_thread(self, requests: Sequence[InferRequest], then: Callable[[], None] | None) -> Execution:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Execution] = loop.create_future()

        def done(result: Any, exc: BaseException | None) -> None:
            loop.call_soon_threadsafe(self._ended, future, result, exc)

        self._current = (future, then, len(requests), time.monotonic())
        self._jobs.put((lambda: self._call(requests), done))
        return await future

    def _ended(self, future: asyncio.Future[Execution], result: Any, exc: BaseException | None) -> None:
        """An execution on the thread is over (on the loop): free the instance, answer its caller
        (unless it left, or :meth:`abandon` answered it already)."""
        current = self._current
        if current is None or current[0] is not future:  # abandoned: its end was handled then
            return
        self._current = None
        if current[1] is not None:
            current[1]()
        if future.done():
            return
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)

    def abandon(self) -> float | None:
        """Give up on this instance (an unload that waited long enough): the execution it is stuck
        in fails its requests (UNAVAILABLE) and gives back its turn and rate-limiter resources, later
        batches fail at once, and :meth:`close` leaves the thread behind. Returns how long the
        execution has run (seconds), or None when none was running."""
        self._abandoned = True
        current, self._current = self._current, None
        if current is None:
            return None
        future, then, count, since = current
        if not future.done():
            now = time.monotonic_ns()
            future.set_result(Execution([self._unloading()] * count, now, now))
        if then is not None:
            then()
        return time.monotonic() - since

    def _unloading(self) -> Unavailable:
        return Unavailable(
            f"model '{self.recorder.stats.name}' is unloading: its instance '{self.spec.name}' "
            f"did not finish executing within the unload timeout and was abandoned"
        )

    def _call(self, requests: Sequence[InferRequest], on_loop: bool = False) -> Execution:
        # Lines the model logs while it runs one request carry that request's id.
        token = REQUEST_ID.set(requests[0].id if len(requests) == 1 else "")
        model = REQUEST_MODEL.set(self.recorder.stats.name)
        start = time.monotonic_ns()
        cpu = time.thread_time_ns() if self._inline else 0
        instance: SyncInstance = self.instance  # type: ignore[assignment]  # only a SyncInstance comes here
        try:
            results: list[Outcome] = list(instance.execute(requests))
        except InferdError as exc:  # raised on purpose (a bad input...): the client's error only
            results = [exc] * len(requests)
        except RunOnThread as exc:
            if on_loop:
                raise
            results = self._failed(exc, len(requests))
        except Exception as exc:
            results = self._failed(exc, len(requests))
        finally:
            REQUEST_ID.reset(token)
            REQUEST_MODEL.reset(model)
        if self._inline:  # CPU time, not wall: on the instance thread, waits for the GIL would count
            self._learn(time.thread_time_ns() - cpu, len(requests))
        return Execution(results, start, time.monotonic_ns())

    def _failed(self, exc: Exception, count: int) -> list[Outcome]:
        """An unexpected exception of the backend: logged once with its traceback, each request's error."""
        name, version = self.recorder.stats.name, self.recorder.stats.version
        log.error("model '%s' version %s instance '%s': execute failed", name, version, self.spec.name, exc_info=exc)
        return [InternalError(f"instance '{self.spec.name}' failed: {type(exc).__name__}: {exc}")] * count

    def _broken(self, requests: Sequence[InferRequest], what: str) -> list[Outcome]:
        stats = self.recorder.stats
        log.error("model '%s' version %s instance '%s': execute %s", stats.name, stats.version, self.spec.name, what)
        return [InternalError(f"instance '{self.spec.name}' {what}")] * len(requests)

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

    def close(self) -> None:
        """Close the instance on its own thread, then stop the thread (blocking; an
        :class:`AsyncInstance` closes on the calling thread). An abandoned instance is not closed: its thread
        is stuck in ``execute``, and is left to end (or not) on its own."""
        if self.gate is not None:
            self.gate.close()
        if self._abandoned:
            self._jobs.put(None)  # should the execution ever return, the thread ends
            return
        if self._thread is None:
            self.instance.close()
            return
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


def _end(execution: Execution, then: Callable[[], None] | None, _task: object = None) -> None:
    """``execution`` is over (whether or not its caller waited): the instance is free again."""
    execution.end_ns = time.monotonic_ns()
    if then is not None:
        then()


class _Turns:
    """How many batches an instance may hold at once (its depth): ``asyncio.Semaphore``'s rules,
    first come first served, without its coroutine and generator on the way through when a turn
    is free (:meth:`take`, a plain call; :meth:`wait` only when none is)."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, turns: int) -> None:
        self._free = turns
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take(self) -> bool:
        """Take a turn if one is free and nobody waits for one; False: :meth:`wait` for it."""
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Wait for a turn, handed over by :meth:`release` in the order the waiters came."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            else:  # handed a turn just as the caller was cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        """Give a turn back: to the first waiter still waiting, or to the free ones."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class _Waiting:
    """Awaits what an instance's coroutine waits on (``waits_on``: the future it yielded, or
    ``None`` for a bare yield: one loop turn), as ``asyncio.shield`` would, without its second
    future and extra event-loop turn: the awaiting task is woken by the future itself. Cancelling
    the task wakes it at once with ``CancelledError`` and leaves the future alone (the instance
    finishes). The future's own result or error is the instance's to read, when resumed."""

    __slots__ = ("_asyncio_future_blocking", "_cancelled", "_future", "_wakeup")

    def __init__(self, waits_on: object) -> None:
        self._future: asyncio.Future[Any] | None = waits_on  # type: ignore[assignment]
        self._asyncio_future_blocking = False
        self._cancelled: str | None = None
        self._wakeup: tuple[Callable[[Any], None], Any] | None = None

    def __await__(self) -> Any:
        future = self._future
        if future is None:
            yield  # a bare yield of the instance's: the task runs again on the next loop turn
            return
        future._asyncio_future_blocking = False  # as a task does with the future it waits on
        if not future.done():
            self._asyncio_future_blocking = True
            yield self  # the task calls add_done_callback, and cancel when it is cancelled
        self.result()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        assert self._future is not None
        return self._future.get_loop()

    def add_done_callback(self, fn: Callable[[Any], None], *, context: Any = None) -> None:
        assert self._future is not None
        self._wakeup = (fn, context)
        self._future.add_done_callback(self._done, context=context)

    def _done(self, _future: object) -> None:
        """The future is done: wake the task with this object, whose result is no error of the future's."""
        assert self._wakeup is not None
        self._wakeup[0](self)

    def cancel(self, msg: Any = None) -> bool:
        wakeup, future = self._wakeup, self._future
        if wakeup is None or future is None or future.done() or self._cancelled is not None:
            return False
        self._cancelled = "" if msg is None else str(msg)
        future.remove_done_callback(self._done)
        future.get_loop().call_soon(wakeup[0], self, context=wakeup[1])
        return True

    def result(self) -> None:
        if self._cancelled is not None:
            raise asyncio.CancelledError(self._cancelled or None)
