"""The batches one stub process holds, on the server's event loop: handing them over, the execute
timeout, their results and their streamed (decoupled) responses.

``submit`` (from the instance's ``execute``) sends a batch and returns a future; the loop reads
the stub's results as soon as its socket is readable and resolves that future: no thread between
the two. Batches wait in the stub's socket while one executes (the instance's ``pipeline_depth``);
large ones are copied from a worker thread, at most :data:`_LARGE_IN_FLIGHT` at once.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

from inferd.api import RESCHEDULE, InferdError, InferRequest, InferResponse, InternalError, Started
from inferd_backend_python import ipc
from inferd_backend_python.shm import Block, Malformed, Tensors
from inferd_backend_python.wire import decode_outcome, encode_request

#: What a batch handed to a stub resolves to: its results, or them and when the stub could start it.
Results = Sequence[InferResponse | InferdError | None] | Started
#: Sends a message to the stub: (kind, body, tensors, wait).
Send = Callable[[int, Any, Tensors | None, bool], None]
#: Kills the stub: (reason, the cause it counts as).
Kill = Callable[[str | None, str | None], None]

#: Requests whose tensors add up to more than this are copied to the stub from a worker thread,
#: not on the event loop.
_LOOP_COPY_LIMIT = 256 * 1024
#: Of such large batches, at most this many are in the stub's hands at once (the next waits in the
#: server, with every batch after it): deep pipelining pays for small requests, whose cost is the
#: hand-over, but eight large ones copied at once cost ~10% more CPU at c=8 here, for no gain.
_LARGE_IN_FLIGHT = 2


class Batch:
    """Requests handed to a stub: its future is done once ``execute`` returned (or the stub died)."""

    __slots__ = ("future", "held", "large", "open", "requests", "returned", "sent_ns")

    def __init__(self, requests: Sequence[InferRequest], future: asyncio.Future[Results], decoupled: bool) -> None:
        self.requests = requests
        self.future = future
        #: Its ``execute`` returned (the stub sent its results), or it failed.
        self.returned = False
        #: When it was handed to the stub (0: not yet, it waits in the server for room), whether
        #: it waited for room first, and whether it is a large one.
        self.sent_ns = 0
        self.held = False
        self.large = False
        #: Decoupled: the requests whose final response has not been sent yet.
        self.open = set(range(len(requests))) if decoupled else _NONE


_NONE: set[int] = set()


class Batches:
    """The batches of one stub, on the loop only (see the module's docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        label: str,
        decoupled: bool,
        timeout: float | None,
        send: Send,
        kill: Kill,
    ) -> None:
        self.loop = loop
        self._label = label
        self._decoupled = decoupled
        self._timeout = timeout
        self._send = send
        self._kill = kill
        #: The stub is gone: no batch is taken, none waiting is sent.
        self.closed = False
        self._pending: dict[int, Batch] = {}
        #: Batches sent whose ``execute`` has not returned yet: the stub runs them one after the
        #: other, in the order they reach it (``pipeline_depth``: the next one waits there).
        self._executing = 0
        #: Batches not sent yet (a large one waiting for room, and those after it, in order).
        self._held: collections.deque[tuple[int, Sequence[InferRequest], bool]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._ids = itertools.count(1)

    def submit(self, requests: Sequence[InferRequest]) -> asyncio.Future[Results] | None:
        """Hand a batch to the stub: a future of its results (None: the stub is dead already)."""
        if self.closed:
            return None
        batch_id = next(self._ids)
        future: asyncio.Future[Results] = self.loop.create_future()
        self._pending[batch_id] = batch = Batch(requests, future, self._decoupled)
        nbytes = 0
        for request in requests:
            for tensor in request.inputs.values():
                nbytes += tensor.data.nbytes
        large = nbytes > _LOOP_COPY_LIMIT
        if self._held or (large and self._large_waits()):
            self._held.append((batch_id, requests, large))
            batch.held = True
        else:
            self._hand_over(batch_id, requests, large)
        return future

    def _large_waits(self) -> bool:
        """Whether a large batch must wait: as many are in the stub's hands already."""
        large = 0
        for batch in self._pending.values():
            if batch.large and not batch.returned:
                large += 1
        return large >= _LARGE_IN_FLIGHT

    def _hand_over(self, batch_id: int, requests: Sequence[InferRequest], large: bool) -> None:
        batch = self._pending[batch_id]
        batch.large, batch.sent_ns = large, time.monotonic_ns()
        if large:
            self.loop.run_in_executor(None, self._send_batch, batch_id, requests, True)
        else:
            self._send_batch(batch_id, requests, False)
        self._executing += 1
        if self._timeout is not None and self._executing == 1:
            self._arm()

    def _release_held(self) -> None:
        """Send the batches that waited, in order, as far as there is room for the large ones."""
        held = self._held
        while held and not self.closed:
            batch_id, requests, large = held[0]
            if large and self._large_waits():
                return
            held.popleft()
            if batch_id in self._pending:
                self._hand_over(batch_id, requests, large)

    def _arm(self) -> None:
        """Kill the stub unless the batch it runs now returns within ``EXECUTE_TIMEOUT_SECS``
        (re-armed as each batch returns while others wait behind it)."""
        timeout = self._timeout or 0.0
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(
            timeout, self._kill, f"did not return from execute within {timeout:g} s (EXECUTE_TIMEOUT_SECS)", "timeout"
        )

    def _returned(self, batch: Batch) -> None:
        """``batch`` is out of the stub's hands (its ``execute`` returned, or it failed): time the next one."""
        if batch.returned:
            return
        batch.returned = True
        if not batch.sent_ns:  # failed while it waited in the server
            return
        self._executing -= 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            if self._executing and not self.closed:
                self._arm()
        if self._held:
            self._release_held()

    def _send_batch(self, batch_id: int, requests: Sequence[InferRequest], wait: bool) -> None:
        """Send a batch (``wait``: from a worker thread, which may wait for the socket)."""
        try:
            tensors = Tensors()
            items = [encode_request(r, tensors) for r in requests]
        except Exception as exc:
            error = InternalError(f"{self._label}: the batch cannot be sent to its stub: {type(exc).__name__}: {exc}")
            if wait:
                self.loop.call_soon_threadsafe(self._drop_batch, batch_id, error)
            else:
                self._drop_batch(batch_id, error)
            return
        self._send(ipc.EXEC, (batch_id, items), tensors, wait)

    def _drop_batch(self, batch_id: int, error: InferdError) -> None:
        batch = self._pending.pop(batch_id, None)
        if batch is not None:
            self._fail_batch(batch, error)

    def result(self, body: Any, block: Block) -> None:
        """A RESULT message: the batch's ``execute`` returned these results."""
        batch_id, encoded, rescheduled, free_ns = body
        batch = self._pending.get(batch_id)
        if batch is None:
            raise Malformed(f"the results of batch {batch_id!r}, which it does not hold")
        if batch.returned:
            raise Malformed(f"the results of batch {batch_id!r} twice")
        if type(free_ns) is not int:
            raise Malformed(f"the results of batch {batch_id!r} with a start time of {free_ns!r}")
        self._returned(batch)
        results = [decode_outcome(item, block) for item in encoded]
        for index in rescheduled:
            if not (type(index) is int and 0 <= index < len(batch.requests)):
                raise Malformed(f"request {index!r} of a batch of {len(batch.requests)} to reschedule")
            batch.requests[index].context[RESCHEDULE] = True
        if not batch.open:
            del self._pending[batch_id]
        if not batch.future.done():
            # it could start once the stub ended the batch before (or once sent, if it waited in the server
            # for room): the wait behind other batches is queue time (core's runner bounds it by its end)
            start = free_ns if free_ns > batch.sent_ns else batch.sent_ns if batch.held else 0
            batch.future.set_result(Started(results, start) if start else results)

    def response(self, body: Any, block: Block) -> None:
        """A SEND message: one response of a decoupled model's request."""
        batch_id, index, payload, final = body
        batch = self._pending.get(batch_id)
        if batch is None or index not in batch.open:
            return
        outcome = decode_outcome(payload, block)
        if final:
            batch.open.discard(index)
            if not batch.open and batch.future.done():
                del self._pending[batch_id]
        sender = batch.requests[index].response_sender
        if sender is not None:
            sender(outcome, bool(final))

    def cancelled(self, batch_id: int, index: int) -> bool:
        """Whether the client of a request the stub holds cancelled it."""
        batch = self._pending.get(batch_id)
        return bool(batch is not None and batch.requests[index].cancelled)

    def fail(self, error: InferdError) -> None:
        """The stub died: fail every request it held."""
        pending, self._pending = self._pending, {}
        self._held.clear()
        for batch in pending.values():
            self._fail_batch(batch, error)

    def _fail_batch(self, batch: Batch, error: InferdError) -> None:
        self._returned(batch)
        if not batch.future.done():
            batch.future.set_result([] if self._decoupled else [error] * len(batch.requests))
        for index in sorted(batch.open):
            sender = batch.requests[index].response_sender
            if sender is not None:
                sender(error, True)
