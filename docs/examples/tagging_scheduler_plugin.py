"""A minimal scheduler plugin: replaces the built-in "direct" scheduler.

Core chooses a scheduler by name from the model's config ("direct" when the config has no
``dynamic_batching``, ``sequence_batching`` or ``ensemble_scheduling``), so a scheduler plugin
provides one of those names. The built-in plugin that registers the name must be blocked:
``INFERD_DISABLE_PLUGINS=schedulers`` (the plugin "schedulers" registers only "direct").

This one runs each request alone on the next free instance, as "direct" does, records the
statistics, and adds the response parameter ``scheduler: "tagging"`` so a client can tell.
"""

from __future__ import annotations

import time

from inferd.errors import InferdError
from inferd.hookspecs import Register, hookimpl
from inferd.model import ModelVersion
from inferd.scheduler import InstancePool, Scheduler
from inferd.types import InferRequest, InferResponse


class TaggingScheduler(Scheduler):
    """One request per execution; the base class counts requests in flight for draining."""

    def __init__(self, version: ModelVersion) -> None:
        super().__init__(version)
        self.pool = InstancePool(version.runners)

    async def _schedule(self, request: InferRequest) -> InferResponse:
        runner = await self.pool.acquire()
        dequeued = time.monotonic_ns()
        self.executing += 1  # feeds nv_inference_pending_request_count
        try:
            execution = await runner.execute([request])  # on the instance's own thread
        finally:
            self.executing -= 1
            self.pool.release(runner)
        done = time.monotonic_ns()
        stats = self.version.stats
        rows = request.batch_size(self.version.max_batch_size)
        input_ns, infer_ns, output_ns = (
            execution.start_ns - dequeued,
            execution.end_ns - execution.start_ns,
            done - execution.end_ns,
        )
        result = execution.results[0]
        if isinstance(result, InferdError):
            stats.record_execution(rows, input_ns, infer_ns, output_ns, succeeded=0)
            stats.record_failure(done - request.arrival_ns)
            raise result
        stats.record_execution(rows, input_ns, infer_ns, output_ns)
        stats.record_success(done - request.arrival_ns, dequeued - request.arrival_ns, input_ns, infer_ns, output_ns)
        result.parameters["scheduler"] = "tagging"
        return result


@hookimpl
def inferd_register_schedulers(register: Register) -> None:
    register("direct", TaggingScheduler)  # factory(version) -> Scheduler
