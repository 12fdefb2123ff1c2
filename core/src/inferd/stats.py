"""Per model-version statistics, in the shape of Triton's statistics extension.

Schedulers record into a :class:`ModelStats`; the statistics routes and the metrics frontend read
from it, so the two always agree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Duration:
    """A count and a total in nanoseconds (Triton's ``StatisticDuration``)."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


_INFER_FIELDS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


class ModelStats:
    """Counters for one model version. Thread-safe: backends may record from worker threads."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self.durations: dict[str, Duration] = {f: Duration() for f in _INFER_FIELDS}
        self.batches: dict[int, BatchStats] = {}
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        #: Failed requests by Triton's reason label (REJECTED, CANCELED, BACKEND, OTHER).
        self.failures: dict[str, int] = {}

    def record_execution(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One call of ``Instance.execute`` over ``batch_size`` rows."""
        with self._lock:
            self.execution_count += 1
            self.inference_count += batch_size
            b = self.batches.get(batch_size)
            if b is None:
                b = self.batches[batch_size] = BatchStats()
            b.compute_input.add(input_ns)
            b.compute_infer.add(infer_ns)
            b.compute_output.add(output_ns)

    def record_success(self, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One request that ended with a response."""
        with self._lock:
            d = self.durations
            d["success"].add(total_ns)
            d["queue"].add(queue_ns)
            d["compute_input"].add(input_ns)
            d["compute_infer"].add(infer_ns)
            d["compute_output"].add(output_ns)
            self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, total_ns: int, reason: str = "BACKEND") -> None:
        """One request that ended with an error."""
        with self._lock:
            self.durations["fail"].add(total_ns)
            self.failures[reason] = self.failures.get(reason, 0) + 1
            self.last_inference_ms = time.time_ns() // 1_000_000

    def record_cache(self, hit: bool, ns: int) -> None:
        with self._lock:
            self.durations["cache_hit" if hit else "cache_miss"].add(ns)
            if hit:
                self.last_inference_ms = time.time_ns() // 1_000_000

    def as_dict(self) -> dict[str, Any]:
        """Triton's JSON ``model_stats`` entry for this version."""
        with self._lock:
            return {
                "name": self.name,
                "version": self.version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {k: v.as_dict() for k, v in self.durations.items()},
                "response_stats": {},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": b.compute_input.as_dict(),
                        "compute_infer": b.compute_infer.as_dict(),
                        "compute_output": b.compute_output.as_dict(),
                    }
                    for size, b in sorted(self.batches.items())
                ],
                "memory_usage": [],
            }
