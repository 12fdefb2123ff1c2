"""Building a servable model version from a model directory.

Reads and completes the config, picks the backend (creating it on first use), loads the model,
creates its instances, and attaches the scheduler and the response cache. The lifecycle decides
*when* to build and swap versions; this module knows *how* to build one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, cast

from inferd import config as cfg
from inferd.contracts.backend import Backend, InstanceSpec, Model, ModelClient, ModelLoadContext, process_cores
from inferd.contracts.errors import ConfigError, InferdError, InvalidArgument
from inferd.contracts.scheduler import ModelCaller, SchedulerContext
from inferd.engine.classification import load_labels
from inferd.engine.priority import lowered
from inferd.engine.rate_limiter import Gate, RateLimiter
from inferd.engine.recorder import Recorder
from inferd.engine.response_cache import ModelCache
from inferd.engine.runner import Runner
from inferd.engine.stats import ModelStats
from inferd.engine.version import ModelVersion
from inferd.lifecycle.progress import LoadProgress
from inferd.lifecycle.warmup import warm_up
from inferd.repository.scan import ModelSource

if TYPE_CHECKING:
    from inferd.contracts.cache import ResponseCache
    from inferd.contracts.scheduler import Scheduler
    from inferd.host.registry import Registration, Registry


class ServerModels(ModelCaller, ModelClient, Protocol):
    """How the models a builder makes call the server's other models: ensembles from the event
    loop (:class:`~inferd.contracts.scheduler.ModelCaller`), Python models from their instance threads
    (:class:`~inferd.contracts.backend.ModelClient`). The server's :class:`~inferd.engine.router.Router` is both."""


log = logging.getLogger(__name__)


class VersionFailed(InferdError):
    """Preparing a model failed on one version's files (auto-complete reads the highest version's
    model file): the lifecycle shows the failure on that version, and the others keep serving."""

    def __init__(self, version: int, cause: BaseException) -> None:
        if isinstance(cause, InferdError):
            super().__init__(cause.message, cause.kind)
        else:
            super().__init__(f"{type(cause).__name__}: {cause}")
        self.version = version


class VersionBuilder:
    """Builds :class:`~inferd.engine.version.ModelVersion` objects; holds the backends created so far."""

    def __init__(
        self,
        backends: Registry[Backend],
        schedulers: Registry[Scheduler],
        models: ServerModels,
        cache: ResponseCache | None = None,
        autocomplete: bool = True,
        backend_config: Mapping[str, Mapping[str, str]] | None = None,
        rate_limiter: RateLimiter | None = None,
        cores: int | None = None,
        worker: tuple[int, int] = (0, 1),
    ) -> None:
        self.backends = backends
        #: ``(index, count)`` of this serving process among ``--workers``: which of each model's
        #: instances it creates (:func:`instance_specs`).
        self.worker = worker
        #: What each version's load context says it may compute on (``ModelLoadContext.cores``).
        self.cores = process_cores() if cores is None else cores
        self.schedulers = schedulers
        #: Handed to backends (Python models calling models) and to ensembles' schedulers.
        self.models = models
        #: The server's response cache (``--cache-config``), if it has one.
        self.cache = cache
        self.autocomplete = autocomplete
        #: ``--backend-config`` by backend name (``""``: every backend).
        self.backend_config: Mapping[str, Mapping[str, str]] = backend_config or {}
        self._backends: dict[str, Backend] = {}
        #: Models prepare on several threads (``--model-load-thread-count``): one creates each
        #: backend, under its name's lock (two frameworks still import side by side).
        self._creating: dict[str, threading.Lock] = {}
        self._locks = threading.Lock()
        #: ``--rate-limit=execution_count``: the server's limiter (``None``: off, Triton's default).
        self.rate_limiter = rate_limiter
        #: Statistics of versions evicted under the memory budget, by (key, version): the next
        #: load of that version counts on from them (Triton's statistics outlive a reload too).
        self.kept_stats: dict[tuple[str, int], ModelStats] = {}

    def prepare_config(
        self, source: ModelSource, override: cfg.ModelConfig | None
    ) -> tuple[cfg.ModelConfig, Backend | None]:
        """Auto-complete, normalize and validate a copy of the model's config: ``override``, or
        the one parsed when the repository was scanned (blocking)."""
        config = self._base_config(source, override)
        self._check_scheduler(config, source.name)
        if config.platform == "ensemble":
            cfg.normalize(config, source.name, "", 1)
            cfg.validate(config)
            return config, None
        backend = self.backend_for(config, source)
        _check_runtime(config, source)
        if self.autocomplete:
            versions = source.version_dirs()
            latest = max(versions) if versions else None
            try:
                backend.autocomplete_config(config, source.path, versions[latest] if latest is not None else None)
            except Exception as exc:  # it read that version's model file: the failure is that version's
                if latest is None:
                    raise
                raise VersionFailed(latest, exc) from exc
        gpus = visible_gpus()
        cfg.normalize(config, source.name, backend.default_model_filename, backend.default_cpu_instance_count, gpus)
        cfg.validate(config, gpus)
        return config, backend

    def _check_scheduler(self, config: cfg.ModelConfig, model: str) -> None:
        """Fail the load before anything is built when ``inferd_scheduler`` names no registered scheduler."""
        name = named_scheduler(config)
        if name and name not in self.schedulers:
            raise InvalidArgument(
                f"model '{model}': parameter {SCHEDULER_PARAMETER} names scheduler '{name}', which no installed "
                f"plugin registers; registered schedulers: {', '.join(self.schedulers.names()) or 'none'}"
            )

    def _base_config(self, source: ModelSource, override: cfg.ModelConfig | None) -> cfg.ModelConfig:
        """A private copy of the config to complete: the scanned one is shared by every load."""
        base = override if override is not None else source.config
        if base is None:
            if source.config_error:
                raise ConfigError(source.config_error)
            if not self.autocomplete:
                raise InvalidArgument(
                    f"model '{source.name}' has no config.pbtxt and auto-complete is disabled "
                    f"(--disable-auto-complete-config / --strict-model-config=true)"
                )
        config = cfg.ModelConfig()
        if base is not None:
            config.CopyFrom(base)
        return config

    def backend_for(self, config: cfg.ModelConfig, source: ModelSource) -> Backend:
        name = cfg.backend_for(config)
        if name:
            return self.backend(name, source.name)
        if config.platform and not config.default_model_filename and cfg.backend_of_platform(config.platform) is None:
            # As Triton: an unknown platform is not completed from the files present (only from
            # a default_model_filename a backend declares, which then fails the platform check).
            raise ConfigError(f"unexpected platform type '{config.platform}' for {source.name}")
        return self._detect_backend(config, source)

    def _detect_backend(self, config: cfg.ModelConfig, source: ModelSource) -> Backend:
        """The backend whose model file is present, for a config naming none. Backends that
        declared their file names are matched without being created (no framework import)."""
        broken: list[str] = []
        versions = list(source.version_dirs().values())

        def present(filename: str) -> bool:
            return any((d / filename).exists() for d in versions)

        for reg in self.backends:
            declared = reg.options.get("model_filenames")
            if declared is not None:
                names = list(cast("Iterable[str]", declared))
                # A default_model_filename a backend declares picks it (Triton: model.onnx is onnxruntime).
                if config.default_model_filename:
                    if config.default_model_filename not in names:
                        continue
                elif not any(present(f) for f in names):
                    continue
            try:
                backend = self.backend(reg.name, source.name)
            except InferdError as exc:
                broken.append(f"'{reg.name}' ({exc.message})")
                continue
            if declared is not None or present(config.default_model_filename or backend.default_model_filename):
                config.backend = backend.name
                return backend
        raise self._unrecognised(source, broken)

    def _unrecognised(self, source: ModelSource, broken: list[str]) -> InvalidArgument:
        detail = f"; backends that could not start: {'; '.join(broken)}" if broken else ""
        return InvalidArgument(
            f"Invalid model name: Could not determine backend for model '{source.name}' with no backend in model "
            f"configuration. Expected model name of the form 'model.<backend_name>'.; no installed backend "
            f"recognises its files; installed backends: {', '.join(self.backends.names()) or 'none'}{detail}"
            f"{nested_repository_hint(source)}"
        )

    def backend(self, name: str, model: str) -> Backend:
        """The backend ``name``, created on first use (once, whichever load thread asks first)."""
        backend = self._backends.get(name)
        if backend is not None:
            return backend
        with self._locks:
            creating = self._creating.setdefault(name, threading.Lock())
        with creating:
            backend = self._backends.get(name)
            return backend if backend is not None else self._create_backend(name, model)

    def _create_backend(self, name: str, model: str) -> Backend:
        for reg in self.backends:  # platform strings (onnxruntime_onnx...) map to backends
            if reg.name == name:
                break
        else:
            raise InvalidArgument(
                f"unable to find backend library for backend '{name}', try specifying runtime on the model "
                f"configuration.; model '{model}' asks for backend '{name}', which no installed plugin provides; "
                f"installed: {', '.join(self.backends.names()) or 'none'}"
            )
        try:
            backend = self._create(reg)
        except ImportError as exc:
            raise InvalidArgument(
                f"model '{model}' needs backend '{name}' (plugin '{reg.plugin}'), whose framework "
                f"is not installed: {exc}"
            ) from None
        self._backends[name] = backend
        return backend

    def _create(self, reg: Registration[Backend]) -> Backend:
        """Call the backend's factory; one that declared ``settings`` gets its ``--backend-config``."""
        keys = declared_settings(reg)
        if keys is None:
            return reg.factory()
        return reg.factory(backend_settings(self.backend_config, reg.name, keys))

    async def load_version(
        self, source: ModelSource, config: cfg.ModelConfig, backend: Backend | None, version: int
    ) -> ModelVersion:
        """Build, warm up and return one version; its scheduler gets a :class:`SchedulerContext`.

        Logs Triton's ``loading: <model>:<version>`` as it starts, so a slow load shows while it
        happens, a line every few seconds while it lasts (:mod:`~inferd.lifecycle.progress`), and
        ``successfully loaded '<model>' version <n>`` with the time it took."""
        log.info("loading: %s:%d", source.name, version)
        with LoadProgress(f"{source.name}:{version}"):
            return await self._load_version(source, config, backend, version)

    async def _load_version(
        self, source: ModelSource, config: cfg.ModelConfig, backend: Backend | None, version: int
    ) -> ModelVersion:
        started = time.monotonic_ns()
        version_config = cfg.ModelConfig()
        version_config.CopyFrom(config)
        stats = self.kept_stats.pop((source.key, version), None) or ModelStats(source.name, str(version))
        recorder = Recorder(stats, version_config.max_batch_size)
        model: Model | None = None
        runners: list[Runner] = []
        if backend is not None:
            build = self.build_version
            loop = asyncio.get_running_loop()
            model, runners = await asyncio.to_thread(
                lowered, build, source, version_config, backend, version, recorder, loop
            )
        try:
            labels = await asyncio.to_thread(load_labels, source.path, version_config)
            mv = self._assemble(source, version, version_config, model, runners, recorder, labels)
            await warm_up(mv)
        except Exception:
            await asyncio.to_thread(lowered, close_instances, model, runners)
            raise
        mv.cache = self._model_cache(mv)
        mv.stats.load_duration_ns = time.monotonic_ns() - started
        log.info("successfully loaded '%s' version %d in %.2f s", source.name, version, mv.stats.load_duration_ns / 1e9)
        return mv

    def build_ensemble(self, source: ModelSource, config: cfg.ModelConfig, version: int) -> ModelVersion:
        """An ensemble's version, built at once on the calling thread: it has no instance and
        nothing to warm up, so only its label files are read (small). The lifecycle rebuilds the
        ensembles over a model in the same loop turn as it swaps that model's new version in."""
        started = time.monotonic_ns()
        version_config = cfg.ModelConfig()
        version_config.CopyFrom(config)
        recorder = Recorder(ModelStats(source.name, str(version)), version_config.max_batch_size)
        labels = load_labels(source.path, version_config)
        mv = self._assemble(source, version, version_config, None, [], recorder, labels)
        mv.cache = self._model_cache(mv)
        mv.stats.load_duration_ns = time.monotonic_ns() - started
        return mv

    def _assemble(
        self,
        source: ModelSource,
        version: int,
        config: cfg.ModelConfig,
        model: Model | None,
        runners: list[Runner],
        recorder: Recorder,
        labels: dict[str, list[str]],
    ) -> ModelVersion:
        """The version around its instances: its scheduler (an ensemble's checks its steps as it is made) and labels."""
        context = SchedulerContext(
            source.name, version, config, runners, recorder, source.path, self.models, source.namespace
        )
        scheduler = self.schedulers.create(scheduler_name(config), context)
        labels = {**scheduler.output_labels(), **labels}
        mv = ModelVersion(
            source.name,
            version,
            config,
            model,
            runners,
            scheduler,
            recorder.stats,
            source.path,
            labels,
            source.namespace,
        )
        if mv.decoupled and config.response_cache.enable:  # an ensemble over a decoupled step
            raise InvalidArgument(
                f"Response Cache does not currently support model {source.name} with 'decoupled' "
                "transaction policy. Please disable the response cache."
            )
        return mv

    def _model_cache(self, mv: ModelVersion) -> ModelCache | None:
        """The cache binding for a version whose config has ``response_cache { enable: true }``."""
        if not mv.config.response_cache.enable:
            return None
        if self.cache is None:
            log.warning(
                "model '%s' version %d enables response_cache, but the server has no cache "
                "configured (--cache-config <name>,<key>=<value>); its responses are not cached",
                mv.name,
                mv.version,
            )
            return None
        return ModelCache(self.cache, mv.name, mv.version, mv.stats)

    def build_version(
        self,
        source: ModelSource,
        config: cfg.ModelConfig,
        backend: Backend,
        version: int,
        recorder: Recorder,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> tuple[Model, list[Runner]]:
        """Load the backend model and create its instances (blocking; ``loop``: the server's)."""
        specs = instance_specs(config, *self.worker)
        ctx = ModelLoadContext(
            name=source.name,
            version=version,
            config=config,
            model_dir=source.path,
            version_dir=source.path / str(version),
            repository=source.repository,
            models=self.models,
            loop=loop,
            cores=self.cores,
            instances=len(specs),
        )
        model = backend.load_model(ctx)
        runners: list[Runner] = []
        try:
            for spec in specs:
                gate = self._gate(source.name, version, config, spec)
                try:
                    runner = Runner(model.create_instance(spec), spec, recorder, gate)  # refuses an untyped instance
                except BaseException:
                    if gate is not None:
                        gate.close()
                    raise
                runners.append(runner)
        except BaseException:
            close_instances(model, runners)
            raise
        return model, runners

    def _gate(self, name: str, version: int, config: cfg.ModelConfig, spec: InstanceSpec) -> Gate | None:
        """The rate limiter's hold on one instance, from its group's ``rate_limiter`` (if any)."""
        if self.rate_limiter is None:
            return None
        group = next((g for g in config.instance_group if g.name == spec.group_name), None)
        if group is None or not group.HasField("rate_limiter"):
            return None
        owner = f"model '{name}' version {version} instance '{spec.name}'"
        return self.rate_limiter.gate(owner, spec.device_id, group.rate_limiter)


def declared_settings(reg: Registration[Backend]) -> frozenset[str] | None:
    """The ``--backend-config`` keys a backend registered with ``settings=...`` (``None``: none declared)."""
    keys = reg.options.get("settings")
    if keys is None:
        return None
    return frozenset(str(k) for k in keys) if isinstance(keys, (list, tuple, set, frozenset)) else frozenset()


def backend_settings(config: Mapping[str, Mapping[str, str]], backend: str, keys: frozenset[str]) -> dict[str, str]:
    """The settings ``backend`` reads (``keys``): those for every backend, then its own over them."""
    merged = {**config.get("", {}), **config.get(backend, {})}
    return {k: v for k, v in merged.items() if k in keys}


def backend_config_warnings(backends: Registry[Backend], config: Mapping[str, Mapping[str, str]]) -> list[str]:
    """One line per ``--backend-config`` setting no installed backend reads (it is ignored)."""
    read = {r.name: declared_settings(r) or frozenset() for r in backends}
    everyone = frozenset().union(*read.values())
    lines = []
    for name, settings in sorted(config.items()):
        for key, value in sorted(settings.items()):
            flag = f"--backend-config={name + ',' if name else ''}{key}={value}"
            if name and name not in read:
                lines.append(f"{flag}: no installed backend is named '{name}'; ignored")
            elif name and key not in read[name]:
                lines.append(f"{flag}: the {name} backend does not read '{key}'; ignored")
            elif not name and key not in everyone:
                lines.append(f"{flag}: no installed backend reads '{key}'; ignored")
    return lines


def close_instances(model: Model | None, runners: list[Runner]) -> None:
    """Close ``runners``' instances, then unload ``model`` (blocking)."""
    for runner in runners:
        runner.close()
    if model is not None:
        model.unload()


def visible_gpus() -> list[int]:
    """NVIDIA GPUs the driver exposes (``/proc/driver/nvidia/gpus``), honouring
    ``CUDA_VISIBLE_DEVICES`` when it lists plain indices; no framework is imported."""
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return []
    ids = list(range(count))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        if all(v.isdigit() for v in wanted):
            ids = [i for i in range(len(wanted)) if int(wanted[i]) < count]
    return ids


def instance_specs(config: cfg.ModelConfig, worker: int = 0, workers: int = 1) -> list[InstanceSpec]:
    """The instances worker ``worker`` of ``workers`` creates, with Triton's naming:
    ``<group name>_<n>``, ``count`` instances per listed GPU.

    A config's instances are the server's, not each worker's: they are dealt out among the
    workers in turn (worker ``w`` takes every ``workers``-th, from the ``w``-th), so ``count: 2``
    under ``--workers 2`` runs two instances in all, one per worker, as one Triton server would.
    A worker that the deal leaves empty takes one instance anyway (it must serve the model), so
    a model has ``max(instances, workers)`` in all.
    """
    specs: list[InstanceSpec] = []
    kinds = {0: "KIND_AUTO", 1: "KIND_GPU", 2: "KIND_CPU", 3: "KIND_MODEL"}
    for group in config.instance_group:
        kind = kinds.get(group.kind, "KIND_CPU")
        devices = list(group.gpus) if kind == "KIND_GPU" and group.gpus else [0 if kind == "KIND_GPU" else -1]
        n = 0
        for device in devices:
            for _ in range(max(1, group.count)):
                specs.append(InstanceSpec(f"{group.name}_{n}", kind, max(device, 0), n, group.name))
                n += 1
    if workers <= 1 or not specs:
        return specs
    return specs[worker::workers] or [specs[worker % len(specs)]]


#: The model-config parameter that names a registered scheduler (a plugin's, or a built-in one).
SCHEDULER_PARAMETER = "inferd_scheduler"


def named_scheduler(config: cfg.ModelConfig) -> str:
    """The scheduler the config's ``inferd_scheduler`` parameter names ("" when it names none)."""
    return config.parameters[SCHEDULER_PARAMETER].string_value if SCHEDULER_PARAMETER in config.parameters else ""


def scheduler_name(config: cfg.ModelConfig) -> str:
    """The scheduler a version gets: the one its ``inferd_scheduler`` parameter names, else the
    built-in its scheduling choice implies (Triton's: ``dynamic_batching`` -> ``dynamic``...)."""
    named = named_scheduler(config)
    if named:
        return named
    if config.platform == "ensemble":
        return "ensemble"
    choice = config.WhichOneof("scheduling_choice")
    return {"dynamic_batching": "dynamic", "sequence_batching": "sequence", "ensemble_scheduling": "ensemble"}.get(
        choice or "", "direct"
    )


def nested_repository_hint(source: ModelSource) -> str:
    """A hint when a model directory is a model repository itself (``cp -r models /tmp/models``
    run twice copies the second one inside the first); "" otherwise."""
    try:
        inner = sorted(d.name for d in source.path.iterdir() if (d / "config.pbtxt").is_file())
    except OSError:
        return ""
    if not inner:
        return ""
    return (
        f"; '{source.name}' holds models of its own ({', '.join(inner[:3])}{', ...' if len(inner) > 3 else ''}): "
        f"a repository copied into this one (`cp -r` onto an existing directory nests it)? Remove it "
        f"(`rm -rf DIR && cp -r SRC DIR` copies afresh) or serve it with its own --model-repository; "
        f"--exit-on-error=false serves the other models meanwhile"
    )


def _check_runtime(config: cfg.ModelConfig, source: ModelSource) -> None:
    """Triton's refusal of a ``runtime`` that leaves the backend directory (``../../x.so``). Any
    other ``runtime`` is accepted and not used: inferd's backends are plugins, not libraries."""
    runtime = config.runtime
    if not runtime or os.path.isabs(runtime):
        return
    versions = source.version_dirs()
    base = str(versions[max(versions)] if versions else source.path)
    if not os.path.normpath(os.path.join(base, runtime)).startswith(base.rstrip(os.sep) + os.sep):
        raise ConfigError(
            f"backend library name '{runtime}' escapes backend directory '{base}', for model '{source.name}', "
            "check model config runtime field"
        )
