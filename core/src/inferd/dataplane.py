"""The one API every frontend calls. It knows no wire format.

Frontends decode into :class:`~inferd.contracts.types.InferRequest`, call the data plane, and encode what it
returns. Errors are raised as :class:`~inferd.contracts.errors.InferdError` with a kind each frontend maps
to its status codes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from inferd import __version__
from inferd import config as cfg
from inferd.auth import ApiGroup, unknown_model, usage_json, visible_names
from inferd.contracts import merge
from inferd.contracts.backend import Model
from inferd.contracts.errors import InferdError, InvalidArgument, Unavailable, poll_failure
from inferd.contracts.metric_sources import SOURCES, MetricSources, SummedSources
from inferd.contracts.names import name_problem, shown
from inferd.lifecycle.manager import ControlMode
from inferd.repository.scan import check_model_name
from inferd.shared_memory import SharedMemory
from inferd.workers.counts import Counts, CountsFile

if TYPE_CHECKING:
    from inferd.auth import AccessControl
    from inferd.auth.usage import Infer, Stream
    from inferd.contracts.trace import Tracer
    from inferd.engine.health import ServerHealth
    from inferd.engine.router import Router
    from inferd.engine.version import ModelVersion
    from inferd.host.logging_settings import LogSettings
    from inferd.lifecycle.manager import ModelManager
    from inferd.workers.peers import Peers

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

__all__ = ["DataPlane"]

log = logging.getLogger(__name__)


class DataPlane:
    """Health, metadata, inference, statistics and repository control for frontends.

    Inference itself is the :class:`~inferd.engine.router.Router`'s: ``resolve``, ``infer`` and
    ``stream`` are its methods, so a request costs no extra call here.

    With ``peers`` (one worker of ``inferd serve --workers N``), the server-wide answers are the
    whole server's: readiness, statistics and metrics count every worker, and repository control
    and settings changes are applied on every worker before the call returns. The ``local_*`` and
    ``*_locally`` methods are this worker's part, what peers ask for.
    """

    def __init__(
        self, manager: ModelManager, router: Router, health: ServerHealth, tracer: Tracer, log_settings: LogSettings,
        server_name: str = "inferd", peers: Peers | None = None, access: AccessControl | None = None,
    ) -> None:  # fmt: skip
        """``access``: the restricted APIs, API keys and tenant limits (``inferd.auth``); None: every
        request is open. With API keys, ``infer`` and ``stream`` count each tenant's requests and tokens."""
        self.manager = manager
        self.table = manager.table
        self.router = router
        self.health = health
        #: Trace settings and sampling (the trace extension).
        self.tracer = tracer
        #: The process's log settings (the logging extension).
        self.log_config = log_settings
        self.server_name = server_name
        #: Shared-memory regions clients registered (the shared-memory extensions), on every worker.
        self.shared_memory = SharedMemory(peers)
        usable = self.shared_memory.extensions()
        self.extensions = [e for e in EXTENSIONS if e in usable or not e.endswith("_shared_memory")]
        #: The other workers of this server, if any.
        self.peers = peers
        #: Workers only: this worker's counters as the others read them once it is gone (``inferd.workers.counts``).
        self.counts = CountsFile(peers.slot.directory, self.local_counts) if peers is not None else None
        #: Frontends bind their ports with SO_REUSEPORT: other workers serve the same ports.
        self.shares_ports = peers is not None
        #: Workers only: load parameters of the models loaded through the API, for a restarted worker.
        self.loaded_with: dict[str, dict[str, Any]] = {}
        #: Restricted APIs, API keys and tenant limits (``inferd.auth``); None: every request is open.
        self.access = access
        # The request path: the router's own methods, with no call in between (but the metering's).
        self.resolve = router.resolve
        self.infer: Infer = router.infer
        self.stream: Stream = router.stream
        if access is not None:
            access.bind(self.table.names)  # unknown-model hints name the tenant's closest model
            if access.keys is not None:  # tenants: meter their requests and tokens
                self.infer, self.stream = access.usage.metered(router)

    # -- health and metadata --------------------------------------------------------------------

    def serving_versions(self) -> Sequence[ModelVersion]:
        """Every serving model version, by name then version (what the metrics frontend reads)."""
        return list(self.table.serving())

    @property
    def namespacing(self) -> bool:
        """Whether models are namespaced by repository (``--model-namespacing``)."""
        return self.table.namespacing

    def is_live(self) -> bool:
        return self.health.live

    async def is_ready(self) -> bool:
        """Ready once start-up loading finished and the frontends accept requests (on every worker);
        with ``--strict-readiness``, also every model serving (see :mod:`inferd.engine.health`): one
        of its versions READY and, as Triton asks each backend, passing its own check
        (``Model.check_ready``)."""
        return await self.local_ready() and (self.peers is None or await self.peers.all_ready())

    async def local_ready(self) -> bool:
        """This worker's part of :meth:`is_ready`."""
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

    def server_metadata(self) -> dict[str, Any]:
        return {"name": self.server_name, "version": __version__, "extensions": self.extensions}

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

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        info = self.resolve(name, version)
        return info.metadata([str(v) for v in self.table.ready_versions(name)])

    def model_config(self, name: str, version: str = "") -> cfg.ModelConfig:
        return self.table.resolve(name, version).config

    async def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Triton's ``model_stats`` list: every ready version, or those of one model."""
        stats = self.local_statistics(name, version)
        if self.peers is not None:
            await self.save_counts()  # after reading ours: what it saves is never less than what we answer
            stats = merge.statistics(stats, [c["stats"] for c in await self.other_counts()])
        if self.table.traffic.splits:
            self.table.traffic.mark_stats(stats)
        return stats

    def local_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """This worker's :meth:`model_statistics`."""
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

    def local_snapshots(self) -> list[list[Any]]:
        """``[name, version, ModelStats.snapshot(), namespace]`` of every serving version (for the metrics)."""
        return [[mv.name, mv.version, mv.stats.snapshot(), mv.namespace] for mv in self.table.serving()]

    def local_counts(self) -> Counts:
        """This worker's counters, as the other workers sum them (see :mod:`inferd.workers.counts`)."""
        return {"pid": os.getpid(), "stats": self.local_statistics(), "snapshots": self.local_snapshots(),
                "sources": SOURCES.snapshot()}  # fmt: skip

    async def save_counts(self) -> None:
        """Workers: write this worker's counters where the others find them once it is gone. Call it
        after reading the counters an answer reports, before answering."""
        if self.counts is not None:
            await asyncio.to_thread(self.counts.save)

    async def other_counts(self) -> list[Counts]:
        """Workers: the other workers' counters, live or last reported, and the dead workers' totals;
        asked at once, none blocking the event loop."""
        assert self.peers is not None and self.counts is not None
        return await asyncio.to_thread(self.counts.others, await self.peers.ask_each("counts"))

    async def tenant_usage(self) -> dict[str, Any]:
        """``GET /v2/usage``: requests and tokens by tenant and model (``inferd.auth.usage``), the whole server's."""
        local = MetricSources()
        if self.access is not None:
            local.add(self.access.usage)
        if self.peers is None:
            return usage_json(local.collect())
        others = await self.other_counts()
        await self.save_counts()
        return usage_json(SummedSources(local, lambda: [c["sources"] for c in others]).collect())

    # -- trace and logging extensions -------------------------------------------------------------

    def trace_settings(self, model: str = "") -> dict[str, Any]:
        """Triton's trace settings JSON, global or for ``model``."""
        if model:
            self._check_known(model)
        return self.tracer.settings(model)

    async def update_trace_settings(self, settings: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Change some trace settings (a null value resets one); returns them all."""
        if model:
            self._check_known(model)
        current = self.tracer.update(settings, model)
        if self.peers is not None:
            await self.peers.ask_each("trace", {"settings": settings, "model": model})
        return current

    def log_settings(self) -> dict[str, Any]:
        return self.log_config.as_json()

    async def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Change some log settings, applied to Python logging at once; returns them all."""
        current = self.log_config.update(settings)
        if self.peers is not None:
            await self.peers.ask_each("log", {"settings": settings})
        return current

    def _check_known(self, name: str) -> None:
        if not self.table.known(name):
            raise unknown_model(name, ApiGroup.TRACE, visible_names(self.table.names()))

    # -- repository -----------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.table.index(ready_only)

    def _check_control(self) -> None:
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
        """Load or reload ``name``; ``parameters['config']`` (JSON) overrides its config.pbtxt."""
        self._check_control()
        check_model_name(name)
        parameters = parameters or {}
        if self.peers is None:
            await self.load_locally(name, parameters)
            return
        wire = await asyncio.to_thread(_wire_parameters, parameters)
        await self._everywhere(self.load_locally(name, parameters), "load", {"name": name, "parameters": wire})

    async def load_locally(self, name: str, parameters: dict[str, Any]) -> None:
        """This worker's part of :meth:`load_model` (no control-mode check: the asker did it). The
        parameters are checked, parsed and decoded on a worker thread: a config of megabytes takes
        seconds to parse, and the loop serves other clients meanwhile."""
        override, files = await asyncio.to_thread(_load_parameters, name, parameters)
        await self.manager.load(name, override, files or None)
        if self.peers is not None:
            self.loaded_with[name] = await asyncio.to_thread(_wire_parameters, parameters)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` (and the ensembles that call it; see :meth:`ModelManager.unload`)."""
        self._check_control()
        problem = name_problem(name)
        if problem:
            raise InvalidArgument(f"failed to unload '{shown(name)}'; the model name is not valid: {problem}")
        unload = self.unload_locally(name, unload_dependents)
        if self.peers is None:
            await unload
            return
        await self._everywhere(unload, "unload", {"name": name, "unload_dependents": unload_dependents})

    async def unload_locally(self, name: str, unload_dependents: bool = False) -> None:
        await self.manager.unload(name, unload_dependents)
        self.loaded_with.pop(name, None)

    async def _everywhere(self, local: Awaitable[None], op: str, args: dict[str, Any]) -> None:
        """Run ``local`` here and ``op`` on every peer at once; this worker's error wins, then a peer's."""
        assert self.peers is not None
        mine, theirs = await asyncio.gather(local, self.peers.ask_all(op, args), return_exceptions=True)
        if isinstance(mine, BaseException):
            raise mine
        for error in theirs if isinstance(theirs, list) else [theirs]:
            if error is not None:
                raise error

    # -- traffic (weighted versions) ------------------------------------------------------------

    def traffic(self, name: str) -> dict[str, Any]:
        """``name``'s traffic split, each version's state and the canary policy's figures."""
        self._serving_versions(name)
        return self.table.traffic.get(name)

    async def set_traffic(self, name: str, weights: Any) -> dict[str, Any]:
        """Set ``name``'s weights live (``{"1": 99, "2": 1}``), on every worker."""
        serving = self._serving_versions(name)
        shown = self.table.traffic.set(name, weights, serving, self.table.resolve(name, str(serving[-1])).config)
        if self.peers is not None:
            await self.peers.ask_each("traffic", {"name": name, "wire": self.table.traffic.splits[name].wire()})
        return shown

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

    # -- workers --------------------------------------------------------------------------------

    def local_state(self) -> dict[str, Any]:
        """What a restarted worker takes from a running one (see :meth:`catch_up`)."""
        return {
            "ready": self.health.started,
            "loads": self.loaded_with,
            "serving": sorted({mv.name for mv in self.table.serving()}),
            "poll_added": sorted(self.table.poll_added),
            "log": {k: v for k, v in self.log_config.as_json().items() if k != "log_file"},
            "trace": {k: v for k, v in self.tracer.settings().items() if k != "trace_file"},
            "shared_memory": self.shared_memory.local_state(),
            "traffic": {name: split.wire() for name, split in self.table.traffic.splits.items()},
        }

    async def catch_up(self) -> bool:
        """A worker (re)started beside running ones takes their API loads and their settings;
        whether there were running ones (false while the server starts)."""
        if self.peers is None:
            return False
        states = await self.peers.ask_each("state")
        state = next((s for s in states if s["ready"]), None)
        if state is None:
            return False  # the server is starting: every worker starts from the same options
        try:
            self.log_config.update(state["log"])
            self.tracer.update(state["trace"])
        except InferdError as exc:
            log.warning("could not take the running workers' log or trace settings: %s", exc.message)
        self.shared_memory.catch_up(state.get("shared_memory", []))
        self.table.poll_added.update(state.get("poll_added", []))
        for name, parameters in state["loads"].items():
            if name in state["serving"]:
                try:
                    await self.load_locally(name, parameters)
                except InferdError as exc:
                    log.warning("could not load '%s' as the running workers have it: %s", name, exc.message)
        for name, wire in state.get("traffic", {}).items():  # after the loads: the versions serve
            self.apply_traffic(name, wire)
        return True


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


def _wire_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """Load parameters as JSON carries them to the other workers: ``file:`` bytes as base64 text."""
    return {k: _wire_value(v) for k, v in parameters.items()}


def _wire_value(value: Any) -> Any:
    """A load parameter as JSON carries it: ``file:`` bytes as base64 text."""
    return base64.b64encode(value).decode() if isinstance(value, (bytes, bytearray)) else value


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
