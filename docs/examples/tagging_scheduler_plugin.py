"""A minimal scheduler plugin: replaces the built-in "direct" scheduler.

Core chooses a scheduler by name from the model's config ("direct" when the config has no
``dynamic_batching``, ``sequence_batching`` or ``ensemble_scheduling``), so a scheduler plugin
provides one of those names. The built-in plugin that registers the name must be blocked:
``INFERD_DISABLE_PLUGINS=schedulers`` (the plugin "schedulers" registers only "direct").

This one sends each request alone to the model's instances in turn (round robin), and adds the
response parameter ``scheduler: "tagging"`` so a client can tell. It records nothing: core's
runners time every execution and record its statistics and traces.
"""

from __future__ import annotations

import itertools

from inferd.contracts.errors import InferdError
from inferd.contracts.hookspecs import SchedulerRegister, hookimpl
from inferd.contracts.scheduler import Scheduler, SchedulerContext
from inferd.contracts.types import InferRequest, InferResponse


class TaggingScheduler(Scheduler):
    """One request per execution, on the instances in turn (a runner runs one batch at a time)."""

    def __init__(self, context: SchedulerContext) -> None:
        super().__init__(context)
        self.turns = itertools.cycle(context.runners)

    async def _schedule(self, request: InferRequest) -> InferResponse:
        (outcome,) = await next(self.turns).run([request])
        if isinstance(outcome, InferdError):
            raise outcome
        outcome.parameters["scheduler"] = "tagging"
        return outcome


@hookimpl
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    register("direct", TaggingScheduler)  # factory(context: SchedulerContext) -> Scheduler
