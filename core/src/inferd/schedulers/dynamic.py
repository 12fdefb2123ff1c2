"""Triton's dynamic batcher (``dynamic_batching``), registered as the scheduler "dynamic".

Requests wait in one priority queue per model version; one worker per instance takes a batch
when its instance is free and runs it as a single ``execute`` call. Batches follow Triton's rules
(:func:`~inferd.schedulers.batching.batches.plan_batch`): rows up to ``max_batch_size``, equal
non-batch shapes unless an input allows ragged batches, the largest preferred size reachable,
and at most ``max_queue_delay_microseconds`` of waiting for more requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from inferd.contracts.errors import InferdError, InternalError, Unavailable
from inferd.contracts.hookspecs import SchedulerRegister, hookimpl
from inferd.contracts.scheduler import InstanceRunner, Rejected, Scheduler, SchedulerContext
from inferd.contracts.types import InferRequest, InferResponse
from inferd.schedulers.batching.batches import Wakeup, answer, plan_batch, ragged_inputs, shape_key
from inferd.schedulers.batching.queue_policy import TIMEOUT_MESSAGE, Pending, PriorityQueue

log = logging.getLogger(__name__)


class DynamicBatchScheduler(Scheduler):
    """Batches requests across clients; one worker task per instance pulls from a shared queue."""

    def __init__(self, context: SchedulerContext) -> None:
        super().__init__(context)
        config = context.config
        batching = config.dynamic_batching
        self._name = context.name
        self._batched = context.max_batch_size > 0
        self._max_rows = max(1, context.max_batch_size)
        self._preferred = frozenset(int(s) for s in batching.preferred_batch_size) if self._batched else frozenset()
        self._max_preferred = max(self._preferred, default=self._max_rows)
        self._delay_ns = int(batching.max_queue_delay_microseconds) * 1000 if self._batched else 0
        self._ordered = bool(batching.preserve_ordering)
        self._ragged = ragged_inputs(config)
        self._queue = PriorityQueue(config, self._on_expired)
        self._order: deque[Pending] = deque()
        self._wakeup = Wakeup()
        self._workers: list[asyncio.Task[None]] = []
        #: The loop the workers run on, set when they start: ``schedule`` makes its futures there
        #: without asking asyncio (``get_running_loop`` is a ``getpid`` system call on Python 3.11).
        self._loop: asyncio.AbstractEventLoop | None = None
        #: ``context.max_batch_size``, read per request (a property over the config).
        self._max_batch_size = context.max_batch_size
        self._closed = False

    # -- the caller's side ----------------------------------------------------------------------

    async def schedule(self, request: InferRequest) -> InferResponse:
        loop = self._loop
        if loop is None or not self._workers:
            self._start_workers()
            loop = self._loop = asyncio.get_running_loop()
        item = Pending(
            request,
            loop.create_future(),
            request.batch_size(self._max_batch_size),
            shape_key(request, self._batched, self._ragged),
            time.monotonic_ns(),
        )
        self._queue.push(item)
        if self._ordered:
            self._order.append(item)
        self._wakeup.notify()
        try:
            return await item.future
        except asyncio.CancelledError:
            self._queue.discard(item)
            self._finish(item, None)
            raise

    def _start_workers(self) -> None:
        runners = self.context.runners
        if not runners:
            raise Unavailable(f"model '{self._name}' version {self.context.version} has no instances")
        self._workers = [asyncio.ensure_future(self._worker(runner)) for runner in runners]

    def _on_expired(self, item: Pending) -> None:
        """A queued request waited past its timeout under ``timeout_action: REJECT``."""
        self._finish(item, Rejected(TIMEOUT_MESSAGE))

    def _finish(self, item: Pending, outcome: InferResponse | InferdError | None) -> None:
        """Answer one request; with ``preserve_ordering`` answers leave in arrival order."""
        if not self._ordered:
            if outcome is not None:
                answer(item.future, outcome)
            return
        item.outcome = outcome
        item.answered = True
        order = self._order
        while order and order[0].answered:
            done = order.popleft()
            if done.outcome is not None:
                answer(done.future, done.outcome)

    # -- the workers ----------------------------------------------------------------------------

    async def _worker(self, runner: InstanceRunner) -> None:
        while True:
            batch = await self._next_batch()
            if batch is None:
                return
            try:
                await self._execute(runner, batch)
            except asyncio.CancelledError:
                self._fail(batch, Unavailable(f"model '{self._name}' is unloading"))
                raise
            except Exception as exc:  # a bug here must not strand the batch's callers
                log.exception("model '%s': dynamic batcher failed", self._name)
                self._fail(batch, InternalError(f"dynamic batcher of model '{self._name}' failed: {exc}"))

    async def _next_batch(self) -> list[Pending] | None:
        queue = self._queue
        while not self._closed:
            if not len(queue):
                await self._wakeup.wait()
                continue
            count, wait_ns = plan_batch(
                queue, self._max_rows, self._preferred, self._max_preferred, self._delay_ns, time.monotonic_ns()
            )
            if count:
                return queue.take(count)
            await self._wakeup.wait(wait_ns)
        return None

    async def _execute(self, runner: InstanceRunner, batch: list[Pending]) -> None:
        outcomes = await runner.run([p.request for p in batch])
        for item, outcome in zip(batch, outcomes, strict=True):
            self._finish(item, outcome)

    def _fail(self, batch: list[Pending], error: InferdError) -> None:
        for item in batch:
            if not item.future.done() and not item.answered:
                self._finish(item, error)

    async def stop(self) -> None:
        """Drain accepted requests, then end the worker tasks."""
        await super().stop()
        self._closed = True
        self._wakeup.notify()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for item in self._queue.drain():  # nothing should be left; never strand a caller
            self._finish(item, Unavailable(f"model '{self._name}' is unloading"))


@hookimpl
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    register("dynamic", DynamicBatchScheduler)
