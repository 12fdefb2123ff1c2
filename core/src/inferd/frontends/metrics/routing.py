"""``--routing-metrics``: the figures Kubernetes inference routers read, for the whole pod.

The Gateway API Inference Extension's endpoint picker takes, per pod, the *first* series of a
family that matches its configured labels (none by default); vLLM production-stack's router
reads every sample of a name and keeps the *last*. A pod serving several models (or running
``--workers N``) exposes one series per model and engine, so either would read one model's figure
as the pod's. With this view on, each family a router reads starts with one unlabelled series
holding the pod's figure:

- ``nv_inference_pending_request_count``, ``nv_inference_exec_count``, ``vllm:num_requests_waiting``
  and ``vllm:num_requests_running``: the sum over models, engines and workers;
- ``vllm:kv_cache_usage_perc``: the largest use over the engines;
- ``vllm:gpu_cache_usage_perc`` (vLLM's older name, production-stack's) and
  ``vllm:gpu_prefix_cache_hit_rate`` (hits over queries since start, from vLLM's
  ``vllm:prefix_cache_hits``/``vllm:prefix_cache_queries`` counters): the pod figure only;
- ``vllm:lora_requests_info`` (on a pod with a vLLM engine, with or without LoRA): the running and
  waiting adapters of every engine's latest series, ``max_lora`` summed over the engines, valued
  by the latest time (so the picker, which keeps the series with the largest value, reads it);
  each engine's older series are left out.

The per-model series follow unchanged, so ``{model_name="x"}`` (vLLM) or ``{model="x"}`` (Triton)
selects one model. With ``--workers N`` vLLM's gauges of the same model and engine on several
workers are added up (the KV-cache use: the largest) from the workers that answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

#: Families whose pod figure is the sum of their series.
POD_SUM = (
    "nv_inference_pending_request_count",
    "nv_inference_exec_count",
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
)
#: Families whose pod figure is the largest series.
POD_MAX = ("vllm:kv_cache_usage_perc",)
KV_CACHE = "vllm:kv_cache_usage_perc"
LEGACY_KV_CACHE = "vllm:gpu_cache_usage_perc"
PREFIX_HIT_RATE = "vllm:gpu_prefix_cache_hit_rate"
PREFIX_HITS, PREFIX_QUERIES = "vllm:prefix_cache_hits", "vllm:prefix_cache_queries"
LORA_INFO = "vllm:lora_requests_info"
RUNNING_LORA, WAITING_LORA, MAX_LORA = "running_lora_adapters", "waiting_lora_adapters", "max_lora"
#: vLLM gauges the other workers' live figures are combined into: how two values of one series combine.
_WORKER_GAUGES: dict[str, Callable[[float, float], float]] = {
    "vllm:num_requests_waiting": lambda a, b: a + b,
    "vllm:num_requests_running": lambda a, b: a + b,
    KV_CACHE: max,
    LORA_INFO: max,
}


class RoutingView(Collector):
    """``registry``'s families, with the pod figures first (see the module's text).

    ``live`` gives, during a ``--workers N`` scrape, the other workers' live figures (see
    :class:`~inferd.contracts.dataplane.OtherWorkers`); ``()`` otherwise."""

    def __init__(self, registry: Collector, live: Callable[[], Sequence[Mapping[str, Any]]]) -> None:
        self.registry = registry
        self.live = live

    def collect(self) -> Iterable[Metric]:
        families = list(self.registry.collect())
        by_name = {f.name: f for f in families}
        for worker in self.live():
            for name, kind, text, samples in worker.get("gauges", ()):
                if name in _WORKER_GAUGES:
                    family = by_name.get(name)
                    if family is None:
                        family = by_name[name] = _family(name, text, kind)
                        families.append(family)
                    _combine(family, samples, _WORKER_GAUGES[name])
        out: list[Metric] = []
        for family in families:
            if family.name in POD_SUM and family.samples:
                family = _with_first(family, sum(s.value for s in family.samples))
            elif family.name in POD_MAX and family.samples:
                family = _with_first(family, max(s.value for s in family.samples))
            elif family.name == LORA_INFO:
                continue  # written below, with the other vLLM families
            out.append(family)
        if any(f.name.startswith("vllm:") for f in families):
            out.extend(_vllm_legacy(by_name))
            out.append(_lora(by_name.get(LORA_INFO)))
        return out


def _family(name: str, text: str, kind: str) -> Metric:
    family = Metric(name, text, kind)
    family.name = name
    return family


def _combine(family: Metric, samples: Iterable[list[Any]], add: Callable[[float, float], float]) -> None:
    """Add another worker's ``samples`` (``[name, labels, value]``) to ``family``, series by series."""
    index = {(s.name, tuple(sorted(s.labels.items()))): i for i, s in enumerate(family.samples)}
    for name, labels, value in samples:
        key = (name, tuple(sorted(labels.items())))
        i = index.get(key)
        if i is None:
            index[key] = len(family.samples)
            family.add_sample(name, dict(labels), value)
        else:
            mine = family.samples[i]
            family.samples[i] = mine._replace(value=add(mine.value, value))


def _with_first(family: Metric, value: float) -> Metric:
    """``family`` with an unlabelled sample of ``value`` before its others."""
    out = _family(family.name, family.documentation, family.type)
    first = family.samples[0]
    out.add_sample(first.name, {}, int(value) if isinstance(first.value, int) else value)
    out.samples.extend(s for s in family.samples if s.labels)  # a pod series of its own would repeat
    return out


def _vllm_legacy(by_name: Mapping[str, Metric]) -> list[Metric]:
    """vLLM's older gauges that production-stack reads, for the pod."""
    out: list[Metric] = []
    kv = by_name.get(KV_CACHE)
    if LEGACY_KV_CACHE not in by_name and kv is not None and kv.samples:
        legacy = _family(LEGACY_KV_CACHE, "GPU KV-cache usage, the largest over the engines (1 = 100%).", "gauge")
        legacy.add_sample(LEGACY_KV_CACHE, {}, max(s.value for s in kv.samples))
        out.append(legacy)
    if PREFIX_HIT_RATE not in by_name and PREFIX_QUERIES in by_name:
        queries = sum(s.value for s in by_name[PREFIX_QUERIES].samples if s.name.endswith("_total"))
        hits_family = by_name.get(PREFIX_HITS)
        hits = sum(s.value for s in hits_family.samples if s.name.endswith("_total")) if hits_family else 0.0
        rate = _family(PREFIX_HIT_RATE, "GPU prefix cache block hit rate since start, over the engines.", "gauge")
        rate.add_sample(PREFIX_HIT_RATE, {}, hits / queries if queries else 0.0)
        out.append(rate)
    return out


def _lora(family: Metric | None) -> Metric:
    """``vllm:lora_requests_info``: the pod's series first, then each engine's latest."""
    out = _family(LORA_INFO, family.documentation if family else "Running stats on lora requests.", "gauge")
    latest: dict[str, Any] = {}  # by engine (its model_name label)
    for s in family.samples if family else ():
        engine = s.labels.get("model_name", "")
        if engine not in latest or s.value >= latest[engine].value:
            latest[engine] = s
    running: list[str] = []
    waiting: list[str] = []
    for s in latest.values():
        running += [a for a in s.labels.get(RUNNING_LORA, "").split(",") if a and a not in running]
        waiting += [a for a in s.labels.get(WAITING_LORA, "").split(",") if a and a not in waiting]
    max_lora = sum(int(s.labels.get(MAX_LORA) or 0) for s in latest.values())
    pod = {RUNNING_LORA: ",".join(running), WAITING_LORA: ",".join(waiting), MAX_LORA: str(max_lora)}
    out.add_sample(LORA_INFO, pod, max((s.value for s in latest.values()), default=0.0))
    out.samples.extend(s for s in latest.values() if s.labels != pod)  # no series twice
    return out
