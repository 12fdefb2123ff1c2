"""Metric families that plugins contribute to the metrics endpoint (``/metrics``).

A plugin whose models record metrics of their own (Triton's custom metrics, e.g. the Python
backend's ``pb_utils.MetricFamily``) adds a :class:`MetricsSource` to ``inferd.api.SOURCES`` once; the
metrics frontend collects every source at each scrape, after its own families, and writes them in
the format the scrape negotiated. A source yields ``prometheus_client`` metric families; it is
called on the event loop, so it must only read what it already holds (no I/O, no waiting).

A source may also have ``load_report() -> dict[str, float]``: named figures of the load it
carries now (e.g. ``kv_cache_utilization``), added to the ORCA load report a call asks for with
``endpoint-load-metrics-format`` (see :mod:`inferd.frontends.load_report`). It is called on the
event loop for each such call: read what is held, nothing more.

The sources are the process's. With ``--workers N`` the worker answering a scrape adds the other
workers' counters and histograms (:data:`SUMMED_TYPES`) to its own; gauges are the answering worker's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

#: Metric family types whose samples add up over workers (a gauge is the answering worker's).
SUMMED_TYPES = frozenset(("counter", "histogram"))

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


class MetricsSource(Protocol):
    """Anything with ``collect()`` yielding ``prometheus_client`` metric families."""

    def collect(self) -> Iterator[Metric]: ...
