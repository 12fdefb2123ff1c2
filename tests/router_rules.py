"""How Kubernetes inference routers read a pod's ``/metrics``, reimplemented from their published
descriptions (not their code), for the routing-metrics tests.

- The Gateway API Inference Extension's endpoint picker (``docs/proposals/003-model-server-protocol``
  and its metric spec strings ``name`` or ``name{label=value,...}``): per metric, the family of that
  name; among its series that carry every label of the spec, the one with the latest timestamp,
  so with no timestamps the *first*; a gauge's value. For ``vllm:lora_requests_info``: among the
  series whose running or waiting adapter list is not empty, the one with the largest value (the
  time it was last seen); adapters are comma-separated, ``max_lora`` an integer.
- vLLM production-stack's router (``EngineStats.from_vllm_scrape``): every sample of the text, in
  order, through ``prometheus_client``'s parser; for each of the names it knows, the *last*
  sample's value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def families(text: str) -> dict[str, list[Sample]]:
    """Each family's samples by family name, as the Prometheus parser reads them (it raises on
    text that is not valid exposition)."""
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, []).extend(family.samples)
    return out


def spec(text: str) -> tuple[str, dict[str, str]]:
    """A picker metric spec: ``name`` or ``name{a=1,b=2}`` (values unquoted)."""
    name, _, rest = text.partition("{")
    labels = dict(pair.split("=", 1) for pair in rest.rstrip("}").split(",") if pair) if rest else {}
    return name.strip(), {k.strip(): v.strip() for k, v in labels.items()}


def picker_value(text: str, metric: str) -> float | None:
    """The endpoint picker's reading of ``metric`` (a spec), or None when it finds no series."""
    name, wanted = spec(metric)
    for s in families(text).get(name, []):
        if s.name not in (name, name + "_total"):  # a histogram's or summary's parts, a _created
            continue
        if all(s.labels.get(k) == v for k, v in wanted.items()):
            return s.value  # no timestamps: the first matching series
    return None


@dataclass
class Lora:
    running: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    max_lora: int = 0


def picker_lora(text: str) -> Lora | None:
    """The picker's reading of ``vllm:lora_requests_info`` (None: no series with adapters)."""
    latest = None
    for s in families(text).get("vllm:lora_requests_info", []):
        if not (s.labels.get("running_lora_adapters") or s.labels.get("waiting_lora_adapters")):
            continue
        if latest is None or s.value > latest.value:
            latest = s
    if latest is None:
        return None

    def names(label: str) -> set[str]:
        return {a for a in latest.labels.get(label, "").split(",") if a}

    return Lora(names("running_lora_adapters"), names("waiting_lora_adapters"), int(latest.labels.get("max_lora") or 0))


#: The sample names production-stack's router reads, and the field each fills.
PRODUCTION_STACK = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:gpu_prefix_cache_hit_rate": "prefix_hit_rate",
    "vllm:gpu_cache_usage_perc": "kv_cache",
}


def production_stack(text: str) -> dict[str, float]:
    """production-stack's engine stats of one scrape: the last sample of each name it reads."""
    out = dict.fromkeys(PRODUCTION_STACK.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in PRODUCTION_STACK:
                out[PRODUCTION_STACK[s.name]] = s.value
    return out
