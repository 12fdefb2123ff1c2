"""What readers see of a model version's statistics (core counts them in ``inferd.engine.stats``).

Counted as Triton counts them (its statistics extension); the statistics routes and the metrics
frontend read the same counters, so the two always agree.
"""

from __future__ import annotations

from typing import Any, Protocol

#: Triton's failure reasons (the ``reason`` label of ``nv_inference_request_failure``).
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


class LatencyObserver(Protocol):
    """Receives every request's latencies (ns); the metrics frontend attaches one for its
    summaries and histograms. Called with the statistics' lock held: keep it short."""

    def observe(self, kind: str, ns: int) -> None: ...


class VersionStats(Protocol):
    """One model version's counters, as the statistics routes and the metrics frontend read them."""

    name: str
    version: str
    #: Set by the metrics frontend when latency summaries or histograms are on.
    observer: LatencyObserver | None

    def snapshot(self) -> dict[str, Any]:
        """Counters for the metrics frontend, read under one lock so they are consistent:
        ``durations`` (``{field: (count, ns)}``), ``inference_count``, ``execution_count``,
        ``failures`` (by :data:`FAILURE_REASONS`), ``load_duration_ns``."""
        ...

    def as_dict(self) -> dict[str, Any]:
        """Triton's JSON ``model_stats`` entry for this version."""
        ...
