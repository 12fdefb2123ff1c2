"""``pb_utils.MetricFamily``: custom metrics a model records, exported on the metrics endpoint.

A family belongs to the model that created it (the model being loaded or run) and is removed when
that model version unloads. Families of one name created by several models (or twice) are one
family on ``/metrics`` (the first description is kept), and one label set is one series, as in
Triton; creating a name again with another kind is an error. Values are written as Triton (prometheus-cpp) writes them: a counter keeps its own name (no
``_total``), a histogram writes ``_count``, ``_sum``, then its ``_bucket`` lines. Families made
outside a loaded model (a ``model.py`` unit-tested with plain Python, a thread left running after
its model unloaded) stay in memory only.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from inferd_backend_python.pb_request import ModelBinding, current_binding
from inferd_backend_python.pb_tensor import TritonModelException

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric as PromFamily

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_KINDS = ("COUNTER", "GAUGE", "HISTOGRAM")


def _fail(what: str, kind: int, operation: str) -> TritonModelException:
    return TritonModelException(f"Failed to {what}: TRITONSERVER_METRIC_KIND_{_KINDS[kind]} {operation}")


class Metric:
    """One labelled series of a :class:`MetricFamily`: ``increment``, ``set``, ``observe``, ``value``."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: tuple[float, ...]) -> None:
        self._family = family
        self.labels = labels
        self.buckets = buckets
        self._value = 0.0
        self._counts = [0] * len(buckets)  # histogram: observations <= each bound
        self._count = 0
        self._lock = threading.Lock()

    def increment(self, value: float) -> None:
        kind = self._family.kind
        if kind == MetricFamily.HISTOGRAM:
            raise _fail("increment metric value", kind, "does not support Increment")
        if kind == MetricFamily.COUNTER and value < 0:
            raise _fail("increment metric value", kind, "can only be incremented monotonically by non-negative values.")
        with self._lock:
            self._value += value
        if FAMILIES.mirror is not None:
            FAMILIES.mirror("op", id(self), "increment", value)

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise _fail("set metric value", self._family.kind, "does not support Set")
        self._value = float(value)
        if FAMILIES.mirror is not None:
            FAMILIES.mirror("op", id(self), "set", value)

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise _fail("observe metric value", self._family.kind, "does not support Observe")
        with self._lock:
            self._value += value
            self._count += 1
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    self._counts[i] += 1
        if FAMILIES.mirror is not None:
            FAMILIES.mirror("op", id(self), "observe", value)

    def value(self) -> float:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise _fail("get metric value", self._family.kind, "does not support Value")
        return self._value

    def _samples(self, name: str) -> list[tuple[str, dict[str, str], float]]:
        if self._family.kind != MetricFamily.HISTOGRAM:
            return [(name, self.labels, self._value)]
        with self._lock:
            total, count, counts = self._value, self._count, list(self._counts)
        out = [(f"{name}_count", self.labels, count), (f"{name}_sum", self.labels, total)]
        out += [
            (f"{name}_bucket", {**self.labels, "le": _number(b)}, n) for b, n in zip(self.buckets, counts, strict=True)
        ]
        out.append((f"{name}_bucket", {**self.labels, "le": "+Inf"}, count))
        return out


class MetricFamily:
    """``MetricFamily(name, description, kind)`` with kind COUNTER, GAUGE or HISTOGRAM."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(
                f"Failed to create metric family '{name}': unknown kind {kind!r} (expected MetricFamily.COUNTER, "
                "GAUGE or HISTOGRAM)"
            )
        if not isinstance(name, str) or not _NAME.match(name):
            raise TritonModelException(
                f"Failed to create metric family '{name}': a metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*"
            )
        self.name = name
        self.description = str(description)
        self.kind = kind
        self.metrics: list[Metric] = []
        self._owner = current_binding()
        FAMILIES.add(self)
        if FAMILIES.mirror is not None:
            FAMILIES.mirror("family", id(self), name, self.description, kind)

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:
        """The series with these labels (the same object for the same labels)."""
        labels = _check_labels(self.name, labels or {})
        if self.kind == self.HISTOGRAM:
            if buckets is None:
                raise TritonModelException("Failed to create metric. Missing required buckets.")
            bounds = tuple(float(b) for b in buckets)
            if any(b >= c for b, c in zip(bounds[:-1], bounds[1:], strict=True)) or any(math.isnan(b) for b in bounds):
                raise TritonModelException(f"Failed to create metric. Buckets {list(buckets)} must increase.")
        elif buckets is not None:
            raise TritonModelException(
                f"Failed to create metric. Only a HISTOGRAM metric takes buckets ('{self.name}' is a "
                f"{_KINDS[self.kind]})."
            )
        else:
            bounds = ()
        metric = FAMILIES.find(self, labels)
        if metric is None:
            metric = Metric(self, labels, bounds)
            if FAMILIES.mirror is not None:
                FAMILIES.mirror("metric", id(metric), id(self), labels, list(bounds))
        if not any(m is metric for m in self.metrics):
            self.metrics.append(metric)
        return metric


def _check_labels(family: str, labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL.match(key) or key == "le" or not isinstance(value, str):
            raise TritonModelException(
                f"Failed to create metric of family '{family}': label {key!r}: {value!r}: labels are strings "
                "named [a-zA-Z_][a-zA-Z0-9_]* (not 'le')"
            )
    return dict(labels)


def _number(value: float) -> str:
    """``1.0`` -> ``1``, ``2.5`` -> ``2.5``: as prometheus-cpp writes numbers."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _value(value: float) -> float | int:
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


class Families:
    """Every live family of the process; a metrics source for the server's ``/metrics``."""

    _TYPES = ("counter", "gauge", "histogram")

    def __init__(self) -> None:
        self._families: list[MetricFamily] = []
        self._live: list[ModelBinding] = []  # the loaded models: only their families are exported
        self._lock = threading.Lock()
        #: In an isolated model's stub process: sends each family, series and value change to the
        #: server (``mirror("family"|"metric"|"op", ...)``), which keeps the exported copy.
        self.mirror: Callable[..., None] | None = None

    def model_loaded(self, binding: ModelBinding) -> None:
        """``binding``'s model is loading: the families it creates are exported."""
        with self._lock:
            self._live.append(binding)

    def add(self, family: MetricFamily) -> None:
        with self._lock:
            for other in self._families:
                if other.name == family.name and other.kind != family.kind:
                    raise TritonModelException(
                        "Error when creating MetricFamily: Family name already exists with different type "
                        f"('{family.name}' is a {_KINDS[other.kind]})"
                    )
            self._families.append(family)

    def find(self, family: MetricFamily, labels: dict[str, str]) -> Metric | None:
        """The series of ``family``'s name with these labels, if one exists (one series per label set)."""
        with self._lock:
            same = [f for f in self._families if f.name == family.name]
        return next((m for f in same for m in f.metrics if m.labels == labels), None)

    def model_unloaded(self, binding: ModelBinding | None) -> None:
        """Forget the families ``binding``'s model created (None: those made outside any model)."""
        with self._lock:
            self._families = [f for f in self._families if f._owner is not binding]
            self._live = [b for b in self._live if b is not binding]

    def collect(self) -> Iterator[PromFamily]:
        from prometheus_client.metrics_core import Metric as PromMetric

        with self._lock:
            families = [f for f in self._families if any(f._owner is b for b in self._live)]
        by_name: dict[str, list[MetricFamily]] = {}
        for family in families:
            by_name.setdefault(family.name, []).append(family)
        for name, same in by_name.items():
            first = same[0]
            out = PromMetric(name, first.description, self._TYPES[first.kind])
            out.name = name  # prometheus_client drops a counter's "_total"; Triton keeps the name given
            metrics = {id(m): m for family in same for m in list(family.metrics)}
            for metric in metrics.values():
                for sample, labels, value in metric._samples(name):
                    out.add_sample(sample, labels, _value(value))
            if out.samples:
                yield out


#: The process's families (pb_utils objects are the process's, as the models are).
FAMILIES = Families()
