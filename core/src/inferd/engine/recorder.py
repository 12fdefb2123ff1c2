"""Statistics and traces of executions, counted as Triton counts them, in one place.

Every scheduler's requests are recorded here: the :class:`~inferd.contracts.runner.InstanceRunner` records
each execution on an instance, and the :class:`~inferd.contracts.scheduler.Scheduler` base records the
requests a scheduler rejects and the requests of composing schedulers (ensembles). Schedulers
themselves record nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from inferd.contracts.backend import Outcome
from inferd.contracts.errors import ErrorKind, InferdError
from inferd.contracts.trace import TRACE_KEY
from inferd.contracts.types import InferRequest, InferResponse
from inferd.engine.stats import ModelStats

#: Set in a decoupled request's context when its final response is an error (the model raised, or
#: sent one): the execution counts that request failed, as a non-decoupled error response is.
FAILED_KEY = "inferd.failed"


class Recorder:
    """Records a model version's executions into its :class:`~inferd.contracts.stats.ModelStats`."""

    def __init__(self, stats: ModelStats, max_batch_size: int) -> None:
        self.stats = stats
        self.max_batch_size = max_batch_size

    def queued(self, request: InferRequest) -> None:
        """A request entered its scheduler (Triton's QUEUE_START, when the request is traced)."""
        trace = request.context.get(TRACE_KEY) if request.context else None
        if trace is not None:
            trace.mark("QUEUE_START")

    def executed(
        self,
        requests: Sequence[InferRequest],
        results: Sequence[Outcome | None],
        dequeued_ns: int,
        start_ns: int,
        end_ns: int,
        done_ns: int,
    ) -> list[Outcome]:
        """One execution of ``requests``; returns each request's response or error.

        As Triton counts them: the execution always counts (``execution_count``, ``batch_stats`` by
        the batch's rows); ``inference_count`` only the rows of requests that succeeded. A result of
        ``None`` (decoupled: the responses went through the senders) becomes an empty response; it
        counts failed when the final response it sent was an error (Triton: one failure per
        request, however many requests the failed execution held). An error the model answered
        with (``InferdError.answered``) counts as a success, as Triton counts it.
        """
        stats = self.stats
        max_batch = self.max_batch_size
        input_ns, infer_ns, output_ns = start_ns - dequeued_ns, end_ns - start_ns, done_ns - end_ns
        outcomes: list[Outcome] = []
        totals: list[int] = []
        queues: list[int] = []
        rows = succeeded = 0
        batched = max_batch > 0
        for request, result in zip(requests, results, strict=True):
            n = request.batch_size(max_batch) if batched else 1
            rows += n
            trace = request.context.get(TRACE_KEY) if request.context else None
            if trace is not None:
                trace.compute(dequeued_ns, start_ns, end_ns, done_ns)
            if (isinstance(result, InferdError) and not result.answered) or (
                result is None and FAILED_KEY in request.context
            ):
                cancelled = isinstance(result, InferdError) and result.kind is ErrorKind.CANCELLED
                stats.record_failure(done_ns - request.arrival_ns, "CANCELED" if cancelled else "BACKEND")
                outcomes.append(result or InferResponse(stats.name, stats.version, request.id))
                continue
            succeeded += n
            totals.append(done_ns - request.arrival_ns)
            queues.append(dequeued_ns - request.arrival_ns)
            outcomes.append(result or InferResponse(stats.name, stats.version, request.id))
        stats.record_batch(rows, succeeded, totals, queues, input_ns, infer_ns, output_ns)
        return outcomes

    def rejected(self, request: InferRequest) -> None:
        """A request the scheduler refused or dropped from its queue (Triton's REJECTED)."""
        self.stats.record_failure(time.monotonic_ns() - request.arrival_ns, "REJECTED")

    def composed(self, request: InferRequest, started_ns: int) -> None:
        """A request a composing scheduler (an ensemble) answered: one execution, all compute."""
        done = time.monotonic_ns()
        stats = self.stats
        stats.record_execution(request.batch_size(self.max_batch_size), 0, done - started_ns, 0)
        stats.record_success(done - request.arrival_ns, started_ns - request.arrival_ns, 0, done - started_ns, 0)

    def composition_failed(self, request: InferRequest) -> None:
        """A request a composing scheduler failed (Triton counts it as OTHER)."""
        self.stats.record_failure(time.monotonic_ns() - request.arrival_ns, "OTHER")
