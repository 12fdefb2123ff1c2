"""A worker's answers to its peers' control requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from inferd.contracts.errors import InferdError
from inferd.workers.repositories import rescan_and_apply

if TYPE_CHECKING:
    from inferd.workers.cluster import ClusterDataPlane

log = logging.getLogger(__name__)

#: How long the ``alive`` check waits for the event loop.
ALIVE_S = 2.0
#: How long the ``ready`` answer waits for the event loop and the models' own checks (``Model.check_ready``).
READY_S = 10.0


class WorkerOps:
    """The :data:`~inferd.workers.control.Handler` of one worker: reads run on the control thread,
    model loads, unloads and rescans on the worker's event loop (the asker waits for them)."""

    def __init__(self, cluster: ClusterDataPlane, loop: asyncio.AbstractEventLoop) -> None:
        self.cluster = cluster
        self.local = local = cluster.local
        self.loop = loop
        self._ops: dict[str, Callable[[dict[str, Any]], Any]] = {
            "ready": lambda args: asyncio.run_coroutine_threadsafe(local.is_ready(), self.loop).result(READY_S),
            "started": lambda args: local.health.started,
            "alive": self._alive,
            "counts": lambda args: cluster.counts.save(),
            "trace": self._trace,
            "log": self._log,
            "state": lambda args: cluster.state(),
            "load": lambda args: self._on_loop(cluster.take_load(args["name"], args["parameters"])),
            "unload": lambda args: self._on_loop(cluster.take_unload(args["name"], args["unload_dependents"])),
            "traffic": lambda args: self.loop.call_soon_threadsafe(local.apply_traffic, args["name"], args["wire"]),
            "rescan": lambda args: self._on_loop(rescan_and_apply(local.manager)),
            cluster.shared_memory.OP: cluster.shared_memory.apply,
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
            self.local.tracer.update(args["settings"], args["model"])
        except InferdError as exc:
            log.warning("trace settings from another worker not applied: %s", exc.message)

    def _log(self, args: dict[str, Any]) -> None:
        try:
            self.local.log_config.update(args["settings"])
        except InferdError as exc:
            log.warning("log settings from another worker not applied: %s", exc.message)
