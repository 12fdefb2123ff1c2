"""On-demand loading (``--model-load-on-demand``) under a memory budget (``--model-memory-budget``).

A request for a model that is in the repository but not loaded (never loaded, unloaded, or
evicted) gets a placeholder from :meth:`OnDemand.pending` when the router resolves it, and the
router awaits :meth:`OnDemand.ready` before running it: every frontend resolves through the
router, and so do ensembles and Python models calling models (BLS). Concurrent requests for one
model wait for the same load, each for at most ``timeout`` seconds (then UNAVAILABLE, with a
``Retry-After``). A load that measures a footprint runs alone; loads of known footprints (reloads
after an eviction) run up to ``concurrency`` together (:mod:`inferd.lifecycle.load_slots`).

With a budget, a load first makes room: the least recently used models that are idle (no request
in flight, queued or waiting for them), not pinned and called by no loaded ensemble are evicted
(:func:`inferd.lifecycle.budget.choose_victims`); when nothing can go, the load waits for a model to
become idle, up to the timeout, then is refused with the reason. Nothing serving is unloaded but
by that rule. The budget counts the loads under way (their expected footprints) and the evictions
under way (until their memory is freed) besides the models loaded. With ``--workers N`` each worker
loads on demand with ``budget / N`` of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from inferd.contracts.model_info import ModelInfo
from inferd.engine import priority
from inferd.lifecycle.budget import Loaded, choose_victims, shown_bytes
from inferd.lifecycle.device_budget import no_room, on_devices
from inferd.lifecycle.load_slots import LoadSlots, default_concurrency
from inferd.lifecycle.on_demand_metrics import OnDemandCounts
from inferd.lifecycle.on_demand_parts import GONE, LOAD_ADVICE, RETRY_FAILED_S, LoadRefused, callers_of, placeholder
from inferd.lifecycle.reclaim import map_large_blocks

if TYPE_CHECKING:
    from inferd.lifecycle.manager import ModelManager

log = logging.getLogger(__name__)


class OnDemand:
    """Loads models on their first request, and evicts idle ones to stay under a budget."""

    def __init__(
        self,
        manager: ModelManager,
        timeout: float = 60.0,
        budget: int | None = None,
        device_budgets: Mapping[str, int] | None = None,
        concurrency: int = 0,
    ) -> None:
        self.manager = manager
        self.table = manager.table
        self.table.load_advice = LOAD_ADVICE
        #: How long a request waits for its model's load (and the load for room under the budget).
        self.timeout = timeout
        #: Bytes of resident memory the loaded models may hold (None: no budget).
        self.budget = budget
        #: Bytes the loaded models may hold on each device (``--model-device-memory-budget``).
        self.device_budgets = dict(device_budgets or {})
        self.memory = manager.memory
        self._loads: dict[str, asyncio.Future[None]] = {}
        #: Requests waiting for each model's load (such a model is busy: never evicted).
        self._waiting: Counter[str] = Counter()
        #: Measuring loads one at a time and alone, known ones up to ``concurrency`` (0: the default).
        self.slots = LoadSlots(concurrency or default_concurrency())
        #: The expected footprint of each load under way, and the footprint of each eviction under
        #: way: both count in the budget until the load is measured or the memory is freed.
        self._loading: dict[str, int] = {}
        self._evicting: dict[str, int] = {}
        #: When each model last finished loading (``time.time()``): a use, for the LRU order.
        self._loaded_at: dict[str, float] = {}
        #: What a model looked like when last loaded (its placeholders' signature), by key.
        self._shapes: dict[str, dict[int, ModelInfo]] = {}
        #: The files (their fingerprint) each model was last loaded from on demand.
        self._loaded_from: dict[str, str] = {}
        #: Models whose load on demand failed: the files they failed from and when (not retried for
        #: :data:`RETRY_FAILED_S` unless those files change).
        self._failed: dict[str, tuple[str, float]] = {}
        #: Why each load waiting for room under the budget cannot start yet.
        self._blocked: dict[str, str] = {}
        #: Loads, evictions, refusals and load latency (the ``/metrics`` families).
        self.counts = OnDemandCounts(self)
        if budget is not None:
            map_large_blocks()  # an evicted model's large arrays go back to the system as they are freed

    # -- the request path ---------------------------------------------------------------------------

    def pending(self, name: str, version: str = "") -> ModelInfo | None:
        """A placeholder for a request for ``name`` that is in the repository and serves no
        version (None otherwise: the table's error stands). The router awaits :meth:`ready` for it."""
        keys = self.table.keys_of(name)
        if len(keys) != 1:
            return None
        key = keys[0]
        source = self.table.snapshot.models.get(key)
        record = self.table.records.get(key)
        if source is None or (record is not None and record.serving):
            return None
        failed = self._failed.get(key)
        if failed is not None and failed[0] == source.fingerprint and time.monotonic() - failed[1] < RETRY_FAILED_S:
            return None  # its load failed just now from these files: the table's error says so
        number = int(version) if version.isdigit() else 0
        shapes = self._shapes.get(key, {})
        shape = shapes.get(number) or (shapes[max(shapes)] if shapes and not number else None)
        if shape is not None:
            return shape
        return placeholder(name, number, source.config)

    async def ready(self, name: str, version: str = "") -> ModelInfo:
        """The version serving ``name`` once its load on demand (this request's or one under way)
        is done; raises UNAVAILABLE past the timeout, or the table's error when the load failed."""
        keys = self.table.keys_of(name)
        key = keys[0] if len(keys) == 1 else name
        self._waiting[key] += 1
        try:
            record = self.table.records.get(key)
            if record is None or not record.serving:
                load = self._loads.get(key)
                if load is None:
                    load = self._loads[key] = asyncio.ensure_future(self._load(key))
                    load.add_done_callback(functools.partial(self._done, key))
                try:
                    await asyncio.wait_for(asyncio.shield(load), self.timeout)
                except TimeoutError:
                    self.counts.refusals[key] += 1
                    blocked = self._blocked.get(key)
                    raise LoadRefused(
                        blocked
                        or f"Request for model '{name}' timed out: it is loading on demand and was not ready within "
                        f"{self.timeout:g} s (--model-load-on-demand-timeout-secs); retry later",
                        max(1, math.ceil(self.timeout / 4)),
                    ) from None
            return self.table.resolve(name, version).info  # no await from here to the request's enqueue
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]

    def _done(self, key: str, load: asyncio.Future[None]) -> None:
        if self._loads.get(key) is load:
            del self._loads[key]
        if not load.cancelled():
            load.exception()  # retrieved: each waiter raised it already

    # -- loading and evicting -----------------------------------------------------------------------

    async def _load(self, key: str) -> None:
        priority.lowering()  # (this task's: its load, its evictions)
        known = self._known(key)
        async with self.slots.slot(measure=not known):
            record = self.table.records.get(key)
            if record is not None and record.serving:
                return  # loaded meanwhile (an explicit load, poll)
            source = self.table.snapshot.models.get(key)
            if source is None:
                return  # gone from the repository: the request's resolve says so
            if self.budget is not None or self.device_budgets:
                self._blocked.pop(key, None)
                await self._make_room(key, time.monotonic() + self.timeout)  # the refusal's reason stays for
                self._blocked.pop(key, None)  # the waiters whose own timeout comes in the same turn
            self._loading[key] = self.estimate(key)  # (no await since the room was made)
            started = time.monotonic()
            try:
                await self.manager.load_on_demand(key)
            finally:
                del self._loading[key]
            seconds = time.monotonic() - started
            record = self.table.records.get(key)
            if record is None or not record.serving:
                self._failed[key] = (source.fingerprint, time.monotonic())
                return
            if known:  # others loaded beside it: what the RSS grew by is not its own
                self.memory.rss[key] = max(0, known - self.memory.host.get(key, 0))
                self.manager.footprints[key] = self.manager.last_footprints[key] = known
            self._failed.pop(key, None)
            self._loaded_at[key] = time.time()
            self._remember(key)
            self.counts.observe(key, seconds)
            footprint = self.manager.footprints.get(key, 0)
            log.info(
                "model '%s' loaded on demand in %.3f s (footprint %s%s%s)",
                record.name,
                seconds,
                shown_bytes(footprint),
                on_devices(self.memory.device.get(key, {})),
                ""
                if self.budget is None
                else f"; budget {shown_bytes(self.used())} of {shown_bytes(self.budget)} used",
            )
            if self.budget is not None or self.device_budgets:
                await self._trim(key)

    def _known(self, key: str) -> int:
        """``key``'s footprint when its load need not measure it (0: it must): known from its last
        load, its files unchanged since, and no ensemble steps (each of those loads measures)."""
        source = self.table.snapshot.models.get(key)
        if source is None or source.step_models or self._loaded_from.get(key) != source.fingerprint:
            return 0
        return self.manager.last_footprints.get(key, 0)

    def _remember(self, key: str) -> None:
        record = self.table.records[key]
        self._shapes[key] = {v: dataclasses.replace(mv.info, handle=GONE) for v, mv in record.serving.items()}
        self._loaded_from[key] = self.table.snapshot.models[key].fingerprint

    async def _make_room(self, key: str, deadline: float) -> None:
        """Evict idle models until ``key``'s expected footprint fits; wait for one to become idle
        while none can go, up to ``deadline``, then refuse."""
        need, device_need = self.estimate(key), self.memory.last_device.get(key, {})
        self.manager.refresh_footprints()
        while True:
            victims = choose_victims(
                self.loaded(exclude=key), need + self.under_way(key), self.budget, device_need, self.device_budgets
            )
            if victims == []:
                return
            if victims is None:
                name = self.table.snapshot.models[key].name
                busy = sorted(r.name for k, r in self.table.records.items() if r.serving and k != key)
                self._blocked[key] = reason = no_room(name, need, device_need, self.budget, self.device_budgets, busy)
                if time.monotonic() >= deadline:
                    raise LoadRefused(reason, max(1, math.ceil(self.timeout / 4)))
                await asyncio.sleep(0.02)
                continue
            for victim in victims:
                await self._evict(victim)

    async def _trim(self, keep: str) -> None:
        """After a load that measured more than expected: evict idle models until under the budgets again."""
        need, device_need = self.memory.footprint(keep) + self.under_way(keep), self.memory.device.get(keep)
        victims = choose_victims(self.loaded(exclude=keep), need, self.budget, device_need, self.device_budgets)
        for victim in victims or ():
            await self._evict(victim)

    async def _evict(self, key: str) -> None:
        record = self.table.records.get(key)
        callers = self._callers()
        if record is None or not self.evictable(key, callers):  # it became busy since it was chosen
            return
        for ensemble in callers.get(key, ()):  # the loaded ensembles over it go first: they call it
            if self.table.records[ensemble].serving:
                await self._evict(ensemble)
        footprint = self.manager.footprints.get(key, 0)
        idle = max(0.0, time.time() - self.last_used(key))
        busy = sum(mv.scheduler.inflight() for mv in record.serving.values()) + self._waiting.get(key, 0)
        started = time.monotonic()
        self._evicting[key] = footprint
        try:
            await self.manager.evict(key)
        finally:
            del self._evicting[key]
        self.counts.evictions[key] += 1
        log.info(
            "model '%s' evicted (idle %.1f s, %d requests in flight or queued, footprint %s) to make room under the "
            "memory budget, in %.3f s",
            record.name,
            idle,
            busy,
            shown_bytes(footprint),
            time.monotonic() - started,
        )

    # -- what the budget sees ----------------------------------------------------------------------

    def names(self) -> dict[str, str]:
        """Each model's name by key."""
        return {k: r.name for k, r in self.table.records.items()}

    def footprints(self) -> dict[str, int]:
        """Each loaded model's footprint (bytes) by key."""
        return dict(self.manager.footprints)

    def used(self) -> int:
        """Bytes the loaded models hold, as measured when each loaded."""
        return sum(self.manager.footprints.get(k, 0) for k, r in self.table.records.items() if r.serving)

    def under_way(self, exclude: str = "") -> int:
        """Bytes the loads under way (their expected footprints, until measured) and the evictions
        under way (until freed) hold of the budget, but ``exclude``'s."""
        measured = self.manager.footprints
        loading = sum(size for k, size in self._loading.items() if k != exclude and k not in measured)
        return loading + sum(self._evicting.values())

    def estimate(self, key: str) -> int:
        """What loading ``key`` will take: its last footprint, else the mean of those measured."""
        known = self.manager.footprints.get(key) or self._last_footprint.get(key)
        if known:
            return known
        measured = [f for f in self.manager.footprints.values() if f > 0]
        return sum(measured) // len(measured) if measured else 0

    @property
    def _last_footprint(self) -> dict[str, int]:
        return self.manager.last_footprints

    def last_used(self, key: str) -> float:
        """When ``key`` last finished a request or a load (``time.time()``)."""
        record = self.table.records.get(key)
        served = (
            max((mv.stats.last_inference_ms / 1000 for mv in record.serving.values()), default=0.0) if record else 0.0
        )
        return max(served, self._loaded_at.get(key, 0.0))

    def evictable(self, key: str, callers: dict[str, set[str]] | None = None) -> bool:
        """Idle (nothing in flight, queued or waiting for it), not pinned, and, for a step of loaded
        ensembles, each of them idle and not pinned too (they are evicted with it)."""
        if callers is None:
            callers = self._callers()
        return self._free(key) and all(self._free(c) for c in callers.get(key, ()))

    def _free(self, key: str) -> bool:
        record = self.table.records.get(key)
        if record is None or not record.serving or self._waiting.get(key) or key in self._loads:
            return False
        if key in self._evicting:  # (another load's eviction of it is under way)
            return False
        if any(mv.scheduler.inflight() for mv in record.serving.values()):
            return False
        return not self.manager.pinned(key)

    def _callers(self) -> dict[str, set[str]]:
        """The loaded ensembles over each model (those over them included)."""
        return callers_of(self.manager.serving_calls())

    def loaded(self, exclude: str = "") -> list[Loaded]:
        callers, device = self._callers(), self.memory.device.get
        return [
            Loaded(k, self.manager.footprints.get(k, 0), self.last_used(k), self.evictable(k, callers), device(k, {}))
            for k, r in self.table.records.items()
            if r.serving and k != exclude and exclude not in callers.get(k, ())
        ]
