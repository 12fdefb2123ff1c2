"""ORCA load reports: the ``endpoint-load-metrics`` response header (HTTP) or trailing metadata
(gRPC) an infer call gets when it asks with ``endpoint-load-metrics-format: json|text``, as
Triton 2.57+ and vLLM answer it for Envoy-based balancers.

The report holds ``named_metrics`` (the ORCA load report's map of application metrics):

- ``pending_requests``: requests queued in this serving process, not yet executing, over every model;
- ``inflight_requests``: requests accepted and not yet answered (queued or executing), over every model;
- what the plugins' metric sources report (:meth:`MetricsSource.load_report
  <inferd.contracts.metric_sources.MetricsSource>`): the vLLM backend adds Triton's
  ``kv_cache_utilization`` and ``max_token_capacity`` and vLLM's ``kv_cache_usage_perc`` and
  ``num_requests_waiting``.

``text`` is ``TEXT named_metrics.<name>=<value>, ...``; ``json`` is ``JSON {"named_metrics": {...}}``.
With ``--workers N`` the figures are those of the worker that answered the call (a report is
made per call; asking the other workers would cost a round trip each). A call without the header
costs nothing more: the header is found while the request's other headers are read.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane

#: The request header asking for a report, and the response header (or trailer) carrying it.
FORMAT_HEADER = "endpoint-load-metrics-format"
REPORT_HEADER = "endpoint-load-metrics"


def named_metrics(dataplane: DataPlane) -> dict[str, float]:
    """This process's figures: queued and in-flight requests, then the plugins'."""
    from inferd.api import SOURCES

    pending = inflight = 0
    for mv in dataplane.serving_versions():
        scheduler = getattr(mv, "scheduler", None)
        if scheduler is not None:
            pending += int(scheduler.pending())
            inflight += int(scheduler.inflight())
    named: dict[str, float] = {"pending_requests": float(pending), "inflight_requests": float(inflight)}
    named.update(SOURCES.load_report())
    return named


def report(dataplane: DataPlane, fmt: str) -> str | None:
    """The ``endpoint-load-metrics`` value for a call that asked in format ``fmt``; None for a
    format ORCA does not have (the call is answered without a report, as Triton does)."""
    kind = fmt.strip().lower()
    if kind not in ("json", "text"):
        return None
    named = named_metrics(dataplane)
    if kind == "json":
        return "JSON " + json.dumps({"named_metrics": named}, separators=(",", ":"))
    return "TEXT " + ", ".join(f"named_metrics.{name}={value!r}" for name, value in named.items())
