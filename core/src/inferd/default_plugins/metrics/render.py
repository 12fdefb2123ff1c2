"""Triton's metric families in the Prometheus text exposition format (version 0.0.4).

Every per-model number is read from the version's :class:`~inferd.stats.ModelStats` (the object
the statistics extension reads), so ``/metrics`` and ``/v2/models/stats`` always agree:
durations are the statistics' nanoseconds divided by 1000, rounded down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferd.default_plugins.metrics.latency import LatencyConfig, LatencyWindows
from inferd.stats import FAILURE_REASONS

if TYPE_CHECKING:
    from inferd.default_plugins.metrics.system import CpuMetrics, GpuMetrics
    from inferd.model import ModelVersion

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = dict[str, str]


@dataclass
class Family:
    """One metric family: name, help, type and its samples ``(suffix, labels, value)``."""

    name: str
    help: str
    type: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, labels: Labels, value: float, suffix: str = "") -> None:
        self.samples.append((suffix, labels, value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    keys = sorted(k for k in labels if k not in ("le", "quantile")) + [k for k in ("le", "quantile") if k in labels]
    return "{" + ",".join(f'{k}="{_escape(labels[k])}"' for k in keys) + "}"


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The exposition text; families with no sample are left out, as prometheus-cpp does."""
    lines: list[str] = []
    for f in families:
        if not f.samples:
            continue
        lines.append(f"# HELP {f.name} {f.help}")
        lines.append(f"# TYPE {f.name} {f.type}")
        for suffix, labels, value in f.samples:
            lines.append(f"{f.name}{suffix}{_labels(labels)} {_number(value)}")
    return "\n".join(lines) + "\n" if lines else ""


_COUNTERS = (
    ("nv_inference_request_duration_us", "success",
     "Cumulative inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_duration_us", "queue",
     "Cumulative inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_input_duration_us", "compute_input",
     "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_infer_duration_us", "compute_infer",
     "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_output_duration_us", "compute_output",
     "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
)  # fmt: skip
_SUMMARIES = (
    ("nv_inference_request_summary_us", "request", "success",
     "Summary of inference request duration in microseconds (includes cached requests)"),
    ("nv_inference_queue_summary_us", "queue", "queue",
     "Summary of inference queuing duration in microseconds (includes cached requests)"),
    ("nv_inference_compute_input_summary_us", "compute_input", "compute_input",
     "Summary of compute input duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_infer_summary_us", "compute_infer", "compute_infer",
     "Summary of compute inference duration in microseconds (does not include cached requests)"),
    ("nv_inference_compute_output_summary_us", "compute_output", "compute_output",
     "Summary of compute output duration in microseconds (does not include cached requests)"),
    ("nv_cache_hit_summary_per_model", "cache_hit", "cache_hit",
     "Summary of cache hit durations per model, in microseconds"),
    ("nv_cache_miss_summary_per_model", "cache_miss", "cache_miss",
     "Summary of cache miss (lookup + insert) durations per model, in microseconds"),
)  # fmt: skip


def cache_enabled(mv: ModelVersion) -> bool:
    return getattr(mv, "cache", None) is not None or bool(mv.config.response_cache.enable)


def model_families(versions: list[ModelVersion], config: LatencyConfig) -> list[Family]:
    """The ``nv_inference_*``, ``nv_cache_*`` and ``nv_model_load_duration_secs`` families."""
    success = Family("nv_inference_request_success", "Number of successful inference requests, all batch sizes", "counter")
    failure = Family("nv_inference_request_failure", "Number of failed inference requests, all batch sizes", "counter")
    count = Family("nv_inference_count", "Number of inferences performed (does not include cached requests)", "counter")
    execs = Family("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)", "counter")
    durations = [Family(name, text, "counter") for name, _, text in _COUNTERS]
    pending = Family("nv_inference_pending_request_count",
                     "Instantaneous number of pending requests awaiting execution per-model.", "gauge")  # fmt: skip
    load = Family("nv_model_load_duration_secs", "Model load time in seconds", "gauge")
    cache = [
        Family("nv_cache_num_hits_per_model", "Number of cache hits per model", "counter"),
        Family("nv_cache_num_misses_per_model", "Number of cache misses per model", "counter"),
        Family("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds", "counter"),
        Family("nv_cache_miss_duration_per_model",
               "Total cache miss (insert+lookup) duration per model, in microseconds", "counter"),
    ]  # fmt: skip
    summaries = [Family(name, text, "summary") for name, _, _, text in _SUMMARIES]
    histogram = Family("nv_inference_first_response_histogram_ms",
                       "Duration from request to first response in milliseconds", "histogram")  # fmt: skip
    for mv in versions:
        labels = {"model": mv.name, "version": str(mv.version)}
        snap = mv.stats.snapshot()
        d = snap["durations"]
        success.add(labels, d["success"][0])
        for reason in FAILURE_REASONS:
            failure.add({**labels, "reason": reason}, snap["failures"][reason])
        count.add(labels, snap["inference_count"])
        execs.add(labels, snap["execution_count"])
        pending.add(labels, _pending(mv))
        if snap["load_duration_ns"]:
            load.add(labels, snap["load_duration_ns"] / 1e9)
        cached = cache_enabled(mv)
        if config.counters:
            for family, (_, key, _) in zip(durations, _COUNTERS, strict=True):
                family.add(labels, d[key][1] // 1000)
            if cached:
                values = (d["cache_hit"][0], d["cache_miss"][0], d["cache_hit"][1] // 1000, d["cache_miss"][1] // 1000)
                for family, value in zip(cache, values, strict=True):
                    family.add(labels, value)
        windows = mv.stats.observer
        if isinstance(windows, LatencyWindows):
            if config.summaries:
                _add_summaries(summaries, windows, labels, d, cached)
            _add_histogram(histogram, windows, labels)
    return [success, failure, count, execs, *durations, pending, load, *cache, *summaries, histogram]


def _pending(mv: ModelVersion) -> int:
    pending = getattr(mv.scheduler, "pending", None)
    return int(pending()) if callable(pending) else 0


def _add_summaries(families: list[Family], windows: LatencyWindows, labels: Labels,
                   d: dict[str, tuple[int, int]], cached: bool) -> None:  # fmt: skip
    """Quantiles over the window; ``_count`` and ``_sum`` from the counters (so they match)."""
    for family, (_, kind, key, _) in zip(families, _SUMMARIES, strict=True):
        if kind.startswith("cache") and not cached:
            continue
        if kind == "request" and cached:
            continue  # as Triton: misleading with cache hits in it
        for q, value in windows.quantiles(kind):
            family.add({**labels, "quantile": _number(q)}, value)
        family.add(labels, d[key][1] // 1000, "_sum")
        family.add(labels, d[key][0], "_count")


def _add_histogram(family: Family, windows: LatencyWindows, labels: Labels) -> None:
    snap = windows.histogram_snapshot()
    if snap is None:
        return
    bounds, counts, total, n = snap
    for bound, c in zip(bounds, counts, strict=True):
        family.add({**labels, "le": _number(int(bound) if float(bound).is_integer() else bound)}, c, "_bucket")
    family.add({**labels, "le": "+Inf"}, n, "_bucket")
    family.add(labels, total, "_sum")
    family.add(labels, n, "_count")


def system_families(cpu: CpuMetrics | None, gpu: GpuMetrics | None) -> list[Family]:
    """``nv_cpu_*`` and ``nv_gpu_*`` gauges from the last interval's samples."""
    out: list[Family] = []
    if cpu is not None and cpu.available:
        s = cpu.sample
        for name, text, value in (
            ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", s.utilization),
            ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", s.memory_total),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", s.memory_used),
        ):
            f = Family(name, text, "gauge")
            f.add({}, value)
            out.append(f)
    if gpu is not None and gpu.samples:
        specs: tuple[tuple[str, str, str, str], ...] = (
            ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge", "utilization"),
            ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge", "memory_total"),
            ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge", "memory_used"),
            ("nv_gpu_power_usage", "GPU power usage in watts", "gauge", "power_usage"),
            ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge", "power_limit"),
            ("nv_energy_consumption", "GPU energy consumption in joules since the server started", "counter", "energy"),
        )
        for name, text, kind, attr in specs:
            f = Family(name, text, kind)
            for s_gpu in gpu.samples:
                f.add({"gpu_uuid": s_gpu.uuid}, getattr(s_gpu, attr))
            out.append(f)
    return out


def as_text(versions: list[ModelVersion], config: LatencyConfig, cpu: Any, gpu: Any) -> str:
    return render([*model_families(versions, config), *system_families(cpu, gpu)])
