"""A model version's free instances, handed out first come first served: the direct scheduler's
pool, public as ``inferd.api.InstancePool`` for the schedulers of other plugins."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from inferd.contracts.backend import Outcome
from inferd.contracts.scheduler import InstanceRunner
from inferd.contracts.types import InferRequest


class InstancePool:
    """Free instances of a model version; ``acquire`` waits for one, first come first served.

    An instance with a ``depth`` of N (``AsyncInstance.pipeline_depth``) is free N times over; each
    instance's first turn is handed out before any instance's second.

    A released instance is handed straight to the oldest waiter, so a request that just arrived
    can never take it from one that has been waiting (``asyncio.Queue`` lets it, and under load
    that starves unlucky requests for seconds).
    """

    def __init__(self, runners: Sequence[InstanceRunner]) -> None:
        self.runners = list(runners)
        depth = max((r.depth for r in self.runners), default=1)
        self._free: deque[InstanceRunner] = deque(r for turn in range(depth) for r in self.runners if turn < r.depth)
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

    async def run(self, requests: Sequence[InferRequest]) -> list[Outcome]:
        """``runner.run(requests)`` on the next free instance."""
        runner = await self.acquire()
        try:
            return await runner.run(requests)
        finally:
            self.release(runner)

    def __len__(self) -> int:
        return len(self.runners)
