"""The metrics frontend's server: collectors over the serving versions (read through the data
plane), CPU and GPU samplers, ``/metrics`` on its own port; with ``--workers N`` the other workers'
counters are summed in at each scrape."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from inferd.api import SOURCES
from inferd.contracts.errors import StartupError
from inferd.contracts.flags import parse_bool
from inferd.contracts.frontend import Frontend
from inferd.serving import AsgiServer
from inferd.serving.tls import TlsConfig

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

    from inferd.contracts.dataplane import DataPlane, OtherWorkers, ServingVersion
    from inferd.frontends.metrics.latency import LatencyConfig
    from inferd.frontends.metrics.system import CpuMetrics, GpuMetrics

log = logging.getLogger(__name__)


def latency_config(settings: list[tuple[str, str]]) -> LatencyConfig:
    """``--metrics-config`` values as a :class:`LatencyConfig` (unknown keys are an error)."""
    from inferd.frontends.metrics.latency import LatencyConfig, parse_quantiles

    config = LatencyConfig()
    for key, value in settings:
        if key in ("counter_latencies", "summary_latencies", "histogram_latencies"):
            try:
                flag = parse_bool(value)
            except argparse.ArgumentTypeError as exc:
                raise StartupError(f"--metrics-config {key}={value}: {exc}") from None
            setattr(
                config,
                {
                    "counter_latencies": "counters",
                    "summary_latencies": "summaries",
                    "histogram_latencies": "histograms",
                }[key],
                flag,
            )
        elif key == "summary_quantiles":
            try:
                config.quantiles = parse_quantiles(value)
            except ValueError as exc:
                raise StartupError(f"--metrics-config summary_quantiles={value}: {exc}") from None
        else:
            raise StartupError(
                f"--metrics-config {key}={value}: unknown setting; known: counter_latencies, "
                f"summary_latencies, histogram_latencies, summary_quantiles"
            )
    return config


class MetricsFrontend(Frontend):
    """``GET /metrics`` on its own port; a background task samples CPU and GPU gauges."""

    name = "metrics"

    def __init__(
        self,
        host: str,
        port: int,
        interval_s: float,
        config: LatencyConfig,
        cpu: bool = True,
        gpu: bool = True,
        tls: TlsConfig | None = None,
        routing: bool = False,
    ) -> None:
        self.host = host
        #: ``--routing-metrics``: pod figures first (see :mod:`inferd.frontends.metrics.routing`).
        self.routing = routing
        self.tls = tls
        self.port = port
        self.interval_s = interval_s
        self.config = config
        self.want_cpu = cpu
        self.want_gpu = gpu
        self.cpu: CpuMetrics | None = None
        self.gpu: GpuMetrics | None = None
        self.dataplane: DataPlane | None = None
        self.registry: CollectorRegistry | None = None
        self.view: Collector | None = None  # what a scrape writes: the registry, or its routing view
        #: ``--workers N``: the other workers' counters for the scrape being written (None: none).
        self._others: OtherWorkers | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.server: AsgiServer | None = None
        self._access: Any = None  # the AccessControl added to the metric sources

    def versions(self) -> list[ServingVersion]:
        """Every serving model version, by name then version."""
        assert self.dataplane is not None
        return list(self.dataplane.serving_versions())

    def served(self) -> Sequence[ServingVersion]:
        """What the collectors read: :meth:`versions`, with the other workers' counters when there are."""
        others = self._others
        if others is None:
            return self.versions()
        from inferd.frontends.metrics.aggregate import summed

        return summed(self.versions(), others.snapshots, others.live)

    def scrape(self, accept: str = "") -> tuple[bytes, str]:
        """The body and content type of one scrape (OpenMetrics when ``accept`` asks for it)."""
        from inferd.frontends.metrics.exposition import scrape

        assert self.view is not None
        self._attach(self.versions())
        return scrape(self.view, accept)

    async def scrape_workers(self, accept: str = "") -> tuple[bytes, str]:
        """:meth:`scrape`; with ``--workers N``, the other workers' counters added (the data plane
        asks for them first, off the event loop, and saves this worker's after)."""
        assert self.dataplane is not None
        return await self.dataplane.with_other_workers(partial(self._scrape_with, accept))

    def _scrape_with(self, accept: str, others: OtherWorkers | None) -> tuple[bytes, str]:
        self._others = others  # read by the collectors during the scrape (no await in between)
        try:
            return self.scrape(accept)
        finally:
            self._others = None

    def _live(self) -> Sequence[Any]:
        """The other workers' live figures during this scrape (none without ``--workers N``)."""
        return self._others.live if self._others is not None else ()

    def _attach(self, versions: list[ServingVersion]) -> None:
        """Give each model version latency windows, when summaries or histograms are on."""
        if not (self.config.summaries or self.config.histograms):
            return
        from inferd.frontends.metrics.latency import DEFAULT_BUCKETS_MS, LatencyWindows

        for mv in versions:
            if mv.stats.observer is None:
                mv.stats.observer = LatencyWindows(self.config, mv.decoupled, _buckets(mv) or DEFAULT_BUCKETS_MS)

    async def start(self, dataplane: DataPlane) -> None:
        from prometheus_client import CollectorRegistry

        from inferd.frontends.metrics.collectors import ModelCollector, SystemCollector
        from inferd.frontends.metrics.system import CpuMetrics, GpuMetrics

        self.dataplane = dataplane
        settings = dataplane.settings
        self.cpu = CpuMetrics() if self.want_cpu else None
        self.gpu = await asyncio.to_thread(GpuMetrics.probe) if self.want_gpu else None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ModelCollector(self.served, self.config, settings.namespacing))
        self.registry.register(SystemCollector(self.cpu, self.gpu))
        # Families other plugins contribute (Triton's custom metrics), summed over the workers.
        self.registry.register(_PluginSources(self))
        self.view = self.registry
        if self.routing:
            from inferd.frontends.metrics.routing import RoutingView

            self.view = RoutingView(self.registry, self._live)
        if settings.access is not None:  # per-tenant counters (inferd.auth), summed over the workers
            SOURCES.add(settings.access)
            self._access = settings.access
        await self._sample()
        self._attach(self.versions())
        self.server = AsgiServer(self._app, self.host, self.port, "metrics frontend", settings.shares_ports, self.tls)
        await self.server.start()
        self.port = self.server.port
        self._tasks = [asyncio.get_running_loop().create_task(self._every_interval(), name="inferd-metrics-interval")]

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A bare ASGI app: ``GET /metrics`` (or ``/metrics/``); 404 elsewhere."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        if scope["type"] != "http":
            return
        if scope["path"] not in ("/metrics", "/metrics/"):
            status, body, ctype = 404, b'{"error":"Not Found"}', "application/json"
        elif scope["method"] not in ("GET", "HEAD"):
            status, body, ctype = 405, b'{"error":"Method Not Allowed"}', "application/json"
        else:
            status = 200
            try:
                body, ctype = await self.scrape_workers(_header(scope, b"accept"))
            except Exception as exc:  # a scrape must never take the server down
                log.exception("metrics scrape failed")
                status, body, ctype = 500, f"metrics failed: {type(exc).__name__}: {exc}".encode(), "text/plain"
        headers = [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    async def _sample(self) -> None:
        if self.cpu is not None and self.cpu.available:
            self.cpu.update()
        if self.gpu is not None and self.gpu.samples:
            await asyncio.to_thread(self.gpu.update)

    async def _every_interval(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval_s)
                return
            except TimeoutError:
                pass
            try:
                await self._sample()
                self._attach(self.versions())
            except Exception:
                log.exception("metrics interval update failed")

    async def stop(self, grace: float) -> None:
        self._stop.set()
        for task in self._tasks:
            try:
                await asyncio.wait_for(task, timeout=grace + 1)
            except (TimeoutError, Exception):
                task.cancel()
        if self.server is not None:
            await self.server.stop(grace)
        if self.gpu is not None:
            self.gpu.close()
        if self._access is not None:
            SOURCES.remove(self._access)

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address()}/metrics"


class _PluginSources:
    """The families plugins add (:data:`SOURCES`), with the other workers' samples added during a
    scrape that has them."""

    def __init__(self, frontend: MetricsFrontend) -> None:
        self.frontend = frontend

    def collect(self) -> Iterator[Metric]:
        others = self.frontend._others
        return SOURCES.collect() if others is None else SOURCES.summed(others.sources)


def _header(scope: dict[str, Any], name: bytes) -> str:
    """One request header's value ("" when absent)."""
    return next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == name), "")


def _buckets(mv: ServingVersion) -> tuple[float, ...]:
    """Histogram buckets a model's ``model_metrics`` sets for the first-response histogram."""
    for control in mv.config.model_metrics.metric_control:
        if control.metric_identifier.family == "nv_inference_first_response_histogram_ms":
            return tuple(control.histogram_options.buckets)
    return ()
