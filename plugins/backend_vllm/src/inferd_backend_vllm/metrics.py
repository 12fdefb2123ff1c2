"""vLLM's own metrics (``vllm:*``) on inferd's metrics endpoint, one set per engine.

vLLM's Prometheus stat logger registers its families in ``prometheus_client``'s default registry,
and each new one first unregisters every ``vllm:`` collector there (``unregister_vllm_metrics``):
with two engines in one process only the last would report. So each engine gets
:func:`stat_logger_for` its own registry: the logger is built as vLLM builds it, under a lock,
and the collectors it registered are then moved out of the default registry into the engine's
(where vLLM's next logger cannot unregister them). This source hands the metrics frontend every
live engine's families merged by name (each sample keeps vLLM's ``model_name`` label), read at
each scrape (in memory, no I/O), under the names vLLM's own server writes (a counter's samples
keep ``_total``; the ``_created`` timestamps are left out). With ``--workers N`` the metrics
frontend sums counters and histograms over the workers (:class:`inferd.contracts.metric_sources.SummedSources`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

PREFIX = "vllm:"
#: vLLM's LoRA gauge (one series per adapter set seen, valued by when it was last seen).
LORA_INFO = "vllm:lora_requests_info"
_BUILD_LOCK = threading.Lock()  # one vLLM stat logger built at a time (parallel loads)


class VllmMetrics:
    """A :class:`inferd.contracts.metric_sources.MetricsSource` of the live engines' ``vllm:`` families."""

    def __init__(self) -> None:
        #: Each live engine's registry (the engine's logger holds it; gone when the engine is).
        self._registries: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()

    def add(self, registry: CollectorRegistry) -> None:
        self._registries.add(registry)

    def discard(self, registry: CollectorRegistry) -> None:
        self._registries.discard(registry)

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for registry in list(self._registries):
            families = [f for f in registry.collect() if f.name.startswith(PREFIX)]
            model = _model_name(families)
            for family in families:
                if family.name == LORA_INFO and model:  # vLLM gives it no model label: name the engine's
                    family = _labelled(family, model)
                out = merged.get(family.name)
                if out is None:
                    merged[family.name] = _vllm_names(family)
                else:
                    out.samples.extend(s for s in family.samples if not s.name.endswith("_created"))
        yield from merged.values()

    def load_report(self) -> dict[str, float]:
        """The ORCA figures of the live engines (see :mod:`inferd.frontends.load_report`): Triton's
        ``kv_cache_utilization`` (the largest KV-cache use, 0 to 1) and ``max_token_capacity`` (KV-cache
        tokens, summed: blocks × block size), vLLM's ``kv_cache_usage_perc`` (the same use) and
        ``num_requests_waiting`` (summed). Nothing without a live engine."""
        if not len(self._registries):
            return {}
        usage = 0.0
        capacity = waiting = 0
        for family in self.collect():
            if family.name == "vllm:kv_cache_usage_perc":
                usage = max([usage, *(s.value for s in family.samples)])
            elif family.name == "vllm:num_requests_waiting":
                waiting += int(sum(s.value for s in family.samples))
            elif family.name == "vllm:cache_config_info":
                for s in family.samples:
                    blocks, size = s.labels.get("num_gpu_blocks"), s.labels.get("block_size")
                    if blocks and size and blocks.isdigit() and size.isdigit():
                        capacity += int(blocks) * int(size)
        return {
            "kv_cache_utilization": usage,
            "max_token_capacity": float(capacity),
            "kv_cache_usage_perc": usage,
            "num_requests_waiting": float(waiting),
        }


def _model_name(families: list[Metric]) -> str:
    """The ``model_name`` label of one engine's samples ("" when none has it)."""
    return next((s.labels["model_name"] for f in families for s in f.samples if "model_name" in s.labels), "")


def _labelled(family: Metric, model: str) -> Metric:
    """``vllm:lora_requests_info`` with each sample labelled by its engine's ``model_name`` (the
    routing metrics pick the latest series of each engine by it)."""
    from prometheus_client.metrics_core import Metric as PromMetric

    out = PromMetric(family.name, family.documentation, family.type)
    out.samples = [s._replace(labels={**s.labels, "model_name": model}) for s in family.samples]
    return out


def _vllm_names(family: Metric) -> Metric:
    """``family`` without its ``_created`` samples; a counter named ``<name>_total``, as vLLM writes it."""
    from prometheus_client.metrics_core import Metric as PromMetric

    name = family.name + "_total" if family.type == "counter" else family.name
    out = PromMetric(family.name, family.documentation, family.type)
    out.name = name  # prometheus_client strips a counter's "_total" from the family name
    out.samples = [s for s in family.samples if not s.name.endswith("_created")]
    return out


def stat_logger_for(registry: CollectorRegistry) -> type:
    """vLLM's ``PrometheusStatLogger`` whose collectors end up in ``registry`` (a factory for
    ``AsyncLLM``'s ``stat_loggers``: given one, vLLM adds no default Prometheus logger)."""
    from prometheus_client import REGISTRY
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    class EngineStatLogger(PrometheusStatLogger):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            with _BUILD_LOCK:
                super().__init__(*args, **kwargs)
                _move(REGISTRY, registry)
            self.registry = registry  # keeps it alive as long as the engine

        def log_engine_initialized(self) -> None:
            """vLLM makes ``vllm:cache_config_info`` here (once the KV cache is sized): moved too."""
            with _BUILD_LOCK:
                super().log_engine_initialized()  # type: ignore[no-untyped-call]
                _move(REGISTRY, registry)

    return EngineStatLogger


def _move(default: CollectorRegistry, registry: CollectorRegistry) -> None:
    """Every ``vllm:`` collector of ``default`` into ``registry``."""
    for collector in list(default._collector_to_names):  # vLLM's own way to find them
        if getattr(collector, "_name", "").startswith(PREFIX):
            default.unregister(collector)
            registry.register(collector)


VLLM_METRICS = VllmMetrics()
