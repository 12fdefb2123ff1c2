"""The registry of the metric families plugins contribute (:data:`SOURCES`, public as
``inferd.api.SOURCES``) and, with ``--workers N``, their sums over the workers
(:class:`SummedSources`): what :mod:`inferd.contracts.metric_sources` declares."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from inferd.contracts.metric_sources import SUMMED_TYPES, MetricsSource

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)


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

    def load_report(self) -> dict[str, float]:
        """The named figures of every source that has ``load_report()`` (an ORCA load report's
        ``named_metrics``, see :mod:`inferd.frontends.load_report`); a failing source is left out."""
        with self._lock:
            sources = list(self._sources)
        named: dict[str, float] = {}
        for source in sources:
            report = getattr(source, "load_report", None)
            if report is None:
                continue
            try:
                named.update(report())
            except Exception:
                log.exception("metrics source %r failed its load report", source)
        return named

    def summed(self, peers: Sequence[list[list[Any]]]) -> Iterator[Metric]:
        """Every family, with the other workers' counters and histograms (``peers``: their
        :meth:`snapshot` each) added."""
        return SummedSources(self, lambda: list(peers)).collect()

    def snapshot(self) -> list[list[Any]]:
        """Every family as plain data for another worker: ``[name, type, help, [[sample, labels, value]...]]``."""
        return [
            [f.name, f.type, f.documentation, [[s.name, s.labels, s.value] for s in f.samples]] for f in self.collect()
        ]


class SummedSources:
    """``local``'s families with the other workers' counters and histograms added (``--workers N``)."""

    def __init__(self, local: MetricSources, peers: Callable[[], list[list[list[Any]]]]) -> None:
        self.local = local
        self.peers = peers

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import Metric as PromMetric

        added: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        #: Each summed family of the other workers: its type, help and sample keys (in order).
        peer_families: dict[str, tuple[str, str, list[tuple[str, str, tuple[tuple[str, str], ...]]]]] = {}
        for snapshot in self.peers():
            for name, kind, text, samples in snapshot:
                if kind in SUMMED_TYPES:
                    keys = peer_families.setdefault(name, (kind, text, []))[2]
                    for sample, labels, value in samples:
                        key = (name, sample, tuple(sorted(labels.items())))
                        if key not in added:
                            keys.append(key)
                        added[key] = added.get(key, 0) + value
        seen: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()
        written: set[str] = set()
        for family in self.local.collect():
            if family.type not in SUMMED_TYPES:
                yield family
                continue
            out = PromMetric(family.name, family.documentation, family.type)
            out.name = family.name  # as the source named it (prometheus_client drops a counter's "_total")
            for s in family.samples:
                key = (family.name, s.name, tuple(sorted(s.labels.items())))
                seen.add(key)
                out.add_sample(s.name, s.labels, s.value + added.get(key, 0))
            written.add(family.name)
            # The samples only other workers have (a model this worker did not serve yet).
            for key in peer_families.get(family.name, ("", "", []))[2]:
                if key not in seen:
                    out.add_sample(key[1], dict(key[2]), added[key])
            yield out
        for name, (kind, text, keys) in peer_families.items():  # families only other workers have (yet)
            if name not in written:
                out = PromMetric(name, text, kind)
                out.name = name
                for key in keys:
                    out.add_sample(key[1], dict(key[2]), added[key])
                yield out


#: The process's metric sources, read by the metrics frontend.
SOURCES = MetricSources()
