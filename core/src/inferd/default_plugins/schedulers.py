"""Built-in schedulers, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

import time

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
        stats = self.version.stats
        runner = await self.pool.acquire()
        dequeued = time.monotonic_ns()
        try:
            execution = await runner.execute([request])
        finally:
            self.pool.release(runner)
        done = time.monotonic_ns()
        result = execution.results[0] if execution.results else None
        if isinstance(result, InferdError):
            stats.record_failure(done - request.arrival_ns)
            raise result
        input_ns = execution.start_ns - dequeued
        infer_ns = execution.end_ns - execution.start_ns
        output_ns = done - execution.end_ns
        stats.record_execution(request.batch_size(self.version.max_batch_size), input_ns, infer_ns, output_ns)
        stats.record_success(done - request.arrival_ns, dequeued - request.arrival_ns, input_ns, infer_ns, output_ns)
        if result is None:  # decoupled: responses went through the sender
            return InferResponse(self.version.name, str(self.version.version), request.id)
        return result


@hookimpl
def inferd_register_schedulers(register: Register) -> None:
    register("direct", DirectScheduler)
