"""What a stub asks of the server besides its results, and the server's readiness questions to it.

BLS calls run through the server's in-process path on the backend's BLS threads, their responses
sent back; ``is_cancelled()`` is answered from the batches the stub holds; log records are logged
within the model's log budget; custom-metric changes are applied to the server's copies (what
``/metrics`` shows); ``is_ready`` questions wait for the stub's answers. All on the server's event
loop, but the BLS calls.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from inferd.api import ErrorKind, InferdError, InferResponse, InternalError, ModelClient, Unavailable
from inferd_backend_python import ipc
from inferd_backend_python.pb_metrics import Metric, MetricFamily
from inferd_backend_python.pb_request import bind
from inferd_backend_python.shm import Block, Malformed, Tensors
from inferd_backend_python.stub_batches import Batches, Send
from inferd_backend_python.stub_context import StubContext
from inferd_backend_python.stub_logs import SUMMARY_S, log_record
from inferd_backend_python.wire import decode_request, encode_error, encode_outcome

_log = logging.getLogger("inferd.contracts.backend.python")


class StubCalls:
    """One stub's calls to the server (see the module's docstring)."""

    def __init__(
        self,
        context: StubContext,
        instance: str,
        send: Send,
        violation: Callable[[Exception], None],
        batches: Batches,
    ) -> None:
        self._context = context
        self._loop = context.loop
        self._instance = instance
        self._send = send
        self._violation = violation
        self._batches = batches
        self._ids = itertools.count(1)
        self._checks: dict[int, asyncio.Future[bool]] = {}  # readiness asks awaiting the stub, on the loop
        self._families: dict[int, MetricFamily] = {}
        self._metrics: dict[int, Metric] = {}

    def cancelled(self, body: Sequence[Any]) -> None:
        """A CANCELLED message: answer whether the client cancelled that request."""
        call_id, batch_id, index = body
        self._send(ipc.REPLY, (call_id, "cancelled", self._batches.cancelled(batch_id, index)), None, False)

    def log(self, body: Any) -> None:
        """A log record of the model: logged by the server within the model's log budget."""
        budget = self._context.log_budget
        if not budget.log(*log_record(body)) and budget.dropped == 1:
            self._loop.call_later(SUMMARY_S, budget.report)

    # -- readiness --

    def ask_ready(self) -> asyncio.Future[bool]:
        """Ask the stub for the model's ``is_ready`` answer (on the loop); its future."""
        future: asyncio.Future[bool] = self._loop.create_future()
        if self._batches.closed:
            future.set_exception(InternalError(f"Stub process '{self._instance}' is not healthy."))
            return future
        call_id = next(self._ids)
        self._checks[call_id] = future
        self._send(ipc.IS_READY, call_id, None, False)
        return future

    def readiness(self, call_id: int, ready: bool, error: str | None) -> None:
        """A READINESS message: the answer to :meth:`ask_ready`."""
        future = self._checks.pop(call_id, None)
        if future is None:
            raise Malformed(f"a readiness answer to {call_id!r}, which it was not asked")
        if not future.done():
            if error is not None:
                future.set_exception(InternalError(str(error)))
            else:
                future.set_result(ready is True)

    def fail(self) -> None:
        """The stub died: the questions it did not answer fail."""
        checks, self._checks = self._checks, {}
        for future in checks.values():
            if not future.done():
                future.set_exception(InternalError(f"Stub process '{self._instance}' is not healthy."))

    # -- BLS --

    def bls(self, body: Any, block: Block) -> None:
        """A BLS_CALL message: run it on one of the backend's BLS threads."""
        self._context.isolation.bls.submit(self._bls, body, block)

    def _bls(self, body: Any, block: Block) -> None:
        """A BLS call of the model: run through the server's in-process path, the reply sent back."""
        try:
            call_id, decoupled, item = body
            request = decode_request(item, block)
        except Exception as exc:
            self._loop.call_soon_threadsafe(self._violation, exc)
            return
        del block
        models: ModelClient | None = self._context.models
        try:
            if models is None:
                raise Unavailable(
                    f"cannot run a BLS request on model '{request.model_name}': this model is not running inside an "
                    "inferd server"
                )
            if not decoupled:
                response = models.infer_from_thread(request)
                self._reply(call_id, "ok", response)
                return
            items = models.stream_from_thread(request)
        except Exception as exc:
            self._send(ipc.REPLY, (call_id, "raise", encode_error(exc)), None, True)
            return
        self._send(ipc.REPLY, (call_id, "started", None), None, True)
        try:
            for outcome in items:
                self._reply(call_id, "item", outcome)
        except Exception as exc:
            self._reply(call_id, "item", InferdError(f"{type(exc).__name__}: {exc}", ErrorKind.INTERNAL))
        self._send(ipc.REPLY, (call_id, "end", None), None, True)

    def _reply(self, call_id: int, what: str, outcome: InferResponse | InferdError) -> None:
        tensors = Tensors()
        payload = encode_outcome(outcome, tensors)
        self._send(ipc.REPLY, (call_id, what, payload), tensors, True)

    # -- custom metrics --

    def metric(self, body: Sequence[Any]) -> None:
        """A custom-metric change in the stub, applied to the server's copy (what ``/metrics`` shows)."""
        operation = body[0]
        if operation == "op":
            metric = self._metrics.get(body[1])
            if metric is not None:
                getattr(metric, body[2])(body[3])
            return
        bind(self._context.binding)
        try:
            if operation == "family":
                _, key, name, description, kind = body
                self._families[key] = MetricFamily(name, description, kind)
            elif operation == "metric":
                _, key, family_key, labels, buckets = body
                family = self._families.get(family_key)
                if family is not None:
                    self._metrics[key] = family.Metric(labels, buckets or None)
        except Exception as exc:
            _log.error("model '%s': custom metric of its stub not exported: %s", self._context.model_name, exc)
