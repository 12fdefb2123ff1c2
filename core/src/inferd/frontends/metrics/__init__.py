"""The metrics frontend: Triton's Prometheus metrics on ``--metrics-port`` at ``/metrics``.

Per-model families are read from the statistics each model version keeps (the same numbers the
statistics extension returns); CPU and GPU gauges are sampled every ``--metrics-interval-ms``.
Flags (Triton's spellings): ``--allow-metrics`` and ``--metrics-port`` (core), and from this plugin
``--metrics-address``, ``--metrics-interval-ms``, ``--allow-cpu-metrics``, ``--allow-gpu-metrics``,
``--metrics-config counter_latencies=|summary_latencies=|histogram_latencies=|summary_quantiles=``,
and ``--routing-metrics`` (see :mod:`inferd.frontends.metrics.routing`).
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from inferd.contracts.errors import StartupError
from inferd.contracts.flags import parse_bool
from inferd.contracts.hookspecs import FrontendRegister, hookimpl

if TYPE_CHECKING:
    from inferd.contracts.hookspecs import ServerSettings
    from inferd.frontends.metrics.frontend import MetricsFrontend

log = logging.getLogger(__name__)


def _setting(value: str) -> tuple[str, str]:
    key, eq, val = value.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"expected <setting>=<value>, e.g. summary_latencies=true, got '{value}'")
    return key.strip(), val.strip()


def _factory(options: ServerSettings) -> MetricsFrontend | None:
    from inferd.frontends.metrics.frontend import MetricsFrontend, latency_config

    if not options.allow_metrics:
        return None
    extra = options.extra
    interval_ms = int(extra.get("metrics_interval_ms") or 2000)
    if interval_ms <= 0:
        raise StartupError(f"--metrics-interval-ms must be > 0, got {interval_ms}")
    return MetricsFrontend(
        extra.get("metrics_address") or options.host,
        options.metrics_port,
        interval_ms / 1000.0,
        latency_config(list(extra.get("metrics_config") or [])),
        cpu=bool(extra.get("allow_cpu_metrics", True)),
        gpu=bool(extra.get("allow_gpu_metrics", True)),
        tls=options.http.tls,
        routing=bool(extra.get("routing_metrics", False)),
    )


@hookimpl
def inferd_register_frontends(register: FrontendRegister) -> None:
    register("metrics", _factory)


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("metrics")
    g.add_argument(
        "--metrics-address",
        default=None,
        metavar="ADDRESS",
        help="address the metrics server binds (default: the --http-address)",
    )
    g.add_argument(
        "--metrics-interval-ms",
        type=int,
        default=2000,
        metavar="MS",
        help="how often CPU and GPU metrics are sampled, in milliseconds (default: 2000)",
    )
    g.add_argument(
        "--allow-cpu-metrics",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="report CPU utilization and memory from /proc (default: true)",
    )
    g.add_argument(
        "--allow-gpu-metrics",
        type=parse_bool,
        default=True,
        metavar="BOOL",
        help="report GPU metrics through NVML when pynvml and a GPU are present (default: true)",
    )
    g.add_argument(
        "--routing-metrics",
        type=parse_bool,
        default=False,
        metavar="BOOL",
        help="start each family Kubernetes inference routers read (Gateway API endpoint picker, vLLM "
        "production-stack) with the pod's figure, and add vLLM's older gauge names (default: false)",
    )
    g.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        type=_setting,
        metavar="KEY=VALUE",
        help="counter_latencies=BOOL (default true), summary_latencies=BOOL, histogram_latencies=BOOL, "
        "summary_quantiles=Q:E,... (repeatable)",
    )
