"""Registration: imports no OpenTelemetry module until the server runs in opentelemetry mode."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from inferd.api import StartupError, hookimpl

if TYPE_CHECKING:
    from inferd.api import ServerView

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)

log = logging.getLogger(__name__)


@hookimpl(trylast=True)  # after the built-in diagnostics plugin has applied --trace-config
def inferd_startup(server: ServerView) -> None:
    tracer = server.dataplane.tracer
    if tracer.mode != "opentelemetry":
        return
    from inferd_trace_otel.exporter import OtelExporter

    try:
        exporter = OtelExporter(tracer.otel)
    except ValueError as exc:
        raise StartupError(f"--trace-config opentelemetry: {exc}") from None
    tracer.set_exporter(exporter)
    log.info("exporting traces through OpenTelemetry to %s", exporter.url)


@hookimpl
def inferd_shutdown(server: ServerView) -> None:
    exporter = server.dataplane.tracer.exporter
    shutdown = getattr(exporter, "shutdown", None)
    if callable(shutdown):
        shutdown()
