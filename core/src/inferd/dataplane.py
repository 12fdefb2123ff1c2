"""The local data plane: what frontends call in one serving process. It knows no wire format.

:class:`LocalDataPlane` implements :class:`~inferd.contracts.dataplane.DataPlane` over this
process's model table, router and settings; with ``inferd serve --workers N`` the frontends get a
:class:`~inferd.workers.cluster.ClusterDataPlane` around it instead, which spans the other workers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from inferd import __version__
from inferd import config as cfg
from inferd.auth import ApiGroup, unknown_model, usage_json, visible_names
from inferd.contracts.backend import Model
from inferd.contracts.dataplane import (
    BatchStatistics,
    DataPlane,
    Duration,
    LogSettings,
    ModelMetadata,
    ModelStatistics,
    OtherWorkers,
    PlaneSettings,
    RepositoryEntry,
    ServedModel,
    ServerMetadata,
    TenantUsage,
    TraceSettings,
    Traffic,
    TrafficVersion,
    UsageCounts,
    UsageReport,
    VersionTraffic,
)
from inferd.contracts.errors import InferdError, InvalidArgument, Unavailable, poll_failure
from inferd.engine.metric_sources import MetricSources
from inferd.lifecycle.manager import ControlMode
from inferd.repository.names import name_problem, shown
from inferd.repository.scan import check_model_name
from inferd.shared_memory import SharedMemory

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from inferd.auth import AccessControl
    from inferd.contracts.dataplane import AccessLog, ServingVersion
    from inferd.contracts.model_info import Infer, Stream
    from inferd.engine.capture import Capture
    from inferd.engine.health import ServerHealth
    from inferd.engine.router import Router
    from inferd.engine.trace import Tracer
    from inferd.engine.version import ModelVersion
    from inferd.host.logging_settings import LogSettings as ProcessLogSettings
    from inferd.lifecycle.manager import ModelManager

R = TypeVar("R")

#: Extensions listed in server metadata: only those inferd implements (CUDA shared memory only
#: where it can work).
EXTENSIONS: list[str] = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]

__all__ = ["LocalDataPlane"]

log = logging.getLogger(__name__)


class LocalDataPlane(DataPlane):
    """Health, metadata, inference, statistics and repository control of this serving process.

    Inference itself is the :class:`~inferd.engine.router.Router`'s: ``resolve``, ``infer`` and
    ``stream`` are its methods, so a request costs no extra call here. The host's own parts
    (``manager``, ``table``, ``health``, ``log_config``) are attributes for the host and the
    workers' decorator; they are not part of the interface frontends see.
    """

    def __init__(
        self,
        manager: ModelManager,
        router: Router,
        health: ServerHealth,
        tracer: Tracer,
        log_settings: ProcessLogSettings,
        server_name: str = "inferd",
        access: AccessControl | None = None,
        shared_memory: SharedMemory | None = None,
        shares_ports: bool = False,
        status_plots: str | None = None,
        capture: Capture | None = None,
        access_log: AccessLog | None = None,
    ) -> None:
        """``access``: the restricted APIs, API keys and tenant limits (``inferd.auth``); None: every
        request is open. With API keys, ``infer`` and ``stream`` count each tenant's requests and tokens.
        ``shared_memory``: the regions (one that spans the workers, with ``--workers N``);
        ``shares_ports``: other processes serve the same ports; ``status_plots``: the folder of
        plots the status page links to (``--status-plots-dir``)."""
        self.manager = manager
        self.table = manager.table
        self.health = health
        self._tracer = tracer
        #: The process's log settings (the logging extension).
        self.log_config = log_settings
        self.server_name = server_name
        self._shared_memory = shared_memory if shared_memory is not None else SharedMemory()
        usable = self._shared_memory.extensions()
        self.extensions = tuple(e for e in EXTENSIONS if e in usable or not e.endswith("_shared_memory"))
        self.access = access
        self._settings = PlaneSettings(shares_ports, self.table.namespacing, access, status_plots)
        # The request path: the router's own methods, with no call in between (but the metering's).
        self.resolve = router.resolve
        self.infer: Infer = router.infer
        self.stream: Stream = router.stream
        if access is not None:
            access.bind(self.table.names)  # unknown-model hints name the tenant's closest model
            if access.keys is not None:  # tenants: meter their requests and tokens
                self.infer, self.stream = access.usage.metered(router)
        if capture is not None:  # --capture-config: a sampled share written to files (docs/traffic.md)
            self.infer, self.stream = capture.wrap(self.infer, self.stream)
        #: ``--access-log``: the frontends write a line per request to it (None: off).
        self.access_log = access_log

    @property
    def settings(self) -> PlaneSettings:
        return self._settings

    @property
    def shared_memory(self) -> SharedMemory:
        return self._shared_memory

    @property
    def tracer(self) -> Tracer:
        return self._tracer

    # -- health and metadata --------------------------------------------------------------------

    def is_live(self) -> bool:
        return self.health.live

    async def is_ready(self) -> bool:
        """Ready once start-up loading finished and the frontends accept requests; with
        ``--strict-readiness``, also every model serving (see :mod:`inferd.engine.health`): one
        of its versions READY and, as Triton asks each backend, passing its own check
        (``Model.check_ready``)."""
        if not self.health.ready():
            return False
        models = self.health.models
        if models is None:
            return True
        added = models.poll_added
        serving = [list(r.serving.values()) for r in list(self.table.records.values()) if r.name not in added]
        checked = [versions for versions in serving if any(_has_check(mv.model) for mv in versions)]
        if not checked:
            return True
        return all(await asyncio.gather(*(_one_passes(versions) for versions in checked)))

    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata(self.server_name, __version__, self.extensions)

    async def model_ready(self, name: str, version: str = "") -> bool:
        """Triton's model ready: the version serves, its backend can serve it, and it passes its own check."""
        try:
            mv = self.table.resolve(name, version)
        except InferdError:
            return False
        model = mv.model
        if model is None:
            return True
        if model.not_serving() is not None:
            return False
        return not _has_check(model) or await _check(mv) is None

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        info = self.resolve(name, version)
        versions = tuple(str(v) for v in self.table.ready_versions(name))
        return ModelMetadata(info.name, versions, info.platform, info.inputs, info.outputs)

    def model_config(self, name: str, version: str = "") -> cfg.ModelConfig:
        return self.table.resolve(name, version).config

    def model_names(self) -> list[str]:
        return list(self.table.names())

    # -- the catalog ------------------------------------------------------------------------------

    def served_models(self) -> Sequence[ServedModel]:
        return [mv.served for mv in self.table.serving()]

    def served_model(self, name: str, version: str = "") -> ServedModel:
        return self.table.resolve(name, version).served

    def routed_model(self, name: str) -> ServedModel:
        return self.table.routed(name).served

    async def load_on_demand(self, name: str) -> None:
        on_demand = self.table.on_demand
        if on_demand is not None and on_demand.pending(name) is not None:
            await on_demand.ready(name)

    # -- statistics and metrics -----------------------------------------------------------------

    async def model_statistics(self, name: str = "", version: str = "") -> list[ModelStatistics]:
        """Triton's ``model_stats`` list: every ready version, or those of one model."""
        return self.typed_statistics(self.statistics_entries(name, version))

    def typed_statistics(self, entries: list[dict[str, Any]]) -> list[ModelStatistics]:
        """``entries`` (Triton's JSON, from :meth:`statistics_entries`) with each split version's traffic, typed."""
        if self.table.traffic.splits:
            self.table.traffic.mark_stats(entries)
        return [_statistics(e) for e in entries]

    def statistics_entries(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """This process's ``model_stats`` entries as Triton's JSON (what the workers sum)."""
        if name and version:
            available = self.table.ready_versions(name)
            if available and version.isdigit() and int(version) not in available:
                raise InvalidArgument(
                    f"requested model version is not available for model '{name}'; available versions: "
                    f"{', '.join(map(str, available))}"
                )
            if not available:
                raise InvalidArgument(f"requested model '{name}' is not available")
            return [self.table.resolve(name, version).stats.as_dict()]
        stats = [mv.stats.as_dict() for mv in self.table.serving(name)]
        if name and not stats:
            raise InvalidArgument(f"requested model '{name}' is not available")
        return stats

    def serving_versions(self) -> Sequence[ServingVersion]:
        """Every serving model version, by name then version (what the metrics frontend reads)."""
        return list(self.table.serving())

    async def with_other_workers(self, read: Callable[[OtherWorkers | None], R]) -> R:
        return read(None)

    def usage_sources(self) -> MetricSources:
        """The metering families of this process (``inferd.auth.usage``)."""
        local = MetricSources()
        if self.access is not None:
            local.add(self.access.usage)
        return local

    async def tenant_usage(self) -> UsageReport:
        """``GET /v2/usage``: requests and tokens by tenant and model (``inferd.auth.usage``)."""
        return usage_from_families(self.usage_sources().collect())

    # -- trace and logging extensions -------------------------------------------------------------

    def trace_settings(self, model: str = "") -> TraceSettings:
        """Triton's trace settings, global or for ``model``."""
        if model:
            self._check_known(model)
        return _trace(self._tracer.settings(model))

    async def update_trace_settings(self, settings: dict[str, Any], model: str = "") -> TraceSettings:
        """Change some trace settings (a null value resets one); returns them all."""
        if model:
            self._check_known(model)
        return _trace(self._tracer.update(settings, model))

    def log_settings(self) -> LogSettings:
        return LogSettings(**self.log_config.as_json())

    async def update_log_settings(self, settings: dict[str, Any]) -> LogSettings:
        """Change some log settings, applied to Python logging at once; returns them all."""
        return LogSettings(**self.log_config.update(settings))

    def _check_known(self, name: str) -> None:
        if not self.table.known(name):
            raise unknown_model(name, ApiGroup.TRACE, visible_names(self.table.names()))

    # -- repository -----------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        return [RepositoryEntry(**row) for row in self.table.index(ready_only)]

    def check_control(self) -> None:
        mode = self.manager.options.mode
        if mode is ControlMode.POLL:
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")
        if mode is ControlMode.NONE:
            # Triton says "polling" for every mode but explicit (its QA matches the sentence)
            raise Unavailable(
                "explicit model load / unload is not allowed if polling is enabled; the model control mode is "
                "'none' (start the server with --model-control-mode=explicit to load and unload models)"
            )

    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        """Load or reload ``name``; ``parameters['config']`` (JSON) overrides its config.pbtxt. The
        parameters are checked, parsed and decoded on a worker thread: a config of megabytes takes
        seconds to parse, and the loop serves other clients meanwhile."""
        self.check_control()
        check_model_name(name)
        override, files = await asyncio.to_thread(_load_parameters, name, parameters or {})
        await self.manager.load(name, override, files or None)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` (and the ensembles that call it; see :meth:`ModelManager.unload`)."""
        self.check_control()
        problem = name_problem(name)
        if problem:
            raise InvalidArgument(f"failed to unload '{shown(name)}'; the model name is not valid: {problem}")
        await self.manager.unload(name, unload_dependents)

    # -- traffic (weighted versions) ------------------------------------------------------------

    def traffic(self, name: str) -> Traffic:
        """``name``'s traffic split, each version's state and the canary policy's figures."""
        self._serving_versions(name)
        return traffic_from_json(self.table.traffic.get(name))

    async def set_traffic(self, name: str, weights: Any, shadow: str | None = None) -> Traffic:
        """Set ``name``'s weights live (``{"1": 99, "2": 1}``; ``None``: keep them) and its shadow."""
        serving = self._serving_versions(name)
        config = self.table.resolve(name, str(serving[-1])).config
        return traffic_from_json(self.table.traffic.set(name, weights, serving, config, shadow))

    def apply_traffic(self, name: str, wire: dict[str, Any]) -> None:
        """Take the split another worker set or decided."""
        serving = self.table.ready_versions(name)
        if serving:
            self.table.traffic.apply_wire(name, wire, self.table.resolve(name, str(serving[-1])).config)

    def _serving_versions(self, name: str) -> list[int]:
        serving = self.table.ready_versions(name)
        if not serving:
            if self.table.known(name):
                raise Unavailable(f"model '{name}' has no available versions")
            self.table.resolve(name)  # Triton's 'unknown model' error
        return serving


# -- typed results from the engine's JSON -----------------------------------------------------------


def _duration(d: Mapping[str, int]) -> Duration:
    return Duration(d["count"], d["ns"])


def _statistics(e: dict[str, Any]) -> ModelStatistics:
    traffic = e.get("traffic")
    return ModelStatistics(
        name=e["name"],
        version=e["version"],
        last_inference=e["last_inference"],
        inference_count=e["inference_count"],
        execution_count=e["execution_count"],
        inference_stats={k: _duration(v) for k, v in e["inference_stats"].items()},
        response_stats={i: {k: _duration(v) for k, v in r.items()} for i, r in e["response_stats"].items()},
        batch_stats=tuple(
            BatchStatistics(
                b["batch_size"],
                _duration(b["compute_input"]),
                _duration(b["compute_infer"]),
                _duration(b["compute_output"]),
            )
            for b in e["batch_stats"]
        ),
        memory_usage=tuple(e["memory_usage"]),
        traffic=VersionTraffic(**traffic) if traffic is not None else None,
    )


def _trace(settings: dict[str, Any]) -> TraceSettings:
    return TraceSettings(**{**settings, "trace_level": tuple(settings["trace_level"])})


def traffic_from_json(shown: dict[str, Any]) -> Traffic:
    """A split as :meth:`inferd.engine.traffic.TrafficSplit.describe` shows it, typed."""
    versions = {v: TrafficVersion(**d) for v, d in shown["versions"].items()}
    if "policy" not in shown:  # no split
        return Traffic(shown["model"], shown["weights"], versions)
    return Traffic(
        shown["model"],
        shown["weights"],
        versions,
        shown["source"],
        shown["policy"],
        shown["last_check"],
        tuple(shown["decisions"]),
        shown.get("shadow"),
    )


def usage_from_families(families: Iterator[Metric]) -> UsageReport:
    """The metering families (summed over the workers already) as :class:`Usage`."""
    tenants = usage_json(families)["tenants"]
    return UsageReport(
        {
            tenant: TenantUsage(
                {m: UsageCounts(**c) for m, c in entry["models"].items()}, UsageCounts(**entry["totals"])
            )
            for tenant, entry in tenants.items()
        }
    )


#: The largest ``config`` a load request may carry, as JSON text (docs/security.md): hundreds of
#: times a large real config, and parsed in about a second.
MAX_LOAD_CONFIG_BYTES = 4 << 20


def _load_parameters(name: str, parameters: dict[str, Any]) -> tuple[cfg.ModelConfig | None, dict[str, bytes]]:
    """A load request's config override and ``file:`` contents, checked (blocking: off the loop)."""
    override = None
    if "config" in parameters:
        text = parameters["config"]
        size = _json_size(text)
        if size > MAX_LOAD_CONFIG_BYTES:
            raise InvalidArgument(
                f"{poll_failure(name)}: parameter 'config' is {size} bytes of JSON, more than the "
                f"{MAX_LOAD_CONFIG_BYTES} bytes ({MAX_LOAD_CONFIG_BYTES >> 20} MiB) a load request's config may have"
            )
        override = cfg.config_from_json(text, f"{poll_failure(name)}: parameter 'config'")
    files = {k[5:]: _file_bytes(name, k, v) for k, v in parameters.items() if k.startswith("file:")}
    unknown = [k for k in parameters if k != "config" and not k.startswith("file:")]
    if unknown:
        raise InvalidArgument(f"load request for '{name}': unknown parameter '{unknown[0]}'")
    return override, files


def _json_size(value: Any) -> int:
    """The size of ``value`` as JSON text in UTF-8 (a string is the text itself)."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode(errors="surrogatepass"))
    try:
        return len(json.dumps(value, separators=(",", ":")).encode(errors="surrogatepass"))
    except (TypeError, ValueError):
        return 0  # not JSON: config_from_json says so


def _file_bytes(model: str, key: str, value: Any) -> bytes:
    """A ``file:`` load parameter: raw bytes (gRPC) or base64 text (HTTP)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except ValueError:
            raise InvalidArgument(f"load request for '{model}': '{key}' is not valid base64") from None
    raise InvalidArgument(f"load request for '{model}': '{key}' must be base64 text or bytes")


def _has_check(model: Model | None) -> bool:
    """Whether ``model``'s backend defines ``check_ready`` (the others need no coroutine per ready request)."""
    return model is not None and type(model).check_ready is not Model.check_ready


async def _one_passes(versions: list[ModelVersion]) -> bool:
    """One of a model's serving versions can serve and passes its own check (inferd's readiness
    rule: a model serves while one version does; Triton asks every READY version)."""
    for mv in versions:
        model = mv.model
        if model is None or (model.not_serving() is None and (not _has_check(model) or await _check(mv) is None)):
            return True
    return False


async def _check(mv: ModelVersion) -> str | None:
    """``mv``'s own readiness check; a failure is logged (debug) with its reason, as Triton does."""
    assert mv.model is not None
    problem = await mv.model.check_ready()
    if problem is not None:
        log.debug("model '%s' version %s is not ready: %s", mv.name, mv.version, problem)
    return problem
