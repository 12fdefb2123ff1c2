"""Per model-version statistics, in the shape of Triton's statistics extension (readers see them
as :class:`~inferd.contracts.stats.VersionStats`).

Schedulers record into a :class:`ModelStats`; the statistics routes and the metrics frontend read
from it, so the two always agree. The semantics follow Triton's (checked against Triton 2.51):

- ``success`` / ``queue`` / ``compute_*`` in ``inference_stats`` count successful requests only;
  ``fail`` counts failed requests (a request refused by input validation never reaches a scheduler
  and is not counted, as in Triton).
- ``execution_count`` and ``batch_stats`` count every execution, failed or not;
  ``inference_count`` counts the batch rows of successful requests only.
- ``response_stats`` is keyed by the index of a response within its request ("0", "1", ...): it is
  filled for decoupled models, whose requests may have any number of responses.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inferd.contracts.stats import FAILURE_REASONS, LatencyObserver


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


_INFER_FIELDS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
_RESPONSE_FIELDS = ("compute_infer", "compute_output", "success", "fail", "empty_response", "cancel")


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
        d = self.durations  # the ones every execution adds to, without a lookup by name
        self._success, self._queue = d["success"], d["queue"]
        self._input, self._infer, self._output = d["compute_input"], d["compute_infer"], d["compute_output"]
        self.batches: dict[int, BatchStats] = {}
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        #: Failed requests by Triton's reason label (REJECTED, CANCELED, BACKEND, OTHER).
        self.failures: dict[str, int] = {}
        #: Decoupled models: statistics by response index.
        self.responses: dict[int, dict[str, Duration]] = {}
        #: How long loading this version took (``nv_model_load_duration_secs``); 0 when unknown.
        self.load_duration_ns = 0
        #: Memory the backend reports for this version: ``{"type", "id", "byte_size"}`` entries.
        self.memory_usage: list[dict[str, Any]] = []
        #: Set by the metrics frontend when latency summaries or histograms are on.
        self.observer: LatencyObserver | None = None

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int, succeeded: int | None = None
    ) -> None:
        """One call of ``Instance.execute`` over ``batch_size`` rows, of which ``succeeded``
        (default: all) belong to requests that succeeded."""
        with self._lock:
            self._record_execution(batch_size, input_ns, infer_ns, output_ns, succeeded)

    def _record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int, succeeded: int | None
    ) -> None:
        self.execution_count += 1
        self.inference_count += batch_size if succeeded is None else succeeded
        b = self.batches.get(batch_size)
        if b is None:
            b = self.batches[batch_size] = BatchStats()
        b.compute_input.add(input_ns)
        b.compute_infer.add(infer_ns)
        b.compute_output.add(output_ns)

    def record_batch(
        self,
        rows: int,
        succeeded: int,
        totals_ns: Sequence[int],
        queues_ns: Sequence[int],
        input_ns: int,
        infer_ns: int,
        output_ns: int,
    ) -> None:
        """One execution (:meth:`record_execution`) and its requests that ended with a response
        (:meth:`record_successes`), under one lock."""
        with self._lock:
            self._record_execution(rows, input_ns, infer_ns, output_ns, succeeded)
            if totals_ns:
                self._record_successes(totals_ns, queues_ns, input_ns, infer_ns, output_ns)

    def record_success(self, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One request that ended with a response."""
        self.record_successes((total_ns,), (queue_ns,), input_ns, infer_ns, output_ns)

    def record_successes(
        self, totals_ns: Sequence[int], queues_ns: Sequence[int], input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """The requests of one execution that ended with a response (their total and queue times;
        the execution's compute times count once per request), under one lock."""
        if not totals_ns:
            return
        with self._lock:
            self._record_successes(totals_ns, queues_ns, input_ns, infer_ns, output_ns)

    def _record_successes(
        self, totals_ns: Sequence[int], queues_ns: Sequence[int], input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        n = len(totals_ns)
        self._success.add(sum(totals_ns), n)
        self._queue.add(sum(queues_ns), n)
        self._input.add(input_ns * n, n)
        self._infer.add(infer_ns * n, n)
        self._output.add(output_ns * n, n)
        self.last_inference_ms = time.time_ns() // 1_000_000
        if self.observer is not None:
            obs = self.observer.observe
            for total_ns, queue_ns in zip(totals_ns, queues_ns, strict=True):
                obs("request", total_ns)
                obs("queue", queue_ns)
                obs("compute_input", input_ns)
                obs("compute_infer", infer_ns)
                obs("compute_output", output_ns)

    def record_failure(self, total_ns: int, reason: str = "BACKEND") -> None:
        """One request that ended with an error."""
        with self._lock:
            self.durations["fail"].add(total_ns)
            self.failures[reason] = self.failures.get(reason, 0) + 1
            self.last_inference_ms = time.time_ns() // 1_000_000

    def record_cache(self, hit: bool, ns: int, total_ns: int = 0, queue_ns: int = 0) -> None:
        """One cache lookup: a hit (lookup time) or a miss (lookup + insert time).

        As in Triton, a hit is also a successful request (``total_ns``, ``queue_ns``) with no
        execution and no compute time; a miss's ``ns`` is added to the success time of the
        request its scheduler already recorded.
        """
        with self._lock:
            d = self.durations
            d["cache_hit" if hit else "cache_miss"].add(ns)
            if hit:
                d["success"].add(total_ns)
                d["queue"].add(queue_ns)
                self.last_inference_ms = time.time_ns() // 1_000_000
            else:
                d["success"].add(ns, count=0)
            if self.observer is not None:
                self.observer.observe("cache_hit" if hit else "cache_miss", ns)

    def record_response(
        self,
        index: int,
        infer_ns: int,
        output_ns: int = 0,
        *,
        ok: bool = True,
        empty: bool = False,
        cancelled: bool = False,
    ) -> None:
        """One response of a decoupled request: the ``index``-th (from 0) of its request.

        ``empty`` is a final flag with no outputs; ``ok=False`` an error response.
        """
        with self._lock:
            r = self.responses.get(index)
            if r is None:
                r = self.responses[index] = {f: Duration() for f in _RESPONSE_FIELDS}
            total = infer_ns + output_ns
            if cancelled:
                r["cancel"].add(total)
            elif not ok:
                r["fail"].add(total)
            elif empty:
                r["empty_response"].add(total)
            else:
                r["compute_infer"].add(infer_ns)
                r["compute_output"].add(output_ns)
                r["success"].add(total)

    def observe_first_response(self, ns: int) -> None:
        """Time from a request's arrival to its first response (the latency histogram)."""
        observer = self.observer
        if observer is not None:
            with self._lock:
                observer.observe("first_response", ns)

    def snapshot(self) -> dict[str, Any]:
        """Counters for the metrics frontend, read under one lock so they are consistent."""
        with self._lock:
            return {
                "durations": {k: (v.count, v.ns) for k, v in self.durations.items()},
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "failures": {r: self.failures.get(r, 0) for r in FAILURE_REASONS},
                "load_duration_ns": self.load_duration_ns,
            }

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
                "response_stats": {
                    str(i): {k: d.as_dict() for k, d in r.items()} for i, r in sorted(self.responses.items())
                },
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": b.compute_input.as_dict(),
                        "compute_infer": b.compute_infer.as_dict(),
                        "compute_output": b.compute_output.as_dict(),
                    }
                    for size, b in sorted(self.batches.items())
                ],
                "memory_usage": list(self.memory_usage),
            }
