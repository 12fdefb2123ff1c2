"""Pieces the dynamic and sequence batchers share: batch planning, shape keys, worker wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from inferd.config import ModelConfig
    from inferd.contracts.types import InferRequest


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
    inputs = request.inputs
    if len(inputs) == 1:  # the common case, without sorting
        for name, t in inputs.items():
            return ((name, None if name in ragged else t.shape[1:]),)
    return tuple((name, None if name in ragged else t.shape[1:]) for name, t in sorted(inputs.items()))


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
    ``wait_ns`` for more. As Triton's ``DynamicBatchScheduler::GetDynamicBatch``: items join in
    order while their rows fit in ``max_rows`` and their shape key matches the first. The batch
    marked last goes at once while the oldest item has waited less than ``delay_ns``: the largest
    preferred size reached, or else what was pending when the next item would have passed the
    largest preferred size. Otherwise everything that fits goes once the batch cannot grow,
    reaches the largest preferred size, the delay is spent, or the delay is 0.
    """
    count = rows = best = 0
    send_now = False
    oldest = 0
    first_key: tuple[Any, ...] = ()
    for item in items:
        item_rows = item.rows
        if count == 0:
            first_key = item.shape_key
            oldest = item.enqueue_ns
        else:
            if not best and rows + item_rows > max_preferred:
                best = count
            if rows + item_rows > max_rows or item.shape_key != first_key:
                send_now = True
                break
            if item.enqueue_ns < oldest:
                oldest = item.enqueue_ns
        count += 1
        rows += item_rows
        if rows in preferred:
            best = count
        if rows >= max_rows:  # nothing more can join (Triton stops at the next item)
            send_now = True
            break
    if count == 0:
        return 0, 0
    waited = now_ns - oldest
    exceeded = delay_ns != 0 and waited >= delay_ns
    if best and not exceeded:
        return best, 0
    if send_now or exceeded or delay_ns == 0 or rows >= max_preferred:
        return count, 0
    return 0, delay_ns - waited


class Wakeup:
    """Wakes every waiting worker at once; each waiter may also give up after a timeout."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []
        #: The loop of the first wait: the workers that wait here all run on it (asked once, as
        #: ``get_running_loop`` is a ``getpid`` system call on Python 3.11).
        self._loop: asyncio.AbstractEventLoop | None = None

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout_ns: int | None = None) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
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


def answer(fut: asyncio.Future[Any], outcome: Any) -> None:
    """Complete a caller's future with a response or an error, unless the caller went away."""
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)
