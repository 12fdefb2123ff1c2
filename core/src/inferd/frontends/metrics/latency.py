"""Latency summaries (quantiles over a sliding window) and the first-response histogram.

Off by default, as in Triton: ``--metrics-config summary_latencies=true`` and
``histogram_latencies=true`` turn them on. A :class:`LatencyWindows` is attached to each model
version's :class:`~inferd.contracts.stats.ModelStats` and receives every request's latencies.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field

#: Triton's default quantiles (``summary_quantiles=0.5:0.05,0.9:0.01,...``; the errors are ignored:
#: quantiles here are exact over the window).
DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
#: Triton's default buckets of ``nv_inference_first_response_histogram_ms``.
DEFAULT_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
#: prometheus-cpp's default summary window (max_age).
WINDOW_S = 60.0
#: Most observations a window keeps (the oldest go first past it).
MAX_SAMPLES = 65536
SUMMARY_KINDS = ("request", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@dataclass
class LatencyConfig:
    """What ``--metrics-config`` asked for."""

    counters: bool = True
    summaries: bool = False
    histograms: bool = False
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    window_s: float = WINDOW_S


@dataclass
class Histogram:
    """Cumulative buckets (upper bounds in ms), a sum and a count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1


class LatencyWindows:
    """One model version's recent latencies (µs) by kind, and its first-response histogram.

    ``observe`` is called with the stats lock held, from any thread; reads take their own lock.
    """

    def __init__(
        self, config: LatencyConfig, decoupled: bool, buckets_ms: tuple[float, ...] = DEFAULT_BUCKETS_MS
    ) -> None:
        self.config = config
        self.decoupled = decoupled
        self.windows: dict[str, deque[tuple[float, float]]] = {k: deque(maxlen=MAX_SAMPLES) for k in SUMMARY_KINDS}
        self.histogram = Histogram(tuple(sorted(buckets_ms))) if config.histograms else None
        self._lock = threading.Lock()

    def observe(self, kind: str, ns: int) -> None:
        hist = self.histogram
        if hist is not None and (kind == "first_response" or (kind == "request" and not self.decoupled)):
            with self._lock:  # whole milliseconds, as Triton divides its nanoseconds (integers)
                hist.observe(float(ns // 1_000_000))
        if self.config.summaries:
            window = self.windows.get(kind)
            if window is not None:
                window.append((time.monotonic(), ns / 1000.0))

    def quantiles(self, kind: str) -> list[tuple[float, float]]:
        """``(quantile, value µs)`` over the last ``window_s`` seconds; NaN when empty."""
        window = self.windows[kind]
        horizon = time.monotonic() - self.config.window_s
        with self._lock:
            while window and window[0][0] < horizon:
                window.popleft()
            values = sorted(v for _, v in list(window))
        return [(q, _rank(values, q)) for q in self.config.quantiles]

    def histogram_snapshot(self) -> tuple[tuple[float, ...], list[int], float, int] | None:
        hist = self.histogram
        if hist is None:
            return None
        with self._lock:
            return hist.bounds, list(hist.counts), hist.total, hist.count


def _rank(values: list[float], q: float) -> float:
    """The nearest-rank quantile of sorted ``values``."""
    if not values:
        return math.nan
    index = min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))
    return values[index]


def parse_quantiles(text: str) -> tuple[float, ...]:
    """``0.5:0.05,0.9:0.01`` -> (0.5, 0.9); Triton's format (the error part is accepted and unused)."""
    out = []
    for pair in text.replace(" ", ",").split(","):
        if not pair:
            continue
        q = float(pair.split(":", 1)[0])
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        out.append(q)
    if not out:
        raise ValueError("no quantile given")
    return tuple(out)
