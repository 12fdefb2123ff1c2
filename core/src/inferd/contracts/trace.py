"""Request tracing as plugins see it (Triton's trace extension; core traces in ``inferd.engine.trace``).

A traced request carries its :class:`RequestTrace` in ``InferRequest.context[TRACE_KEY]``; a
scheduler that makes requests of its own for it (an ensemble's steps) puts that trace under
:data:`TRACE_PARENT_KEY` in their context, so they are traced too, as Triton traces them. An
exporter plugin reads the server's :class:`Tracer` at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias

#: Key of the :class:`RequestTrace` in ``InferRequest.context`` (absent when not traced).
TRACE_KEY = "trace"
#: Put a traced request's :class:`RequestTrace` under this key in the context of the requests it
#: makes (ensemble steps, BLS calls): they are traced too, with ``parent_id`` set, as in Triton.
TRACE_PARENT_KEY = "trace_parent"

#: Receives finished traces in ``opentelemetry`` mode: a list of traces, each a list of Triton's
#: trace objects (``{"id", "model_name", ...}`` first, then ``{"id", "timestamps": [...]}`` ...).
TraceExporter: TypeAlias = Callable[[list[list[dict[str, Any]]]], None]


class RequestTrace(Protocol):
    """The trace of one sampled request: timestamps recorded along its path."""

    @property
    def id(self) -> int: ...

    def mark(self, name: str, ns: int | None = None) -> None:
        """Record timestamp ``name`` (e.g. QUEUE_START) at ``ns`` (monotonic; default now)."""
        ...


class Tracer(Protocol):
    """The server's request tracing, as an exporter plugin configures it at start-up."""

    @property
    def mode(self) -> str:
        """``triton`` (trace files) or ``opentelemetry`` (an exporter), from ``--trace-config mode=``."""
        ...

    @property
    def otel(self) -> Sequence[tuple[str, str]]:
        """``--trace-config opentelemetry,<key>=<value>`` settings in order (``resource`` may repeat)."""
        ...

    @property
    def exporter(self) -> TraceExporter | None:
        """The receiver of finished traces installed by :meth:`set_exporter`, if any."""
        ...

    def set_exporter(self, exporter: TraceExporter | None) -> None:
        """Install the receiver of finished traces in ``opentelemetry`` mode."""
        ...
