"""Assembles a server from options and plugins, and runs it until asked to stop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.auth.policy import unknown_to_load
from inferd.contracts.cache import ResponseCache
from inferd.contracts.dataplane import DataPlane
from inferd.contracts.errors import InferdError, StartupError
from inferd.contracts.frontend import Frontend, HttpPortSettings
from inferd.dataplane import LocalDataPlane
from inferd.engine import gc_settings, priority
from inferd.engine.access_log import RequestLog
from inferd.engine.capture import Capture
from inferd.engine.capture_config import CaptureConfig, CaptureConfigError
from inferd.engine.health import ServerHealth, all_versions_loaded
from inferd.engine.model_table import ModelTable
from inferd.engine.rate_limiter import RateLimiter
from inferd.engine.router import Router
from inferd.engine.trace import Tracer
from inferd.engine.traffic import Traffic
from inferd.host.logging_settings import BLOCK
from inferd.host.logging_settings import SETTINGS as LOG_SETTINGS
from inferd.host.plugins import PluginHost
from inferd.host.summary import startup_summary
from inferd.lifecycle.budget import shown_bytes
from inferd.lifecycle.builder import VersionBuilder, backend_config_warnings
from inferd.lifecycle.device_budget import shown_devices
from inferd.lifecycle.manager import ControlMode, LifecycleOptions, ModelManager
from inferd.lifecycle.on_demand import OnDemand
from inferd.repository.object_store import ObjectStoreRepository, is_url
from inferd.repository.scan import Repository
from inferd.serving import HTTP_HEADER_TIMEOUT, HTTP_MAX_HEADER_SIZE, HTTP_MAX_INPUT_SIZE
from inferd.serving.tls import http_config
from inferd.workers.membership import membership
from inferd.workers.peers import WorkerSlot

if TYPE_CHECKING:
    from inferd.auth import AccessControl
    from inferd.lifecycle.poller import RepositoryPoller

log = logging.getLogger(__name__)

#: At shutdown, the least time models get to unload after the frontends drained.
_UNLOAD_MIN_S = 1.0


@dataclass
class ServerOptions:
    """Everything ``inferd serve`` accepts; flag names follow Triton's."""

    #: Directories, or ``s3://`` URLs (kept as strings: a Path would fold their "//"). With
    #: ``--model-namespacing`` each value, as given, is its repository's namespace (as in Triton).
    model_repositories: list[Path | str]
    model_control_mode: ControlMode = ControlMode.NONE
    repository_poll_secs: float = 15.0
    load_models: list[str] = field(default_factory=list)
    autocomplete: bool = True
    model_config_name: str | None = None
    #: ``--model-namespacing``: models keyed by repository and name (``inferd.engine.model_table``).
    model_namespacing: bool = False
    host: str = "0.0.0.0"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    allow_http: bool = True
    allow_grpc: bool = True
    allow_metrics: bool = True
    exit_timeout_secs: float = 30.0
    #: ``--model-unload-timeout-secs``: how long an unload (or the end of a reload) waits for a
    #: version's in-flight requests before abandoning the instances still executing.
    model_unload_timeout_secs: float = 30.0
    #: ``--drain-delay-secs``: on shutdown, how long the frontends keep serving after readiness
    #: turned false (so load balancers stop sending) before they stop accepting.
    drain_delay_secs: float = 0.0
    model_load_thread_count: int = 4
    #: ``--model-load-on-demand``: models load on their first request (:mod:`inferd.lifecycle.on_demand`).
    model_load_on_demand: bool = False
    #: ``--model-load-on-demand-timeout-secs``: how long a request waits for its model's load.
    model_load_on_demand_timeout_secs: float = 60.0
    #: ``--model-load-on-demand-concurrency``: loads of known footprints run together (0: the default).
    model_load_on_demand_concurrency: int = 0
    #: ``--model-load-nice``: how much lower loads on demand run than requests (:mod:`inferd.engine.priority`).
    model_load_nice: int = 10
    #: ``--model-memory-budget`` in bytes (None: none): with ``--workers N`` each worker gets 1/N.
    model_memory_budget: int | None = None
    #: ``--model-device-memory-budget``: bytes by device (``cuda:0``); with ``--workers N`` each worker gets 1/N.
    model_device_memory_budget: dict[str, int] = field(default_factory=dict)
    #: ``--model-pin``: models never evicted.
    model_pin: list[str] = field(default_factory=list)
    log_verbose: int = 0
    #: ``--cache-config NAME,key=value`` gathered by cache name: ``{"local": {"size": "1048576"}}``.
    cache_config: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ``--backend-config [BACKEND,]key=value`` by backend name, ``""`` for every backend.
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ``--strict-readiness``: ready only while every model that should be loaded is READY.
    strict_readiness: bool = True
    #: ``--allow-client-shm``: clients may register shared-memory regions (Triton 2.51's behaviour;
    #: Triton 2.69+ refuses by default).
    allow_client_shm: bool = True
    #: ``--exit-on-error``: a model that fails to load at start-up stops the server (exit code 1).
    exit_on_error: bool = True
    #: ``--id``: the server's name in server metadata.
    server_id: str = "inferd"
    #: ``--rate-limit``: ``off`` (Triton's default) or ``execution_count``.
    rate_limit: str = "off"
    #: ``--rate-limit-resource <name>:<count>[:<device>]`` as ``(name, count, device)``, device -1: all.
    rate_limit_resources: list[tuple[str, int, int]] = field(default_factory=list)
    #: Set in each serving process of a ``--workers N`` (N > 1) server: which worker this is (the
    #: ``inferd serve`` process itself is then a :class:`~inferd.workers.supervisor.Supervisor`).
    worker: WorkerSlot | None = None
    #: The start-up block's ``workers`` line: how many serving processes, and why (``--workers auto``).
    workers_note: str = ""
    #: ``--ports-file``: once serving, the frontends' ports are written here as JSON (port 0 picks one).
    ports_file: Path | None = None
    #: ``--status-plots-dir``: the status page links to the plots in this folder (``inferd perf --plot``).
    status_plots_dir: Path | None = None
    #: Tune the garbage collector for serving once started (``inferd.engine.gc_settings``): what
    #: ``inferd serve`` does; in-process servers (tests, tools) keep the process's settings.
    settle_gc: bool = False
    #: Options added by plugins through ``inferd_add_options`` (and anything else by name).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def http(self) -> HttpPortSettings:
        """The HTTP port's settings (``--http-*``; TLS checked here: a bad combination stops the start)."""
        extra = self.extra
        return HttpPortSettings(
            tls=http_config(extra),
            max_input_size=int(extra.get("http_max_input_size", HTTP_MAX_INPUT_SIZE)),
            max_header_size=int(extra.get("http_max_header_size", HTTP_MAX_HEADER_SIZE)),
            header_timeout=float(extra.get("http_header_timeout_secs", HTTP_HEADER_TIMEOUT)),
            forward_pattern=extra.get("http_header_forward_pattern"),
        )


class Server:
    """One inferd server: plugin host, model manager, data plane, poller and frontends."""

    def __init__(
        self,
        options: ServerOptions,
        host: PluginHost | None = None,
        plugins: Iterable[Any] = (),
        access: AccessControl | None = None,
    ) -> None:
        """Build every part bottom-up, each handed what it uses: nothing is wired afterwards.
        ``access``: the access rules the flags ask for (:func:`inferd.auth.access_from_flags`).

        The response cache is built here too (``--cache-config``; it may connect), so an unusable
        cache stops the server before anything loads.
        """
        self.options = options
        self.host = host or PluginHost(plugins=plugins)
        registries = self.host.registries()
        #: ``--workers N``: which worker this process is, and everything that spans the workers.
        self.workers = membership(options.worker)
        self.table = ModelTable(options.model_namespacing, Traffic())
        strict = options.strict_readiness and not options.model_load_on_demand  # models load when asked
        self.health = ServerHealth(models=self.table if strict else None)
        self.tracer = Tracer()
        self.router = Router(self.table, self.tracer, self.health)
        self.router.time_every_request = bool(options.extra.get("server_timing"))
        self.cache: ResponseCache | None = self._build_cache()
        self.capture: Capture | None = self._build_capture()
        self.access_log: RequestLog | None = self._build_access_log()
        for line in backend_config_warnings(registries.backends, options.backend_config):
            log.warning("%s", line)
        builder = VersionBuilder(
            registries.backends,
            registries.schedulers,
            self.router,
            self.cache,
            options.autocomplete,
            options.backend_config,
            self._rate_limiter(),
            self.workers.cores(),
            (self.workers.index, self.workers.count),
        )
        self.manager = ModelManager(self._lifecycle_options(), self.table, builder)
        priority.configure(options.model_load_nice)
        self.on_demand: OnDemand | None = None
        if options.model_load_on_demand:
            budget = options.model_memory_budget
            if budget is not None:
                budget //= max(1, self.workers.count)  # each worker loads on demand under its share
            share = max(1, self.workers.count)
            devices = {d: n // share for d, n in options.model_device_memory_budget.items()}
            self.on_demand = OnDemand(
                self.manager,
                options.model_load_on_demand_timeout_secs,
                budget,
                devices,
                options.model_load_on_demand_concurrency,
            )
            self.table.on_demand = self.on_demand
        elif options.model_memory_budget is not None or options.model_device_memory_budget:
            log.warning("--model-memory-budget and --model-device-memory-budget apply to --model-load-on-demand=true")
        shared_memory = self.workers.shared_memory()
        shared_memory.allow_clients = options.allow_client_shm
        self.local = LocalDataPlane(
            self.manager,
            self.router,
            self.health,
            self.tracer,
            LOG_SETTINGS,
            options.server_id,
            access,
            shared_memory,
            self.workers.shares_ports,
            str(options.status_plots_dir) if options.status_plots_dir is not None else None,
            self.capture,
            self.access_log,
        )
        #: What frontends receive: the local plane, spanning the other workers with ``--workers N``.
        self.dataplane: DataPlane = self.workers.dataplane(self.local)
        self.frontends: list[Frontend] = []
        self.poller: RepositoryPoller | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self.started_at = 0.0
        #: False once a shutdown left work running past ``--exit-timeout-secs``.
        self.drained = True

    def _rate_limiter(self) -> RateLimiter | None:
        """``--rate-limit=execution_count``: the limiter every model's instances share."""
        options = self.options
        if options.rate_limit != "execution_count":
            if options.rate_limit_resources:
                log.warning("--rate-limit-resource is ignored: the rate limiter is off (--rate-limit=execution_count)")
            return None
        log.info(
            "rate limiter on (execution_count): resources %s",
            ", ".join(f"{n}:{c}" + ("" if d < 0 else f":{d}") for n, c, d in options.rate_limit_resources)
            or "sized by the models",
        )
        return RateLimiter(options.rate_limit_resources)

    def _lifecycle_options(self) -> LifecycleOptions:
        options = self.options
        return LifecycleOptions(
            repositories=[_repository(p) for p in options.model_repositories],
            mode=options.model_control_mode,
            startup_models=list(options.load_models),
            autocomplete=options.autocomplete,
            config_name=options.model_config_name,
            load_threads=options.model_load_thread_count,
            unload_timeout_secs=options.model_unload_timeout_secs,
            namespacing=options.model_namespacing,
            strict_readiness=options.strict_readiness,
            namespaces=[str(p) for p in options.model_repositories],
            on_demand=options.model_load_on_demand,
            pinned=frozenset(options.model_pin),
        )

    async def start(self) -> None:
        """Load start-up models, start the poller and every frontend."""
        self.started_at = time.monotonic()
        self.health.loop = asyncio.get_running_loop()
        self.health.live = True
        await self._check_repositories()
        self.workers.start_control(asyncio.get_running_loop())
        await self.manager.start()
        restarted = await self.workers.catch_up()  # first: it says which models appeared under poll
        await self._exit_on_error()
        if self.options.model_control_mode is ControlMode.POLL:
            await self._start_poller(restarted)
        for reg in self.host.registries().frontends:
            frontend = reg.factory(self.options)
            if frontend is None:
                continue
            await frontend.start(self.dataplane)
            level = logging.INFO if frontend.serving() else logging.DEBUG
            log.log(level, "started %s frontend at %s", frontend.name, frontend.url())
            self.frontends.append(frontend)
        self.host.startup(self)
        if self.options.ports_file is not None:
            write_ports(self.options.ports_file, self.ports())
        if self.options.settle_gc:
            gc_settings.settle()
        self.health.accepting = True
        log.info("inferd ready in %.2f s", time.monotonic() - self.started_at)
        if self.workers.index == 0:  # one block for --workers N
            options = self.options
            summary = startup_summary(
                self.table.index(),
                self.frontends,
                self.local.access,
                options.model_control_mode,
                self.manager.options.repositories,
                options.repository_poll_secs,
                options.workers_note,
                self._on_demand_note(),
            )
            log.info("serving:\n%s", summary, extra=BLOCK)

    def _on_demand_note(self) -> str:
        """The start-up block's ``load on demand`` line ("" when off)."""
        on_demand = self.on_demand
        if on_demand is None:
            return ""
        note = f"on (a request waits up to {on_demand.timeout:g} s for its model)"
        share = " per worker" if self.workers.count > 1 else ""
        devices = f"; device memory budget {shown_devices(on_demand.device_budgets)}{share}" * bool(
            on_demand.device_budgets
        )
        if on_demand.budget is None:
            return note + "; no memory budget" + devices
        return (
            f"{note}; memory budget {shown_bytes(on_demand.budget)}{share}, {shown_bytes(on_demand.used())} used"
            f"{devices}, least recently used idle models evicted"
        )

    async def _check_repositories(self) -> None:
        """A directory that is none stops the server; so does an object store that cannot be
        read. With ``--exit-on-error=false`` the server runs on: an object store's models load
        once the poller can read it; a missing directory is reported (logged, and the server is
        not ready, as Triton reports it) while the other repositories' models serve."""
        for repo in self.manager.options.repositories:
            if isinstance(repo, Path):
                if not repo.is_dir():
                    why = "failed to stat file" if not repo.exists() else "not a directory:"
                    message = f"Internal - {why} {repo} (model repository)"
                    if self.options.exit_on_error:
                        self.close_repositories()
                        raise StartupError(f"creating server: {message}")
                    log.error("%s; the server runs on (--exit-on-error=false) but is not ready", message)
                    self.health.errors.append(message)
                continue
            try:
                await asyncio.to_thread(repo.check)
            except RuntimeError as exc:
                if self.options.exit_on_error:
                    self.close_repositories()
                    raise StartupError(f"creating server: Internal - {exc}") from None
                log.error("%s", exc)

    def ports(self) -> dict[str, int]:
        """``{frontend name in lower case: the port it listens on}``, e.g. ``{"http": 8000, "grpc": 8001}``."""
        ports = {}
        for frontend in self.frontends:
            _, _, port = frontend.address().rpartition(":")
            if port.isdigit():
                ports[frontend.name.lower()] = int(port)
        return ports

    def startup_failures(self) -> list[str]:
        """``failed to load '<model>': <reason>`` for each model start-up should have loaded and
        did not: in modes none and poll every model of the repositories, in explicit mode those
        ``--load-model`` names (one that is in no repository too); with ``--model-load-on-demand``
        those names in every mode."""
        table = self.table
        records = table.records
        if self.options.model_load_on_demand:  # only --load-model names load at start (and pinned models)
            keys = {name: table.keys_of(name) or [name] for name in self.options.load_models if name != "*"}
        elif self.options.model_control_mode is ControlMode.EXPLICIT and "*" not in self.options.load_models:
            keys = {name: table.keys_of(name) or [name] for name in self.options.load_models}
        else:
            keys = {k: [k] for k in sorted(set(table.snapshot.models) | set(records))}
        failures = []
        for name, found in keys.items():
            for key in found:
                if key in self.table.poll_added:  # a restarted worker: a model that appeared under poll
                    continue
                record = records.get(key)
                if record is None:
                    failures.append(str(unknown_to_load(name, table.names())))
                elif not all_versions_loaded(record):
                    failures.append(f"failed to load '{record.name}': {record.load_error() or 'not ready'}")
        return failures

    async def _exit_on_error(self) -> None:
        """``--exit-on-error``: unload what loaded and stop with Triton's "failed to load all
        models", naming each model and its reason (the process exits with code 1)."""
        failures = self.startup_failures()
        if not failures:
            return
        if not self.options.exit_on_error:
            log.error("failed to load all models: %s", "; ".join(failures))
            return
        await self.manager.shutdown()
        self.workers.stop_control()
        self.close_repositories()
        raise StartupError("creating server: Internal - failed to load all models: " + "; ".join(failures))

    async def stop(self) -> None:
        """Report not ready, keep serving for ``--drain-delay-secs``, then stop accepting, let
        in-flight requests finish and unload every model: all of that within
        ``--exit-timeout-secs`` (past it, :attr:`drained` is false). Logs each frontend's stop,
        then how many models it unloaded and how long stopping took."""
        stopping = time.monotonic()
        self.health.accepting = False
        if self.poller is not None:
            self.poller.stop()
        if self._poll_task is not None:
            self._poll_task.cancel()
        if self.options.drain_delay_secs > 0:
            log.info("not ready; serving %.1f s more before closing the listeners", self.options.drain_delay_secs)
            for frontend in self.frontends:
                frontend.drain()
            await asyncio.sleep(self.options.drain_delay_secs)
        grace = self.options.exit_timeout_secs
        deadline = time.monotonic() + grace
        await asyncio.gather(*(_stop_frontend(f, grace) for f in self.frontends))
        loaded = sum(1 for r in list(self.table.records.values()) if r.serving)
        try:  # what the frontends' drain left of the timeout (a moment at least, to unload idle models)
            await asyncio.wait_for(self.manager.shutdown(), timeout=max(_UNLOAD_MIN_S, deadline - time.monotonic()))
        except TimeoutError:
            log.warning("models still busy after %.0f s; exiting anyway", grace)
            self.drained = False
        self.health.live = False
        if self.cache is not None:
            await asyncio.to_thread(self.cache.close)
        if self.capture is not None:
            await asyncio.to_thread(self.capture.close)
        if self.access_log is not None:
            await asyncio.to_thread(self.access_log.close)
        self.host.shutdown(self)
        self.workers.stop_control()
        self.close_repositories()
        log.info(
            "unloaded %d model%s; inferd stopped in %.2f s",
            loaded,
            "" if loaded == 1 else "s",
            time.monotonic() - stopping,
        )

    def close_repositories(self) -> None:
        """Delete the local mirrors of remote repositories (blocking)."""
        for repo in self.manager.options.repositories:
            if isinstance(repo, ObjectStoreRepository):
                repo.close()

    async def _start_poller(self, restarted: bool) -> None:
        """Poll mode: this process polls; of several workers, worker 0 polls for all of them."""
        from inferd.lifecycle.poller import RepositoryPoller  # watchdog: only in poll mode

        target = await self.workers.poll_target(self.manager, restarted)
        if target is None:
            return
        self.poller = RepositoryPoller(target, self.manager.options.repositories, self.options.repository_poll_secs)
        self._poll_task = self.poller.start()

    def _build_capture(self) -> Capture | None:
        """``--capture-config FILE``: the request capture (docs/traffic.md, "Capture"); its directory
        is created and its writer thread started here, so an unusable one stops the start."""
        path = self.options.extra.get("capture_config")
        if not path:
            return None
        try:
            capture = Capture(CaptureConfig.load(Path(path)), self.workers.index)
            capture.start()
        except CaptureConfigError as exc:
            raise StartupError(f"--capture-config: {exc}") from None
        except OSError as exc:
            raise StartupError(f"--capture-config: cannot write capture files: {exc}") from None
        c = capture.config
        log.info(
            "capturing %g %% of requests%s to %s", c.rate * 100, f" of {sorted(c.models)}" if c.models else "", c.dir
        )
        return capture

    def _build_access_log(self) -> RequestLog | None:
        """``--access-log FILE|-``: one line per inference request (docs/traffic.md, "Access log");
        the file is opened here, so an unusable one stops the start."""
        target = self.options.extra.get("access_log")
        if not target:
            return None
        try:
            return RequestLog(str(target))
        except OSError as exc:
            raise StartupError(f"--access-log: cannot write {target}: {exc.strerror or exc}") from None

    def _build_cache(self) -> ResponseCache | None:
        """The one response cache ``--cache-config`` names (blocking: a cache may connect)."""
        configs = self.options.cache_config
        if not configs:
            return None
        if len(configs) > 1:
            raise StartupError(
                f"--cache-config names {len(configs)} caches ({', '.join(sorted(configs))}); "
                f"a server uses one response cache"
            )
        ((name, settings),) = configs.items()
        try:
            cache = self.host.registries().caches.create(name, dict(settings))
        except InferdError as exc:
            raise StartupError(f"response cache '{name}': {exc.message}") from None
        except Exception as exc:
            raise StartupError(f"response cache '{name}' failed to start: {type(exc).__name__}: {exc}") from None
        shown = ", ".join(f"{k}={'***' if k == 'password' else v}" for k, v in sorted(settings.items()))
        log.info("response cache '%s' ready (%s)", name, shown)
        return cache

    async def serve(self, stop: asyncio.Event) -> None:
        """Start, wait for ``stop``, then shut down cleanly."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()


def write_ports(path: Path, ports: dict[str, int]) -> None:
    """Write ``ports`` to ``path`` as JSON, whole or not at all (a reader polling for it never sees
    half): a new file of a random name beside it (created exclusively: never one planted there),
    then renamed over it."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        f.write(json.dumps(ports))
    os.replace(f.name, path)


async def _stop_frontend(frontend: Frontend, grace: float) -> None:
    """Stop one frontend and say so once, by name (a failure is logged, never raised)."""
    try:
        await frontend.stop(grace)
    except Exception:
        log.exception("%s frontend did not stop cleanly", frontend.name)
    else:
        log.log(logging.INFO if frontend.serving() else logging.DEBUG, "stopped %s frontend", frontend.name)


def _repository(value: Path | str) -> Repository:
    """A ``--model-repository`` value as the lifecycle reads it; a bad URL stops the server."""
    if not is_url(value):
        return Path(value).resolve()
    try:
        return ObjectStoreRepository(str(value))
    except (ValueError, RuntimeError) as exc:
        raise StartupError(str(exc)) from None
