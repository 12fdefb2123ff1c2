"""The ``/metrics`` families of a backend's stub processes: crashes by cause, restarts, resident
memory, and the log lines of their models dropped or cut (:mod:`~inferd_backend_python.stub_logs`)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from inferd_backend_python.stub_logs import LINE_CHARS

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

_LABELS = ("model", "version", "instance")


class Counted(Protocol):
    """An isolated instance, as its statistics see it."""

    @property
    def labels(self) -> tuple[str, str, str]:
        """(model, version, instance name)."""

    @property
    def rss(self) -> int:
        """Its running stub's resident memory (0: none runs, or not read yet)."""


class Stats:
    """Crashes by cause, restarts and RSS of the isolated instances, and the log lines of their
    models dropped or cut, for ``/metrics``."""

    def __init__(self) -> None:
        self._crashes: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        self._restarts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._log_lines: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._instances: dict[int, Counted] = {}
        self._lock = threading.Lock()

    def _watch(self, instance: Counted) -> tuple[str, str, str]:
        self._instances[id(instance)] = instance
        return instance.labels

    def crashed(self, instance: Counted, kind: str) -> None:
        with self._lock:
            self._crashes[(*self._watch(instance), kind)] += 1

    def restarted(self, instance: Counted) -> None:
        with self._lock:
            self._restarts[self._watch(instance)] += 1

    def logged(self, model: str, version: str, what: str, n: int) -> None:
        """``n`` log lines of a model version ``what`` ("dropped", "truncated")."""
        with self._lock:
            self._log_lines[(model, version, what)] += n

    def started(self, instance: Counted) -> None:
        with self._lock:
            self._watch(instance)

    def forget(self, instances: Iterable[Counted]) -> None:
        """The instances of an unloaded model: no RSS for them any more (their counts stay)."""
        with self._lock:
            for instance in instances:
                self._instances.pop(id(instance), None)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import Metric as PromMetric

        with self._lock:
            crashes, restarts = dict(self._crashes), dict(self._restarts)
            log_lines = dict(self._log_lines)
            instances = list(self._instances.values())
        family = _counter(
            PromMetric,
            "inferd_python_stub_crashes_total",
            "Stub processes of isolated Python models that died, by cause (signal, exit, memory, timeout, protocol, "
            "restart)",
        )
        for crash, n in sorted(crashes.items()):
            family.add_sample(family.name, dict(zip((*_LABELS, "cause"), crash, strict=True)), n)
        yield family
        family = _counter(PromMetric, "inferd_python_stub_restarts_total", "Stub processes restarted after a crash")
        for restart, n in sorted(restarts.items()):
            family.add_sample(family.name, dict(zip(_LABELS, restart, strict=True)), n)
        yield family
        for what, text in (
            ("dropped", "dropped: over the model's log budget"),
            ("truncated", f"cut to {LINE_CHARS} characters"),
        ):
            name = f"inferd_python_stub_log_lines_{what}_total"
            family = _counter(PromMetric, name, f"Log lines of isolated Python models {text}")
            for (model, version, kind), n in sorted(log_lines.items()):
                if kind == what:
                    family.add_sample(name, {"model": model, "version": version}, n)
            yield family
        family = PromMetric("inferd_python_stub_rss_bytes", "Resident memory of each running stub process", "gauge")
        for instance in instances:
            rss = instance.rss
            if rss:
                family.add_sample(family.name, dict(zip(_LABELS, instance.labels, strict=True)), rss)
        yield family


def _counter(make: type[Metric], name: str, text: str) -> Metric:
    """A counter family named ``name`` as written (``prometheus_client`` drops a counter's ``_total``)."""
    family = make(name, text, "counter")
    family.name = name
    return family
