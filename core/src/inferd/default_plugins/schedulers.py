"""Built-in schedulers, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

import time

from inferd.errors import ErrorKind, InferdError
from inferd.hookspecs import Register, hookimpl
from inferd.model import ModelVersion
from inferd.scheduler import InstancePool, Scheduler
from inferd.trace import TRACE_KEY
from inferd.types import InferRequest, InferResponse


class DirectScheduler(Scheduler):
    """Triton's default scheduler: no batching; each request goes to the next free instance."""

    def __init__(self, version: ModelVersion) -> None:
        super().__init__(version)
        self.pool = InstancePool(version.runners)

    async def _schedule(self, request: InferRequest) -> InferResponse:
        stats = self.version.stats
        trace = request.context.get(TRACE_KEY) if request.context else None
        if trace is not None:
            trace.mark("QUEUE_START")
        runner = await self.pool.acquire()
        dequeued = time.monotonic_ns()
        if request.response_sender is not None:
            request.context["compute_start_ns"] = dequeued
        self.executing += 1
        try:
            execution = await runner.execute([request])
        finally:
            self.executing -= 1
            self.pool.release(runner)
        done = time.monotonic_ns()
        if trace is not None:
            trace.compute(dequeued, execution.start_ns, execution.end_ns, done)
        result = execution.results[0] if execution.results else None
        input_ns = execution.start_ns - dequeued
        infer_ns = execution.end_ns - execution.start_ns
        output_ns = done - execution.end_ns
        batch_size = request.batch_size(self.version.max_batch_size)
        if isinstance(result, InferdError):
            # As Triton: the execution counts (execution_count, batch_stats), its rows do not.
            stats.record_execution(batch_size, input_ns, infer_ns, output_ns, succeeded=0)
            stats.record_failure(done - request.arrival_ns, "CANCELED" if result.kind is ErrorKind.CANCELLED else "BACKEND")
            raise result
        stats.record_execution(batch_size, input_ns, infer_ns, output_ns)
        stats.record_success(done - request.arrival_ns, dequeued - request.arrival_ns, input_ns, infer_ns, output_ns)
        if result is None:  # decoupled: responses went through the sender
            return InferResponse(self.version.name, str(self.version.version), request.id)
        return result


@hookimpl
def inferd_register_schedulers(register: Register) -> None:
    register("direct", DirectScheduler)
