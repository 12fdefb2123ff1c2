"""Turns finished inferd traces into OpenTelemetry spans, exported over OTLP/HTTP.

Each trace becomes a span named after the model (REQUEST_START to REQUEST_END) with a child
``compute`` span (COMPUTE_START to COMPUTE_END); every timestamp is also a span event. As in Triton,
spans carry ``model_name``, ``model_version``, ``request_id`` and ``parent_id`` attributes, and use
the wall clock (trace timestamps are monotonic; they are shifted by the offset measured at start).

Settings (Triton's ``--trace-config opentelemetry,<key>=<value>``): ``url`` (default
``http://localhost:4318/v1/traces``), ``resource=<key>=<value>`` (repeatable),
``bsp_max_queue_size``, ``bsp_schedule_delay`` (ms), ``bsp_max_export_batch_size``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

DEFAULT_URL = "http://localhost:4318/v1/traces"
_BSP = {
    "bsp_max_queue_size": "max_queue_size",
    "bsp_schedule_delay": "schedule_delay_millis",
    "bsp_max_export_batch_size": "max_export_batch_size",
}
_COMPUTE = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")


class OtelExporter:
    """Callable the tracer hands finished traces to (``RequestTrace.to_json()`` lists)."""

    def __init__(self, settings: Sequence[tuple[str, str]], span_exporter: SpanExporter | None = None) -> None:
        resource: dict[str, Any] = {"service.name": "inferd"}
        bsp: dict[str, int] = {}
        self.url = DEFAULT_URL
        for key, value in settings:
            if key == "url":
                self.url = value if "://" in value else f"http://{value}"
            elif key == "resource":
                name, eq, attr = value.partition("=")
                if not eq or not name:
                    raise ValueError(f"resource '{value}': expected <key>=<value>, e.g. service.name=inferd")
                resource[name] = attr
            elif key in _BSP:
                try:
                    bsp[_BSP[key]] = int(value)
                except ValueError:
                    raise ValueError(f"{key}={value}: expected an integer") from None
            else:
                raise ValueError(f"unknown setting '{key}'; known: url, resource, {', '.join(_BSP)}")
        if span_exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter = OTLPSpanExporter(endpoint=self.url)
        self.provider = TracerProvider(resource=Resource.create(resource))
        processor = BatchSpanProcessor(
            span_exporter,
            max_queue_size=bsp.get("max_queue_size"),
            schedule_delay_millis=bsp.get("schedule_delay_millis"),
            max_export_batch_size=bsp.get("max_export_batch_size"),
        )
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("inferd")
        self.offset_ns = time.time_ns() - time.monotonic_ns()

    def __call__(self, traces: list[list[dict[str, Any]]]) -> None:
        for objects in traces:
            self._export(objects)

    def _export(self, objects: list[dict[str, Any]]) -> None:
        head = objects[0]
        stamps = [(t["name"], t["ns"] + self.offset_ns) for o in objects for t in o.get("timestamps", ())]
        if not stamps:
            return
        at = dict(stamps)
        attributes = {
            "model_name": head["model_name"],
            "model_version": head["model_version"],
            "request_id": head.get("request_id", ""),
            "parent_id": head.get("parent_id", 0),
        }
        start = at.get("REQUEST_START", min(ns for _, ns in stamps))
        span = self.tracer.start_span(head["model_name"], start_time=start, attributes=attributes)
        for name, ns in stamps:
            if name not in _COMPUTE:
                span.add_event(name, timestamp=ns)
        if "COMPUTE_START" in at and "COMPUTE_END" in at:
            context = otel_trace.set_span_in_context(span)
            compute = self.tracer.start_span("compute", context=context, start_time=at["COMPUTE_START"])
            for name in _COMPUTE:
                if name in at:
                    compute.add_event(name, timestamp=at[name])
            compute.end(end_time=at["COMPUTE_END"])
        span.end(end_time=at.get("REQUEST_END", max(ns for _, ns in stamps)))

    def shutdown(self) -> None:
        """Export what the batch processor still holds, then stop it."""
        self.provider.shutdown()
