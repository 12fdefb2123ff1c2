"""Which loads on demand may run together (``--model-load-on-demand-concurrency``).

A model's footprint is the growth of the process's resident memory over its load, so a load that
measures one (a model's first load, an ensemble's, one whose files changed) runs alone: no other
load on demand runs beside it. A load whose footprint is already known (a model reloading after
its eviction) measures nothing: up to ``concurrency`` of them run together. A measuring load that
waits holds back the known ones that come after it, so it is not starved. The budget counts each
running load's expected footprint (:class:`inferd.lifecycle.on_demand.OnDemand`), so loads that
run together cannot pass it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


def default_concurrency() -> int:
    """Loads of known footprints that may run together by default: the cores, 2 to 8."""
    return max(2, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class LoadSlots:
    """A gate for loads on demand: measuring ones one at a time and alone, known ones up to
    ``concurrency`` together."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = max(1, concurrency)
        #: Loads of known footprints running now.
        self.running = 0
        #: Whether a measuring load runs now.
        self.measuring = False
        #: Measuring loads waiting for the others to end.
        self._measurers_waiting = 0
        self._waiters: list[asyncio.Future[None]] = []

    @asynccontextmanager
    async def slot(self, measure: bool) -> AsyncIterator[None]:
        """Hold a slot for one load: a measuring one (``measure``) alone, or one of known footprint."""
        if measure:
            self._measurers_waiting += 1
            try:
                await self._until(lambda: not self.measuring and not self.running)
            finally:
                self._measurers_waiting -= 1
                self._wake()  # (one that gave up no longer holds the known loads back)
            self.measuring = True
        else:
            await self._until(
                lambda: not self.measuring and not self._measurers_waiting and self.running < self.concurrency
            )
            self.running += 1
        try:
            yield
        finally:
            if measure:
                self.measuring = False
            else:
                self.running -= 1
            self._wake()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _wake(self) -> None:
        """Every waiter checks again (a slot ended, or a measuring load stopped waiting)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
