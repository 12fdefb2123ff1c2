"""Shadow copies: an answered request run again on its model's shadow version, after the client has
its answer, and the two answers compared (docs/traffic.md, "Shadow traffic"). The comparison and
the verdict are :mod:`inferd.engine.shadow`'s; this module only runs the copies."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from inferd.contracts.errors import InferdError
from inferd.contracts.types import InferRequest, InferResponse
from inferd.engine.shadow import Shadow, compare

if TYPE_CHECKING:
    from inferd.contracts.model_info import ModelInfo
    from inferd.engine.model_table import ModelTable
    from inferd.engine.traffic import TrafficSplit

#: A tensor parameter naming client shared memory (Triton's).
_REGION = "shared_memory_region"


class ShadowCopies:
    """The shadow copies in flight, run with ``run`` (the router's own request path)."""

    def __init__(self, table: ModelTable, run: Callable[[ModelInfo, InferRequest], Awaitable[InferResponse]]) -> None:
        self.table = table
        self._run = run
        self._shadow_tasks: set[asyncio.Task[None]] = set()

    def copy(self, split: TrafficSplit, info: ModelInfo, request: InferRequest, response: InferResponse) -> None:
        """Maybe copy an answered request to the split's shadow version: a task after the answer,
        dropped (and counted) while ``shadow_queue`` copies are in flight (docs/traffic.md)."""
        shadow = split.shadow
        if shadow is None or info.version == shadow.version or (shadow.rate < 1 and random.random() >= shadow.rate):
            return
        if shadow.inflight >= shadow.policy.queue or _in_shared_memory(request):
            shadow.dropped += 1
            return
        record = self.table.by_name.get(info.name)
        mv = record.serving.get(shadow.version) if record is not None else None
        if mv is None:
            shadow.dropped += 1
            return
        copy = InferRequest(
            request.model_name,
            str(shadow.version),
            request.id,
            request.inputs,  # the same tensors: the serving version is done with them
            request.outputs,
            dict(request.parameters),
        )
        shadow.inflight += 1
        task = asyncio.get_running_loop().create_task(self._run_shadow(split, shadow, mv.info, copy, response))
        self._shadow_tasks.add(task)
        task.add_done_callback(self._shadow_tasks.discard)

    async def _run_shadow(
        self, split: TrafficSplit, shadow: Shadow, info: ModelInfo, copy: InferRequest, serving: InferResponse
    ) -> None:
        start = time.perf_counter_ns()
        try:
            answer = await self._run(info, copy)
        except InferdError as exc:
            ok, agree, diff, why = False, False, float("inf"), f"shadow failed: {exc.message}"
        except Exception as exc:  # a shadow must never break anything else
            ok, agree, diff, why = False, False, float("inf"), f"shadow failed: {type(exc).__name__}: {exc}"
        else:
            ok = True
            agree, diff, why = compare(serving, answer, shadow.policy.atol, shadow.policy.rtol)
        finally:
            shadow.inflight -= 1
        if split.shadow is shadow and split.observe_shadow(
            copy.id, ok, agree, diff, why, time.perf_counter_ns() - start
        ):
            self.table.traffic.decided(info.name)


def _in_shared_memory(request: InferRequest) -> bool:
    """Whether a request reads or writes client shared memory (the client may reuse the region as
    soon as it has its answer: no copy of it is run later)."""
    return any(_REGION in t.parameters for t in request.inputs.values()) or any(
        _REGION in o.parameters for o in request.outputs
    )
