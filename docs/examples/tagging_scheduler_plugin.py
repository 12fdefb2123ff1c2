"""A minimal scheduler plugin: the scheduler "tagging", which a model selects by name.

A model picks it in its config.pbtxt::

    parameters { key: "inferd_scheduler" value: { string_value: "tagging" } }

(without that parameter a model gets the built-in scheduler its ``dynamic_batching`` /
``sequence_batching`` / ``ensemble_scheduling`` section implies, as in Triton).

This one sends each request alone to the model's instances in turn (round robin), and adds the
response parameter ``scheduler: "tagging"`` so a client can tell. It records nothing: core's
runners time every execution and record its statistics and traces.
"""

from __future__ import annotations

import itertools

from inferd.api import (
    InferdError,
    InferRequest,
    InferResponse,
    Scheduler,
    SchedulerContext,
    SchedulerRegister,
    hookimpl,
)

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)


class TaggingScheduler(Scheduler):
    """One request per execution, on the instances in turn (a runner runs one batch at a time)."""

    def __init__(self, context: SchedulerContext) -> None:
        super().__init__(context)
        self.turns = itertools.cycle(context.runners)

    async def schedule(self, request: InferRequest) -> InferResponse:
        (outcome,) = await next(self.turns).run([request])
        if isinstance(outcome, InferdError):
            raise outcome
        outcome.parameters["scheduler"] = "tagging"
        return outcome


@hookimpl
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    register("tagging", TaggingScheduler)  # factory(context: SchedulerContext) -> Scheduler
