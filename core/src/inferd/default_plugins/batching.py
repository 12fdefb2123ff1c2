"""Pieces the dynamic and sequence batchers share: batch planning, shape keys, worker wake-ups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from inferd.errors import ErrorKind, InferdError, InternalError
from inferd.scheduler import Execution, InstanceRunner
from inferd.trace import TRACE_KEY
from inferd.types import InferResponse

if TYPE_CHECKING:
    from inferd.config import ModelConfig
    from inferd.model import ModelVersion
    from inferd.types import InferRequest


class Batchable(Protocol):
    rows: int
    shape_key: tuple[Any, ...]
    enqueue_ns: int


def ragged_inputs(config: ModelConfig) -> frozenset[str]:
    """Inputs whose non-batch shape may differ between requests of one batch."""
    return frozenset(t.name for t in config.input if t.allow_ragged_batch)


def shape_key(request: InferRequest, batched: bool, ragged: frozenset[str]) -> tuple[Any, ...]:
    """What must be equal for two requests to share a batch: input names and non-batch shapes."""
    if not batched:
        return ()
    return tuple((name, None if name in ragged else t.shape[1:]) for name, t in sorted(request.inputs.items()))


def plan_batch(
    items: Iterable[Batchable],
    max_rows: int,
    preferred: frozenset[int],
    max_preferred: int,
    delay_ns: int,
    now_ns: int,
) -> tuple[int, int]:
    """Triton's dynamic batch decision over queued ``items`` (in serving order).

    Returns ``(count, wait_ns)``: take the first ``count`` items now, or (count 0) wait up to
    ``wait_ns`` for more. Items join in order while their rows fit in ``max_rows`` and their shape
    key matches the first; the largest preferred size reached wins while the oldest item has
    waited less than ``delay_ns``; otherwise everything that fits goes once the batch cannot grow,
    reaches the largest preferred size, or the delay is spent (a delay of 0 never waits).
    """
    count = rows = best = 0
    closed = False
    oldest = 0
    first_key: tuple[Any, ...] = ()
    for item in items:
        if count == 0:
            first_key = item.shape_key
            oldest = item.enqueue_ns
        elif rows + item.rows > max_rows or item.shape_key != first_key:
            closed = True
            break
        count += 1
        rows += item.rows
        oldest = min(oldest, item.enqueue_ns)
        if rows in preferred:
            best = count
        if rows >= max_rows:
            closed = True
            break
    if count == 0:
        return 0, 0
    waited = now_ns - oldest
    exceeded = delay_ns == 0 or waited >= delay_ns
    if best and not exceeded:
        return best, 0
    if closed or exceeded or rows >= max_preferred:
        return count, 0
    return 0, delay_ns - waited


class Wakeup:
    """Wakes every waiting worker at once; each waiter may also give up after a timeout."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout_ns: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        handle = None
        if timeout_ns is not None:
            handle = loop.call_later(max(timeout_ns, 0) / 1e9, _resolve, fut)
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def mark_queued(request: InferRequest) -> None:
    """Trace the moment a request enters a batcher's queue (when the request is traced)."""
    trace = request.context.get(TRACE_KEY) if request.context else None
    if trace is not None:
        trace.mark("QUEUE_START")


async def run_batch(runner: InstanceRunner, requests: list[InferRequest], dequeued_ns: int) -> Execution:
    """``runner.execute`` that turns an unexpected failure into one error per request."""
    for request in requests:
        if request.response_sender is not None:  # decoupled: the data plane times the first response
            request.context["compute_start_ns"] = dequeued_ns
    try:
        return await runner.execute(requests)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the runner already maps backend errors; this is a bug guard
        err: InferdError = InternalError(f"instance '{runner.spec.name}' failed: {type(exc).__name__}: {exc}")
        stamp = time.monotonic_ns()
        return Execution([err] * len(requests), stamp, stamp)


def record_batch(
    version: ModelVersion, requests: list[InferRequest], rows: list[int], execution: Execution, dequeued_ns: int,
    done_ns: int,
) -> list[InferResponse | InferdError]:  # fmt: skip
    """Statistics and traces of one executed batch; returns each request's response or error.

    As Triton counts them: the execution always counts (``execution_count``, ``batch_stats`` by
    the batch's rows); ``inference_count`` only the rows of requests that succeeded.
    """
    stats = version.stats
    results = execution.results or [None] * len(requests)  # decoupled: responses went through senders
    input_ns = execution.start_ns - dequeued_ns
    infer_ns = execution.end_ns - execution.start_ns
    output_ns = done_ns - execution.end_ns
    succeeded = sum(n for n, r in zip(rows, results, strict=True) if not isinstance(r, InferdError))
    stats.record_execution(sum(rows), input_ns, infer_ns, output_ns, succeeded=succeeded)
    outcomes: list[InferResponse | InferdError] = []
    for request, result in zip(requests, results, strict=True):
        trace = request.context.get(TRACE_KEY) if request.context else None
        if trace is not None:
            trace.compute(dequeued_ns, execution.start_ns, execution.end_ns, done_ns)
        total_ns = done_ns - request.arrival_ns
        if isinstance(result, InferdError):
            stats.record_failure(total_ns, "CANCELED" if result.kind is ErrorKind.CANCELLED else "BACKEND")
            outcomes.append(result)
            continue
        stats.record_success(total_ns, dequeued_ns - request.arrival_ns, input_ns, infer_ns, output_ns)
        outcomes.append(result or InferResponse(version.name, str(version.version), request.id))
    return outcomes


def answer(fut: asyncio.Future[Any], outcome: Any) -> None:
    """Complete a caller's future with a response or an error, unless the caller went away."""
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
