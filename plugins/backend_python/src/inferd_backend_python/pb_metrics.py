"""``pb_utils.MetricFamily``: custom metrics a model records.

inferd keeps the values in memory (readable with ``Metric.value()``); they are not exported on the
metrics endpoint yet.
"""

from __future__ import annotations

import threading
from typing import Any

from inferd_backend_python.pb_tensor import TritonModelException


class Metric:
    """One labelled series of a :class:`MetricFamily`."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None) -> None:
        self._family = family
        self.labels = labels
        self.buckets = buckets
        self._value = 0.0
        self._count = 0
        self._lock = threading.Lock()

    def increment(self, value: float) -> None:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("increment() is not supported for a HISTOGRAM metric")
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a COUNTER metric cannot be incremented by a negative value")
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("set() is only supported for a GAUGE metric")
        with self._lock:
            self._value = float(value)

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("observe() is only supported for a HISTOGRAM metric")
        with self._lock:
            self._value += value
            self._count += 1

    def value(self) -> float:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("value() is not supported for a HISTOGRAM metric")
        return self._value


class MetricFamily:
    """``MetricFamily(name, description, kind)`` with kind COUNTER, GAUGE or HISTOGRAM."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(f"metric family '{name}': unknown kind {kind!r}")
        self.name = name
        self.description = description
        self.kind = kind
        self.metrics: list[Metric] = []

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Any:
        if self.kind == self.HISTOGRAM and not buckets:
            raise TritonModelException(f"HISTOGRAM metric family '{self.name}' needs buckets")
        metric = Metric(self, dict(labels or {}), list(buckets) if buckets else None)
        self.metrics.append(metric)
        return metric
