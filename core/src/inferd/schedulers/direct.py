"""Built-in schedulers, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

from inferd.api import InstancePool
from inferd.contracts.errors import InferdError
from inferd.contracts.hookspecs import SchedulerRegister, hookimpl
from inferd.contracts.scheduler import Scheduler, SchedulerContext
from inferd.contracts.types import InferRequest, InferResponse


class DirectScheduler(Scheduler):
    """Triton's default scheduler: no batching; each request goes to the next free instance."""

    def __init__(self, context: SchedulerContext) -> None:
        super().__init__(context)
        self.pool = InstancePool(context.runners)

    async def schedule(self, request: InferRequest) -> InferResponse:
        (outcome,) = await self.pool.run([request])
        if isinstance(outcome, InferdError):
            raise outcome
        return outcome


@hookimpl
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    register("direct", DirectScheduler)
