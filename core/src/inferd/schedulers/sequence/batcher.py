"""Triton's sequence batcher (``sequence_batching``), registered as the scheduler "sequence".

Every sequence (one correlation id, from a START request to its END request) is bound to a slot
of one instance for its lifetime; with no free slot it waits in a backlog. Each instance runs one
batch at a time, taking at most the next request of each of its sequences, so the requests of a
sequence run strictly in order. The ``direct`` strategy (the default) batches the ready slots in
slot order; ``oldest`` keeps ``max_candidate_sequences`` per instance and batches the oldest ready
requests as the dynamic batcher would. With ``--auth-config``, a sequence waiting for a slot
waits at its tenant's ``priority``: a freed slot goes to the first sequence of the highest level,
and its tenant's ``queue_timeout_ms`` is its backlog timeout when its request names none. Control tensors and implicit state are added to each
request as it goes to its instance (:mod:`~inferd.schedulers.sequence.controls`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.auth.policy import CURRENT
from inferd.contracts.backend import RESCHEDULE
from inferd.contracts.errors import InternalError, InvalidArgument, Unavailable
from inferd.contracts.hookspecs import SchedulerRegister, hookimpl
from inferd.contracts.scheduler import InstanceRunner, Rejected, Scheduler, SchedulerContext
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.schedulers.batching.batches import Wakeup, answer, plan_batch, ragged_inputs, shape_key
from inferd.schedulers.sequence.controls import ImplicitState, SequenceControls, sequence_parameters

log = logging.getLogger(__name__)

#: Triton re-checks an idle sequence still waiting in the backlog this often.
_BACKLOG_IDLE_RECHECK_S = 0.05
_BACKLOG_TIMEOUT_MESSAGE = "timeout of the corresponding sequence has been expired"


@dataclass(eq=False, slots=True)
class _Item:
    """One request of a sequence, queued until its slot's instance takes it."""

    request: InferRequest
    future: asyncio.Future[Any]
    start: bool
    end: bool
    enqueue_ns: int
    input_key: tuple[Any, ...]
    shape_key: tuple[Any, ...] = ()
    rows: int = 1
    strip: frozenset[str] = frozenset()


@dataclass(eq=False, slots=True)
class _Sequence:
    """A live sequence: its queue, its slot (None while in the backlog) and its state."""

    cid: int | str
    corrid: InferTensor | None
    queue: deque[_Item] = field(default_factory=deque)
    lane: _Lane | None = None
    slot: int = -1
    state: dict[str, np.ndarray] | None = None
    last_ns: int = 0
    closing: bool = False  # no request will follow: free the slot once the queue is drained
    busy: bool = False
    done: bool = False
    timer: asyncio.TimerHandle | None = None
    backlog_timer: asyncio.TimerHandle | None = None
    #: Its tenant's priority level (1 highest; 1 without one), for its turn in the backlog.
    level: int = 1
    #: Its tenant's queue timeout in microseconds (0: none), when its request names no ``timeout``.
    tenant_timeout_us: int = 0


@dataclass(eq=False, slots=True)
class _Lane:
    """One instance: its slots and the worker task that runs its batches."""

    runner: InstanceRunner
    slots: list[_Sequence | None]
    wakeup: Wakeup = field(default_factory=Wakeup)
    task: asyncio.Task[None] | None = None


class SequenceBatchScheduler(Scheduler):
    """Routes each sequence to one instance slot and batches ready sequences per instance."""

    def __init__(self, context: SchedulerContext) -> None:
        super().__init__(context)
        config = context.config
        sequencing = config.sequence_batching
        self._name = context.name
        self._batched = context.max_batch_size > 0
        self._max_rows = max(1, context.max_batch_size)
        self._ragged = ragged_inputs(config)
        self._controls = SequenceControls(config)
        self._state = ImplicitState(config, context.model_dir)
        self._idle_ns = int(sequencing.max_sequence_idle_microseconds or 1_000_000) * 1000
        self._oldest = sequencing.WhichOneof("strategy_choice") == "oldest"
        slots = self._max_rows
        if self._oldest:
            oldest = sequencing.oldest
            slots = oldest.max_candidate_sequences or slots
            self._preferred = frozenset(int(s) for s in oldest.preferred_batch_size)
            self._delay_ns = int(oldest.max_queue_delay_microseconds) * 1000
            self._utilization = 0.0
        else:
            self._preferred = frozenset()
            self._delay_ns = int(sequencing.direct.max_queue_delay_microseconds) * 1000
            self._utilization = float(sequencing.direct.minimum_slot_utilization)
        self._max_preferred = max(self._preferred, default=self._max_rows)
        self._lanes = [_Lane(r, [None] * slots) for r in context.runners]
        self._active: dict[int | str, _Sequence] = {}
        self._backlog: deque[_Sequence] = deque()
        self._leveled = False  # a sequence of a tenant with a priority below 1 was opened
        self._closed = False
        #: ``iterative_sequence``: one request is a whole sequence, run again while the model reschedules it.
        self._iterative = bool(sequencing.iterative_sequence)
        self._next_cid = 1

    # -- the caller's side ----------------------------------------------------------------------

    async def schedule(self, request: InferRequest) -> InferResponse:
        if self._batched and request.batch_size(self.context.max_batch_size) != 1:
            raise InvalidArgument(
                f"inference request to model '{self._name}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        cid, start, end = sequence_parameters(request, self._name, self._iterative)
        if cid is None:  # iterative: a request without a correlation id starts a sequence of its own
            cid = self._new_cid()
            request.parameters.update(sequence_id=cid, sequence_start=True)
            start = True
        if not self._lanes:
            raise Unavailable(f"model '{self._name}' version {self.context.version} has no instances")
        seq = self._active.get(cid)
        if seq is None:
            if not start:
                raise InvalidArgument(
                    f"inference request for sequence {cid} to model '{self._name}' must specify the START "
                    "flag on the first request of the sequence"
                )
            seq = self._open(cid)
        elif start:
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end before this "
                "sequence start. Previous sequence will be terminated early.",
                cid,
                self._name,
            )
        loop = asyncio.get_running_loop()
        now = time.monotonic_ns()
        item = _Item(request, loop.create_future(), start, end, now, shape_key(request, self._batched, self._ragged))
        seq.queue.append(item)
        seq.last_ns = now
        if end:
            self._forget(seq)
        if seq.lane is not None:
            seq.lane.wakeup.notify()
        else:
            self._arm_backlog_timeout(seq, request)
        try:
            return await item.future
        except asyncio.CancelledError:
            self._withdraw(seq, item)
            raise

    def _new_cid(self) -> int:
        """A correlation id no live sequence has (Triton numbers them from 1)."""
        while self._next_cid in self._active:
            self._next_cid += 1
        cid, self._next_cid = self._next_cid, self._next_cid + 1
        return cid

    def _open(self, cid: int | str) -> _Sequence:
        if not any(lane.task for lane in self._lanes):
            for lane in self._lanes:
                lane.task = asyncio.ensure_future(self._lane_worker(lane))
        seq = _Sequence(cid, self._controls.corrid(cid))
        grant = CURRENT.get()
        tenant = grant.tenant if grant is not None else None
        if tenant is not None:
            seq.level = tenant.priority or 1
            seq.tenant_timeout_us = tenant.queue_timeout_us
            self._leveled = self._leveled or seq.level > 1
        self._active[cid] = seq
        if not self._assign(seq):
            self._backlog.append(seq)
        seq.timer = asyncio.get_running_loop().call_later(self._idle_ns / 1e9, self._check_idle, seq)
        return seq

    def _assign(self, seq: _Sequence) -> bool:
        """Give ``seq`` the free slot with the lowest index (spreading sequences over instances)."""
        for index in range(len(self._lanes[0].slots)):
            for lane in self._lanes:
                if lane.slots[index] is None:
                    lane.slots[index] = seq
                    seq.lane, seq.slot = lane, index
                    seq.last_ns = time.monotonic_ns()  # time spent in the backlog is not idleness
                    if seq.backlog_timer is not None:
                        seq.backlog_timer.cancel()
                        seq.backlog_timer = None
                    lane.wakeup.notify()
                    return True
        return False

    def _forget(self, seq: _Sequence) -> None:
        """No further request joins ``seq``: a later request with its id must START a new one."""
        seq.closing = True
        if self._active.get(seq.cid) is seq:
            del self._active[seq.cid]

    def _withdraw(self, seq: _Sequence, item: _Item) -> None:
        """The caller of a queued request went away: drop it (an END still ends the sequence)."""
        try:
            seq.queue.remove(item)
        except ValueError:
            return
        if item.end:
            self._maybe_release(seq)

    # -- slots, idle sequences and the backlog ----------------------------------------------------

    def _maybe_release(self, seq: _Sequence) -> None:
        if not seq.closing or seq.queue or seq.busy or seq.done:
            return
        seq.done = True
        for timer in (seq.timer, seq.backlog_timer):
            if timer is not None:
                timer.cancel()
        lane, index = seq.lane, seq.slot
        if lane is None:
            if seq in self._backlog:
                self._backlog.remove(seq)
            return
        lane.slots[index] = None
        seq.lane = None
        while self._backlog:
            waiting = self._next_waiting()
            if not waiting.done:
                self._assign(waiting)
                break

    def _next_waiting(self) -> _Sequence:
        """Take the sequence whose turn it is: the first of the highest tenant level."""
        backlog = self._backlog
        if not self._leveled:
            return backlog.popleft()
        first = min(backlog, key=_level)  # min keeps the earliest of equal levels
        backlog.remove(first)
        return first

    def _check_idle(self, seq: _Sequence) -> None:
        seq.timer = None
        if seq.done:
            return
        loop = asyncio.get_running_loop()
        remaining = seq.last_ns + self._idle_ns - time.monotonic_ns()
        if remaining > 0:
            seq.timer = loop.call_later(remaining / 1e9, self._check_idle, seq)
        elif seq.lane is None:  # still in the backlog: idleness does not count yet
            seq.timer = loop.call_later(_BACKLOG_IDLE_RECHECK_S, self._check_idle, seq)
        else:
            log.debug("model '%s': sequence %s idle for too long; releasing its slot", self._name, seq.cid)
            self._forget(seq)
            self._maybe_release(seq)

    def _arm_backlog_timeout(self, seq: _Sequence, request: InferRequest) -> None:
        timeout = request.parameters.get("timeout")
        if timeout is None:
            timeout = seq.tenant_timeout_us
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0 or seq.backlog_timer:
            return
        seq.backlog_timer = asyncio.get_running_loop().call_later(timeout / 1e6, self._expire_backlog, seq)

    def _expire_backlog(self, seq: _Sequence) -> None:
        seq.backlog_timer = None
        if seq.lane is not None or seq.done:
            return
        self._forget(seq)
        while seq.queue:
            answer(seq.queue.popleft().future, Rejected(_BACKLOG_TIMEOUT_MESSAGE))
        self._maybe_release(seq)

    # -- the instance workers -----------------------------------------------------------------------

    async def _lane_worker(self, lane: _Lane) -> None:
        while True:
            batch = await self._next_batch(lane)
            if batch is None:
                return
            try:
                await self._execute(lane, batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug here must not strand the batch's callers
                log.exception("model '%s': sequence batcher failed", self._name)
                for seq, item in batch:
                    answer(item.future, InternalError(f"sequence batcher of model '{self._name}' failed: {exc}"))
                    seq.busy = False
                    self._maybe_release(seq)

    async def _next_batch(self, lane: _Lane) -> list[tuple[_Sequence, _Item]] | None:
        while not self._closed:
            ready = [s for s in lane.slots if s is not None and s.queue]
            if not ready:
                await lane.wakeup.wait()
                continue
            if self._state:
                for seq in ready:
                    front = seq.queue[0]
                    front.shape_key = (front.input_key, self._state_key(seq, front.start))
            else:
                for seq in ready:
                    seq.queue[0].shape_key = seq.queue[0].input_key
            chosen, wait_ns = self._choose(ready, len(lane.slots))
            if chosen:
                batch = []
                for seq in chosen:
                    seq.busy = True
                    batch.append((seq, seq.queue.popleft()))
                return batch
            await lane.wakeup.wait(wait_ns)
        return None

    def _state_key(self, seq: _Sequence, start: bool) -> tuple[Any, ...]:
        if start or seq.state is None:
            return self._state.initial_key()
        return tuple(a.shape for a in seq.state.values())

    def _choose(self, ready: list[_Sequence], slot_count: int) -> tuple[list[_Sequence], int]:
        """The sequences whose next request runs now, or how long to wait (ns) for more."""
        now = time.monotonic_ns()
        if self._oldest:
            ready.sort(key=lambda s: s.queue[0].enqueue_ns)
            count, wait_ns = plan_batch(
                (s.queue[0] for s in ready),
                self._max_rows,
                self._preferred,
                self._max_preferred,
                self._delay_ns,
                now,
            )
            return ready[:count], wait_ns
        if self._delay_ns and self._utilization:
            waited = now - min(s.queue[0].enqueue_ns for s in ready)
            if waited <= self._delay_ns and len(ready) / self._max_rows < self._utilization:
                return [], self._delay_ns - waited
        key = ready[0].queue[0].shape_key
        return [s for s in ready if s.queue[0].shape_key == key][: self._max_rows], 0

    def _prepare(self, seq: _Sequence, item: _Item) -> None:
        """Add control tensors and state inputs; ask for the state outputs."""
        request = item.request
        self._controls.add(request.inputs, item.start, item.end, seq.corrid)
        if not self._state:
            return
        if item.start or seq.state is None:
            seq.state = self._state.initial()
        for spec in self._state.specs:
            value = seq.state[spec.input_name]
            request.inputs[spec.input_name] = InferTensor(spec.input_name, spec.datatype, value.shape, value)
        if request.outputs:
            asked = {o.name for o in request.outputs}
            extra = [name for name in self._state.output_names if name not in asked]
            request.outputs.extend(RequestedOutput(name) for name in extra)
            item.strip = frozenset(extra)
        else:
            item.strip = self._state.hidden

    async def _execute(self, lane: _Lane, batch: list[tuple[_Sequence, _Item]]) -> None:
        for seq, item in batch:
            self._prepare(seq, item)
        outcomes = await lane.runner.run([item.request for _, item in batch])
        done = time.monotonic_ns()
        for (seq, item), outcome in zip(batch, outcomes, strict=True):
            seq.busy = False
            seq.last_ns = done
            decoupled = item.request.response_sender is not None  # its state stays as it was
            if self._state and seq.state is not None and not decoupled and isinstance(outcome, InferResponse):
                self._state.capture(outcome, seq.state, item.strip)
            if self._iterative and item.request.context.pop(RESCHEDULE, False):
                self._reschedule(seq, item)
                continue
            answer(item.future, outcome)
            if item.end or self._iterative:  # an iterative sequence ends with its request
                self._forget(seq)
            self._maybe_release(seq)

    def _reschedule(self, seq: _Sequence, item: _Item) -> None:
        """Queue ``item`` again at the front of its sequence, neither START nor END (as Triton does)."""
        item.start = item.end = False
        item.request.parameters.pop("sequence_start", None)
        item.request.parameters.pop("sequence_end", None)
        seq.queue.appendleft(item)
        assert seq.lane is not None
        seq.lane.wakeup.notify()

    async def stop(self) -> None:
        """Drain accepted requests, then end the worker tasks and timers."""
        await super().stop()
        self._closed = True
        tasks = [lane.task for lane in self._lanes if lane.task is not None]
        for lane in self._lanes:
            lane.wakeup.notify()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for seq in list(self._active.values()) + list(self._backlog):
            for timer in (seq.timer, seq.backlog_timer):
                if timer is not None:
                    timer.cancel()
        for lane in self._lanes:
            for slot in lane.slots:
                if slot is not None and slot.timer is not None:
                    slot.timer.cancel()
        self._active.clear()
        self._backlog.clear()


def _level(seq: _Sequence) -> int:
    return seq.level


@hookimpl
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    register("sequence", SequenceBatchScheduler)
