"""The ``/metrics`` families of on-demand loading (:mod:`inferd.lifecycle.on_demand`): loads on
demand, evictions, refusals, the load-latency histogram, each model's footprint and the budget's use,
on the host and on each device a backend reports (``Model.memory_usage``)."""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily, Metric

from inferd.engine.metric_sources import SOURCES

if TYPE_CHECKING:
    from inferd.lifecycle.model_memory import ModelMemory

#: Upper bounds (seconds) of the load-latency histogram's buckets.
LOAD_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Counted(Protocol):
    """What the families read of on-demand loading (:class:`inferd.lifecycle.on_demand.OnDemand`)."""

    budget: int | None
    device_budgets: dict[str, int]
    memory: ModelMemory

    def names(self) -> dict[str, str]:
        """Each model's name by key."""
        ...

    def footprints(self) -> dict[str, int]:
        """Each loaded model's footprint (bytes) by key."""
        ...

    def used(self) -> int:
        """Bytes the loaded models hold."""
        ...


class OnDemandCounts:
    """What one server's on-demand loading counted, and its families."""

    def __init__(self, owner: Counted) -> None:
        self._owner = weakref.ref(owner)
        self.loads: Counter[str] = Counter()
        self.evictions: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self._latency_buckets = [0] * (len(LOAD_BUCKETS) + 1)
        self._latency_sum = 0.0
        _ALL.add(self)

    def observe(self, key: str, seconds: float) -> None:
        """One load on demand of ``key`` that took ``seconds``."""
        self.loads[key] += 1
        self._latency_sum += seconds
        for i, bound in enumerate(LOAD_BUCKETS):
            if seconds <= bound:
                self._latency_buckets[i] += 1
                break
        else:
            self._latency_buckets[-1] += 1

    def collect(self) -> Iterator[Metric]:
        """The families of ``/metrics``."""
        owner = self._owner()
        if owner is None:
            return
        names = owner.names()
        for name, text, counts in (
            ("inferd_model_loads_on_demand_total", "Models loaded by a request (--model-load-on-demand)", self.loads),
            ("inferd_model_evictions_total", "Idle models unloaded to stay under the memory budget", self.evictions),
            (
                "inferd_model_load_on_demand_refused_total",
                "Requests refused: their model could not load in time",
                self.refusals,
            ),
        ):
            family = Metric(name, text, "counter")
            family.name = name  # as named: prometheus_client would drop a counter's "_total"
            for key, n in sorted(counts.items()):
                family.add_sample(name, {"model": names.get(key, key)}, n)
            yield family
        cumulative, buckets = 0, []
        for bound, n in zip((*map(str, LOAD_BUCKETS), "+Inf"), self._latency_buckets, strict=True):
            cumulative += n
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            "inferd_model_load_on_demand_duration_seconds",
            "Time a load on demand took (what a cold request waits, besides its own inference)",
            buckets=buckets,
            sum_value=self._latency_sum,
        )
        footprint = GaugeMetricFamily(
            "inferd_model_footprint_bytes",
            "Resident memory each loaded model holds: the RSS growth over its load, plus what its backend "
            "reports outside the server's process (a process-isolated model's stubs)",
            labels=["model"],
        )
        for key, size in sorted(owner.footprints().items()):
            footprint.add_metric([names.get(key, key)], size)
        yield footprint
        on_device = GaugeMetricFamily(
            "inferd_model_device_footprint_bytes",
            "Device memory each loaded model holds, as its backend reports it",
            labels=["model", "device"],
        )
        for key, sizes in sorted(owner.memory.device.items()):
            for device, size in sorted(sizes.items()):
                on_device.add_metric([names.get(key, key), device], size)
        yield on_device
        if owner.budget is not None:
            yield GaugeMetricFamily("inferd_model_memory_budget_bytes", "--model-memory-budget", value=owner.budget)
            yield GaugeMetricFamily(
                "inferd_model_memory_budget_used_bytes", "Footprints of the models loaded now", value=owner.used()
            )
        if owner.device_budgets:
            budgets = GaugeMetricFamily(
                "inferd_model_device_memory_budget_bytes", "--model-device-memory-budget", labels=["device"]
            )
            used = GaugeMetricFamily(
                "inferd_model_device_memory_budget_used_bytes",
                "Device memory the models loaded now hold, as their backends last reported it",
                labels=["device"],
            )
            held = owner.memory.device_used()
            for device, size in sorted(owner.device_budgets.items()):
                budgets.add_metric([device], size)
                used.add_metric([device], held.get(device, 0))
            yield budgets
            yield used


_ALL: weakref.WeakSet[OnDemandCounts] = weakref.WeakSet()


class _Collector:
    """Every live server's on-demand families (one per server in this process)."""

    def collect(self) -> Iterator[Metric]:
        for counts in list(_ALL):
            yield from counts.collect()


SOURCES.add(_Collector())
