"""Triton's metric families as ``prometheus_client`` custom collectors.

Every per-model number is read from the version's :class:`~inferd.contracts.stats.VersionStats` (the object
the statistics extension reads), so ``/metrics`` and ``/v2/models/stats`` always agree:
durations are the statistics' nanoseconds divided by 1000, rounded down. Families with no sample
are left out, as prometheus-cpp does. With ``--model-namespacing`` every per-model series has a
``namespace`` label, the version's repository (as Triton labels them), between ``model`` and the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, SummaryMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from inferd.contracts.stats import FAILURE_REASONS
from inferd.frontends.metrics.exposition import number
from inferd.frontends.metrics.latency import LatencyConfig, LatencyWindows

if TYPE_CHECKING:
    from inferd.contracts.dataplane import ServingVersion
    from inferd.frontends.metrics.system import CpuMetrics, GpuMetrics

MODEL = ("model", "version")
#: ``--model-namespacing``: Triton's labels then (prometheus-cpp writes them sorted by name).
MODEL_NS = ("model", "namespace", "version")


_COUNTERS = (
    (
        "nv_inference_request_duration_us",
        "success",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_duration_us",
        "queue",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "compute_input",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "compute_infer",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "compute_output",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
)
_CACHE = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model"),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model"),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds"),
    ("nv_cache_miss_duration_per_model", "Total cache miss (insert+lookup) duration per model, in microseconds"),
)
_SUMMARIES = (
    (
        "nv_inference_request_summary_us",
        "request",
        "success",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_summary_us",
        "queue",
        "queue",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_summary_us",
        "compute_input",
        "compute_input",
        "Summary of compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "compute_infer",
        "compute_infer",
        "Summary of compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_summary_us",
        "compute_output",
        "compute_output",
        "Summary of compute output duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_cache_hit_summary_per_model",
        "cache_hit",
        "cache_hit",
        "Summary of cache hit durations per model, in microseconds",
    ),
    (
        "nv_cache_miss_summary_per_model",
        "cache_miss",
        "cache_miss",
        "Summary of cache miss (lookup + insert) durations per model, in microseconds",
    ),
)


def cache_enabled(mv: ServingVersion) -> bool:
    return getattr(mv, "cache", None) is not None or bool(mv.config.response_cache.enable)


class _ModelFamilies:
    """The per-model families of one scrape, filled one model version at a time."""

    def __init__(self, config: LatencyConfig, namespacing: bool = False) -> None:
        self.config = config
        self.namespacing = namespacing
        self.labels = labels = MODEL_NS if namespacing else MODEL
        self.success = CounterMetricFamily(
            "nv_inference_request_success", "Number of successful inference requests, all batch sizes", labels=labels
        )
        self.failure = CounterMetricFamily(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            labels=(*labels[:-1], "reason", "version"),
        )
        self.count = CounterMetricFamily(
            "nv_inference_count", "Number of inferences performed (does not include cached requests)", labels=labels
        )
        self.execs = CounterMetricFamily(
            "nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)",
            labels=labels,
        )
        self.durations = [CounterMetricFamily(name, text, labels=labels) for name, _, text in _COUNTERS]
        self.pending = GaugeMetricFamily(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            labels=labels,
        )
        self.load = GaugeMetricFamily("nv_model_load_duration_secs", "Model load time in seconds", labels=labels)
        self.cache = [CounterMetricFamily(name, text, labels=labels) for name, text in _CACHE]
        self.summaries = [SummaryMetricFamily(name, text, labels=labels) for name, _, _, text in _SUMMARIES]
        self.histogram = HistogramMetricFamily(
            "nv_inference_first_response_histogram_ms",
            "Duration from request to first response in milliseconds",
            labels=labels,
        )

    def all(self) -> list[Metric]:
        return [
            self.success,
            self.failure,
            self.count,
            self.execs,
            *self.durations,
            self.pending,
            self.load,
            *self.cache,
            *self.summaries,
            self.histogram,
        ]

    def add(self, mv: ServingVersion) -> None:
        key = [mv.name, mv.namespace, str(mv.version)] if self.namespacing else [mv.name, str(mv.version)]
        snap = mv.stats.snapshot()
        d = snap["durations"]
        self.success.add_metric(key, d["success"][0])
        for reason in FAILURE_REASONS:
            self.failure.add_metric([*key[:-1], reason, key[-1]], snap["failures"][reason])
        self.count.add_metric(key, snap["inference_count"])
        self.execs.add_metric(key, snap["execution_count"])
        self.pending.add_metric(key, _pending(mv))
        if snap["load_duration_ns"]:
            self.load.add_metric(key, snap["load_duration_ns"] / 1e9)
        cached = cache_enabled(mv)
        if self.config.counters:
            self._add_counters(key, d, cached)
        windows = mv.stats.observer
        if isinstance(windows, LatencyWindows):
            if self.config.summaries:
                self._add_summaries(windows, dict(zip(self.labels, key, strict=True)), d, cached)
            self._add_histogram(windows, dict(zip(self.labels, key, strict=True)))

    def _add_counters(self, key: list[str], d: dict[str, tuple[int, int]], cached: bool) -> None:
        for family, (_, name, _) in zip(self.durations, _COUNTERS, strict=True):
            family.add_metric(key, d[name][1] // 1000)
        if cached:
            values = (d["cache_hit"][0], d["cache_miss"][0], d["cache_hit"][1] // 1000, d["cache_miss"][1] // 1000)
            for family, value in zip(self.cache, values, strict=True):
                family.add_metric(key, value)

    def _add_summaries(
        self, windows: LatencyWindows, labels: dict[str, str], d: dict[str, tuple[int, int]], cached: bool
    ) -> None:
        """Quantiles over the window; ``_count`` and ``_sum`` from the counters (so they match)."""
        for family, (_, kind, key, _) in zip(self.summaries, _SUMMARIES, strict=True):
            if kind.startswith("cache") and not cached:
                continue
            if kind == "request" and cached:
                continue  # as Triton: misleading with cache hits in it
            for q, value in windows.quantiles(kind):
                family.add_sample(family.name, {**labels, "quantile": number(q)}, value)
            family.add_sample(family.name + "_sum", labels, d[key][1] // 1000)
            family.add_sample(family.name + "_count", labels, d[key][0])

    def _add_histogram(self, windows: LatencyWindows, labels: dict[str, str]) -> None:
        snap = windows.histogram_snapshot()
        if snap is None:
            return
        bounds, counts, total, n = snap
        name = self.histogram.name
        for bound, c in zip(bounds, counts, strict=True):
            le = int(bound) if float(bound).is_integer() else bound
            self.histogram.add_sample(name + "_bucket", {**labels, "le": number(le)}, c)
        self.histogram.add_sample(name + "_bucket", {**labels, "le": "+Inf"}, n)
        self.histogram.add_sample(name + "_sum", labels, total)
        self.histogram.add_sample(name + "_count", labels, n)


def _pending(mv: ServingVersion) -> int:
    """Requests queued for ``mv`` here, plus those the other live workers hold (``--workers N``)."""
    pending = getattr(getattr(mv, "scheduler", None), "pending", None)
    here = int(pending()) if callable(pending) else 0
    return here + int(getattr(mv, "peer_pending", 0))


class ModelCollector(Collector):
    """``nv_inference_*``, ``nv_cache_*`` and ``nv_model_load_duration_secs`` of every serving version."""

    def __init__(
        self, versions: Callable[[], Sequence[ServingVersion]], config: LatencyConfig, namespacing: bool = False
    ) -> None:
        self.versions = versions
        self.config = config
        #: ``--model-namespacing``: every series has a ``namespace`` label.
        self.namespacing = namespacing

    def collect(self) -> Iterable[Metric]:
        families = _ModelFamilies(self.config, self.namespacing)
        for mv in self.versions():
            families.add(mv)
        return [f for f in families.all() if f.samples]


_CPU = (
    ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "utilization"),
    ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "memory_total"),
    ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "memory_used"),
)
_GPU = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "utilization"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "memory_total"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "memory_used"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "power_usage"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "power_limit"),
)


class SystemCollector(Collector):
    """``nv_cpu_*`` and ``nv_gpu_*`` gauges (and ``nv_energy_consumption``) from the last interval's samples."""

    def __init__(self, cpu: CpuMetrics | None, gpu: GpuMetrics | None) -> None:
        self.cpu = cpu
        self.gpu = gpu

    def collect(self) -> Iterable[Metric]:
        out: list[Metric] = []
        if self.cpu is not None and self.cpu.available:
            s = self.cpu.sample
            out += [GaugeMetricFamily(name, text, value=getattr(s, attr)) for name, text, attr in _CPU]
        if self.gpu is not None and self.gpu.samples:
            for name, text, attr in _GPU:
                gauge = GaugeMetricFamily(name, text, labels=["gpu_uuid"])
                for g in self.gpu.samples:
                    gauge.add_metric([g.uuid], getattr(g, attr))
                out.append(gauge)
            energy = CounterMetricFamily(
                "nv_energy_consumption",
                "GPU energy consumption in joules since the server started",
                labels=["gpu_uuid"],
            )
            for g in self.gpu.samples:
                energy.add_metric([g.uuid], g.energy)
            out.append(energy)
        return out
