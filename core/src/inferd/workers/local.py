"""A worker's answers to its peers' control requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from inferd.contracts.errors import InferdError
from inferd.workers.repositories import rescan_and_apply

if TYPE_CHECKING:
    from inferd.dataplane import DataPlane

log = logging.getLogger(__name__)

#: How long the ``alive`` check waits for the event loop.
ALIVE_S = 2.0
#: How long the ``ready`` answer waits for the event loop and the models' own checks (``Model.check_ready``).
READY_S = 10.0


class WorkerOps:
    """The :data:`~inferd.workers.control.Handler` of one worker: reads run on the control thread,
    model loads, unloads and rescans on the worker's event loop (the asker waits for them)."""

    def __init__(self, dataplane: DataPlane, loop: asyncio.AbstractEventLoop) -> None:
        self.dp = dataplane
        self.loop = loop
        self._ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ready": lambda args: asyncio.run_coroutine_threadsafe(self.dp.local_ready(), self.loop).result(READY_S),
            "started": lambda args: self.dp.health.started,
            "alive": self._alive,
            "counts": lambda args: self.dp.counts.save() if self.dp.counts is not None else None,
            "trace": self._trace,
            "log": self._log,
            "state": lambda args: self.dp.local_state(),
            "load": lambda args: self._on_loop(self.dp.load_locally(args["name"], args["parameters"])),
            "unload": lambda args: self._on_loop(self.dp.unload_locally(args["name"], args["unload_dependents"])),
            "traffic": lambda args: self.loop.call_soon_threadsafe(self.dp.apply_traffic, args["name"], args["wire"]),
            "rescan": lambda args: self._on_loop(rescan_and_apply(self.dp.manager)),
            self.dp.shared_memory.OP: self.dp.shared_memory.apply_locally,
        }

    def __call__(self, op: str, args: dict[str, Any]) -> Any:
        return self._ops[op](args)

    def _on_loop(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(work, self.loop).result()

    def _alive(self, args: dict[str, Any]) -> bool:
        """The supervisor's health check: answered once the event loop runs a callback (a wedged loop
        does not, and the supervisor restarts the worker)."""
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop).result(timeout=ALIVE_S)
        return True

    def _trace(self, args: dict[str, Any]) -> None:
        try:
            self.dp.tracer.update(args["settings"], args["model"])
        except InferdError as exc:
            log.warning("trace settings from another worker not applied: %s", exc.message)

    def _log(self, args: dict[str, Any]) -> None:
        try:
            self.dp.log_config.update(args["settings"])
        except InferdError as exc:
            log.warning("log settings from another worker not applied: %s", exc.message)
