"""Metric families that plugins contribute to the metrics endpoint (``/metrics``).

A plugin whose models record metrics of their own (Triton's custom metrics, e.g. the Python
backend's ``pb_utils.MetricFamily``) adds a :class:`MetricsSource` to :data:`SOURCES` once; the
metrics frontend collects every source at each scrape, after its own families, and writes them in
the format the scrape negotiated. A source yields ``prometheus_client`` metric families; it is
called on the event loop, so it must only read what it already holds (no I/O, no waiting).

The sources are the process's: with ``--workers N`` each worker's scrape shows that worker's values.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)


class MetricsSource(Protocol):
    """Anything with ``collect()`` yielding ``prometheus_client`` metric families."""

    def collect(self) -> Iterator[Metric]: ...


class MetricSources:
    """The sources added so far; itself a ``prometheus_client`` collector of all of them."""

    def __init__(self) -> None:
        self._sources: list[MetricsSource] = []
        self._lock = threading.Lock()

    def add(self, source: MetricsSource) -> None:
        """Add ``source`` (adding the same object again does nothing)."""
        with self._lock:
            if not any(s is source for s in self._sources):
                self._sources.append(source)

    def remove(self, source: MetricsSource) -> None:
        with self._lock:
            self._sources = [s for s in self._sources if s is not source]

    def collect(self) -> Iterator[Metric]:
        """Every source's families; a source that fails is logged and left out of this scrape."""
        with self._lock:
            sources = list(self._sources)
        for source in sources:
            try:
                families = list(source.collect())
            except Exception:
                log.exception("metrics source %r failed", source)
                continue
            yield from families


#: The process's metric sources, read by the metrics frontend.
SOURCES = MetricSources()
