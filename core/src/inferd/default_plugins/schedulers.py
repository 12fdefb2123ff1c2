"""Built-in schedulers, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

import time

from inferd.default_plugins.batching import mark_queued, record_batch, run_batch
from inferd.errors import InferdError
from inferd.hookspecs import Register, hookimpl
from inferd.model import ModelVersion
from inferd.scheduler import InstancePool, Scheduler
from inferd.types import InferRequest, InferResponse


class DirectScheduler(Scheduler):
    """Triton's default scheduler: no batching; each request goes to the next free instance."""

    def __init__(self, version: ModelVersion) -> None:
        super().__init__(version)
        self.pool = InstancePool(version.runners)

    async def _schedule(self, request: InferRequest) -> InferResponse:
        mark_queued(request)
        runner = await self.pool.acquire()
        dequeued = time.monotonic_ns()
        self.executing += 1
        try:
            execution = await run_batch(runner, [request], dequeued)
        finally:
            self.executing -= 1
            self.pool.release(runner)
        rows = [request.batch_size(self.version.max_batch_size)]
        (outcome,) = record_batch(self.version, [request], rows, execution, dequeued, time.monotonic_ns())
        if isinstance(outcome, InferdError):
            raise outcome
        return outcome


@hookimpl
def inferd_register_schedulers(register: Register) -> None:
    register("direct", DirectScheduler)
