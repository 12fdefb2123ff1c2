"""The data plane of one worker of ``inferd serve --workers N``: the local plane, spanning its peers.

:class:`ClusterDataPlane` implements the same :class:`~inferd.contracts.dataplane.DataPlane` as the
:class:`~inferd.dataplane.LocalDataPlane` it wraps: the request path is the local plane's own
(the same bound methods, no call in between); the server-wide answers are the whole server's
(readiness, statistics, metrics and usage count every worker) and repository control and settings
changes are applied on every worker before the call returns. What a peer asks of this worker is
answered by :class:`~inferd.workers.local.WorkerOps` through the methods under "this worker's part".
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from inferd.contracts.dataplane import DataPlane, OtherWorkers
from inferd.contracts.errors import InferdError
from inferd.dataplane import usage_from_families
from inferd.engine.metric_sources import SOURCES
from inferd.repository.scan import check_model_name
from inferd.workers import merge
from inferd.workers.counts import Counts, CountsFile

if TYPE_CHECKING:
    from inferd import config as cfg
    from inferd.contracts.dataplane import (
        LogSettings,
        ModelMetadata,
        ModelStatistics,
        PlaneSettings,
        RepositoryEntry,
        ServedModel,
        ServerMetadata,
        ServingVersion,
        TraceSettings,
        Traffic,
        UsageReport,
    )
    from inferd.contracts.trace import Tracer
    from inferd.dataplane import LocalDataPlane
    from inferd.workers.peers import Peers
    from inferd.workers.shared_memory import ClusterSharedMemory

R = TypeVar("R")

log = logging.getLogger(__name__)


class ClusterDataPlane(DataPlane):
    """``local`` (this worker) and ``peers`` (the other workers) answering as one server."""

    def __init__(self, local: LocalDataPlane, peers: Peers, shared_memory: ClusterSharedMemory) -> None:
        """``shared_memory``: the regions ``local`` was built with, which span the workers."""
        self.local = local
        self.peers = peers
        self._shared_memory = shared_memory
        #: This worker's counters as the others read them once it is gone (``inferd.workers.counts``).
        self.counts = CountsFile(peers.slot.directory, self.own_counts)
        #: Load parameters of the models loaded through the API (as JSON carries them), for a restarted worker.
        self.loaded_with: dict[str, dict[str, Any]] = {}
        self.resolve = local.resolve
        self.infer = local.infer
        self.stream = local.stream
        self.access_log = local.access_log

    @property
    def settings(self) -> PlaneSettings:
        return self.local.settings

    @property
    def shared_memory(self) -> ClusterSharedMemory:
        return self._shared_memory

    @property
    def tracer(self) -> Tracer:
        return self.local.tracer

    # -- this worker's answers, unchanged -------------------------------------------------------

    def is_live(self) -> bool:
        return self.local.is_live()

    async def model_ready(self, name: str, version: str = "") -> bool:
        return await self.local.model_ready(name, version)

    def server_metadata(self) -> ServerMetadata:
        return self.local.server_metadata()

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        return self.local.model_metadata(name, version)

    def model_config(self, name: str, version: str = "") -> cfg.ModelConfig:
        return self.local.model_config(name, version)

    def model_names(self) -> list[str]:
        return self.local.model_names()

    def served_models(self) -> Sequence[ServedModel]:
        return self.local.served_models()

    def served_model(self, name: str, version: str = "") -> ServedModel:
        return self.local.served_model(name, version)

    def routed_model(self, name: str) -> ServedModel:
        return self.local.routed_model(name)

    async def load_on_demand(self, name: str) -> None:
        await self.local.load_on_demand(name)  # each worker loads on demand under its own share

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        return self.local.repository_index(ready_only)

    def check_control(self) -> None:
        self.local.check_control()

    def serving_versions(self) -> Sequence[ServingVersion]:
        return self.local.serving_versions()

    def trace_settings(self, model: str = "") -> TraceSettings:
        return self.local.trace_settings(model)

    def log_settings(self) -> LogSettings:
        return self.local.log_settings()

    def traffic(self, name: str) -> Traffic:
        return self.local.traffic(name)

    # -- the whole server's answers -------------------------------------------------------------

    async def is_ready(self) -> bool:
        """Ready when this worker is and every other one says it is."""
        return await self.local.is_ready() and await self.peers.all_ready()

    async def model_statistics(self, name: str = "", version: str = "") -> list[ModelStatistics]:
        entries = self.local.statistics_entries(name, version)
        await self.save_counts()  # after reading ours: what it saves is never less than what we answer
        entries = merge.statistics(entries, [c["stats"] for c in await self.other_counts()])
        return self.local.typed_statistics(entries)

    async def with_other_workers(self, read: Callable[[OtherWorkers | None], R]) -> R:
        """``read`` the other workers' counters (asked first, off the event loop); this worker's
        are saved after (see :mod:`inferd.workers.counts`)."""
        others = await self.other_counts()
        result = read(
            OtherWorkers(
                merge.snapshots([c["snapshots"] for c in others]),
                [c["sources"] for c in others],
                [c["live"] for c in others if "live" in c],
            )
        )
        await self.save_counts()
        return result

    async def tenant_usage(self) -> UsageReport:
        others = await self.other_counts()
        await self.save_counts()
        return usage_from_families(self.local.usage_sources().summed([c["sources"] for c in others]))

    async def update_trace_settings(self, settings: dict[str, Any], model: str = "") -> TraceSettings:
        current = await self.local.update_trace_settings(settings, model)
        await self.peers.ask_each("trace", {"settings": settings, "model": model})
        return current

    async def update_log_settings(self, settings: dict[str, Any]) -> LogSettings:
        current = await self.local.update_log_settings(settings)
        await self.peers.ask_each("log", {"settings": settings})
        return current

    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        self.local.check_control()
        check_model_name(name)
        wire = await asyncio.to_thread(_wire_parameters, parameters or {})
        await self._everywhere(self.take_load(name, wire), "load", {"name": name, "parameters": wire})

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self.local.check_control()
        args = {"name": name, "unload_dependents": unload_dependents}
        await self._everywhere(self.take_unload(name, unload_dependents), "unload", args)

    async def set_traffic(self, name: str, weights: Any, shadow: str | None = None) -> Traffic:
        shown = await self.local.set_traffic(name, weights, shadow)
        await self.send_traffic(name, self.local.table.traffic.splits[name].wire())
        return shown

    async def send_traffic(self, name: str, wire: dict[str, Any]) -> None:
        """Give the other workers ``name``'s split as it is here (set through the API, or changed by
        the canary policy)."""
        await self.peers.ask_each("traffic", {"name": name, "wire": wire})

    async def _everywhere(self, local: Awaitable[None], op: str, args: dict[str, Any]) -> None:
        """Run ``local`` here and ``op`` on every peer at once; this worker's error wins, then a peer's."""
        mine, theirs = await asyncio.gather(local, self.peers.ask_all(op, args), return_exceptions=True)
        if isinstance(mine, BaseException):
            raise mine
        for error in theirs if isinstance(theirs, list) else [theirs]:
            if error is not None:
                raise error

    # -- this worker's part (what peers ask for) --------------------------------------------------

    async def take_load(self, name: str, wire: dict[str, Any]) -> None:
        """Load ``name`` here with ``wire`` parameters (``file:`` contents as base64 text) and keep
        them for a worker that restarts."""
        await self.local.load_model(name, wire)
        self.loaded_with[name] = wire

    async def take_unload(self, name: str, unload_dependents: bool = False) -> None:
        await self.local.unload_model(name, unload_dependents)
        self.loaded_with.pop(name, None)

    def own_counts(self) -> Counts:
        """This worker's counters, as the other workers sum them (see :mod:`inferd.workers.counts`)."""
        serving = list(self.local.table.serving())
        snapshots = [[mv.name, mv.version, mv.stats.snapshot(), mv.namespace] for mv in serving]
        sources = SOURCES.snapshot()
        pending = [[mv.name, str(mv.version), mv.namespace, _pending(mv)] for mv in serving]
        return {
            "pid": os.getpid(),
            "stats": self.local.statistics_entries(),
            "snapshots": snapshots,
            "sources": sources,
            # What this worker holds now (queued requests, gauges): summed only from live answers.
            "live": {"pending": pending, "gauges": [f for f in sources if f[1] == "gauge"]},
        }

    async def save_counts(self) -> None:
        """Write this worker's counters where the others find them once it is gone. Call it after
        reading the counters an answer reports, before answering."""
        await asyncio.to_thread(self.counts.save)

    async def other_counts(self) -> list[Counts]:
        """The other workers' counters, live or last reported, and the dead workers' totals; asked
        at once, none blocking the event loop."""
        return await asyncio.to_thread(self.counts.others, await self.peers.ask_each("counts"))

    def state(self) -> dict[str, Any]:
        """What a restarted worker takes from a running one (see :meth:`catch_up`)."""
        local = self.local
        table = local.table
        return {
            "ready": local.health.started,
            "loads": self.loaded_with,
            "serving": sorted({mv.name for mv in table.serving()}),
            "poll_added": sorted(table.poll_added),
            "log": {k: v for k, v in local.log_config.as_json().items() if k != "log_file"},
            "trace": {k: v for k, v in local.tracer.settings().items() if k != "trace_file"},
            "shared_memory": self.shared_memory.state(),
            "traffic": {name: split.wire() for name, split in table.traffic.splits.items()},
        }

    async def catch_up(self) -> bool:
        """A worker (re)started beside running ones takes their API loads and their settings;
        whether there were running ones (false while the server starts)."""
        states = await self.peers.ask_each("state")
        state = next((s for s in states if s["ready"]), None)
        if state is None:
            return False  # the server is starting: every worker starts from the same options
        local = self.local
        try:
            local.log_config.update(state["log"])
            local.tracer.update(state["trace"])
        except InferdError as exc:
            log.warning("could not take the running workers' log or trace settings: %s", exc.message)
        self.shared_memory.catch_up(state.get("shared_memory", []))
        local.table.poll_added.update(state.get("poll_added", []))
        for name, parameters in state["loads"].items():
            if name in state["serving"]:
                try:
                    await self.take_load(name, parameters)
                except InferdError as exc:
                    log.warning("could not load '%s' as the running workers have it: %s", name, exc.message)
        for name, wire in state.get("traffic", {}).items():  # after the loads: the versions serve
            local.apply_traffic(name, wire)
        return True


def _pending(mv: Any) -> int:
    """Requests ``mv``'s scheduler holds that no instance runs yet (0 without a scheduler)."""
    pending = getattr(getattr(mv, "scheduler", None), "pending", None)
    return int(pending()) if callable(pending) else 0


def _wire_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """Load parameters as JSON carries them to the other workers: ``file:`` bytes as base64 text."""
    return {k: _wire_value(v) for k, v in parameters.items()}


def _wire_value(value: Any) -> Any:
    """A load parameter as JSON carries it: ``file:`` bytes as base64 text."""
    return base64.b64encode(value).decode() if isinstance(value, (bytes, bytearray)) else value
