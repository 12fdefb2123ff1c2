"""Server-side statistics (Triton's statistics extension) and their deltas over a window."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

_DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@dataclass
class ServerStats:
    """Counters summed over the versions of one model; ``*_ns`` are total nanoseconds."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    fail_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0
    cache_hit_count: int = 0
    cache_hit_ns: int = 0
    cache_miss_count: int = 0
    cache_miss_ns: int = 0

    def __sub__(self, other: ServerStats) -> ServerStats:
        return ServerStats(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def __add__(self, other: ServerStats) -> ServerStats:
        return ServerStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def avg_us(self, what: str) -> float:
        """Average microseconds per request of one duration (``queue``, ``compute_infer``, ...)."""
        count = getattr(self, f"{what}_count")
        return getattr(self, f"{what}_ns") / count / 1000.0 if count else 0.0


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def parse_stats(response: Any, model: str) -> ServerStats:
    """Sum the entries for ``model`` in an HTTP statistics dict or a gRPC ``ModelStatisticsResponse``."""
    total = ServerStats()
    entries = _get(response, "model_stats") or []
    for entry in entries:
        if _get(entry, "name") != model:
            continue
        s = ServerStats(
            inference_count=int(_get(entry, "inference_count") or 0),
            execution_count=int(_get(entry, "execution_count") or 0),
        )
        infer = _get(entry, "inference_stats") or {}
        for name in _DURATIONS:
            d = _get(infer, name) or {}
            setattr(s, f"{name}_count", int(_get(d, "count") or 0))
            setattr(s, f"{name}_ns", int(_get(d, "ns") or 0))
        total = total + s
    return total
