"""vLLM's own metrics (``vllm:*``) on inferd's metrics endpoint.

vLLM's Prometheus stat logger registers its families in ``prometheus_client``'s default registry
of the process that runs ``AsyncLLM`` (this one); this source hands the metrics frontend those
whose names start with ``vllm:``, read at each scrape (in memory, no I/O), under the names vLLM's own
server writes (a counter's samples keep ``_total``; the ``_created`` timestamps are left out).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

PREFIX = "vllm:"


class VllmMetrics:
    """A :class:`inferd.metric_sources.MetricsSource` of the engines' ``vllm:`` families."""

    def collect(self) -> Iterator[Metric]:
        from prometheus_client import REGISTRY

        for family in REGISTRY.collect():
            if family.name.startswith(PREFIX):
                yield _vllm_names(family)


def _vllm_names(family: Metric) -> Metric:
    """``family`` without its ``_created`` samples; a counter named ``<name>_total``, as vLLM writes it."""
    from prometheus_client.metrics_core import Metric as PromMetric

    name = family.name + "_total" if family.type == "counter" else family.name
    out = PromMetric(family.name, family.documentation, family.type)
    out.name = name  # prometheus_client strips a counter's "_total" from the family name
    out.samples = [s for s in family.samples if not s.name.endswith("_created")]
    return out


VLLM_METRICS = VllmMetrics()
