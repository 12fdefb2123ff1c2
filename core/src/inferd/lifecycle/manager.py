"""Model lifecycle: control modes, loading, the load-new-then-swap reload, unloading.

States (``inferd.engine.states``) follow Triton, each with a reason. A reload builds the new versions
while the old ones keep serving, swaps them in one assignment, then drains and closes the old
ones. Configs come parsed from the repository scan; the order ensembles and the models they call
load and unload in comes from ``inferd.lifecycle.dependencies``. A version that fails to load leaves the old one serving and its
reason visible in the repository index; one bad model never blocks the others. A model that
reloads with other inputs or outputs has the ensembles over it rebuilt in the same loop turn, or
taken out of serving (UNAVAILABLE, with the reason) until they fit it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from inferd import config as cfg
from inferd.auth.policy import unknown_to_load
from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.engine import gc_settings
from inferd.engine.health import model_is_ready
from inferd.engine.model_table import ModelTable, ambiguous_name
from inferd.engine.priority import lowered
from inferd.engine.states import (
    EVICTED,
    LOADING,
    READY,
    UNLOADED,
    UNLOADING,
    ModelRecord,
    State,
    VersionState,
    Why,
)
from inferd.engine.version import ModelVersion
from inferd.lifecycle.budget import LARGE_BLOCK, rss_bytes
from inferd.lifecycle.builder import VersionBuilder, VersionFailed
from inferd.lifecycle.dependencies import callers, composing, load_waves, unload_order
from inferd.lifecycle.model_memory import ModelMemory
from inferd.lifecycle.reclaim import MemoryChanges, collected, reclaim, references
from inferd.repository.scan import (
    ModelSource,
    OverrideDirs,
    Repository,
    RepositoryDiff,
    Snapshot,
    model_key,
    poll_failure,
    scan,
)

if TYPE_CHECKING:
    from inferd.contracts.backend import Backend

log = logging.getLogger(__name__)


class ControlMode(str, enum.Enum):
    NONE = "none"
    EXPLICIT = "explicit"
    POLL = "poll"


#: What loads a model that is in a repository but not loaded, in each control mode.
LOAD_ADVICE = {
    ControlMode.EXPLICIT: "load it with POST /v2/repository/models/{name}/load (gRPC RepositoryModelLoad), "
    "or start the server with --load-model={name}",
    ControlMode.POLL: "the server loads it when a scan finds its files new or changed",
    ControlMode.NONE: "restart the server to load it, or serve with --model-control-mode=explicit to load it with "
    "POST /v2/repository/models/{name}/load, or with --model-control-mode=poll to load it when its files change",
}


@dataclass(frozen=True)
class LifecycleOptions:
    repositories: list[Repository]
    mode: ControlMode = ControlMode.NONE
    startup_models: list[str] = field(default_factory=list)
    autocomplete: bool = True
    config_name: str | None = None
    load_threads: int = 4
    #: How long an unload waits for a version's in-flight requests before it abandons the
    #: instances still executing (``--model-unload-timeout-secs``).
    unload_timeout_secs: float = 30.0
    #: ``--model-namespacing``: models are keyed by repository and name, so one name may be in
    #: several repositories (each ensemble calls its own repository's models first).
    namespacing: bool = False
    #: ``--strict-readiness``: only for the warning that a model added under poll failed to load
    #: while the server stays ready (``inferd.engine.health``).
    strict_readiness: bool = True
    #: With ``namespacing``, each repository's namespace: the value given for it, as Triton names
    #: it (the metrics' ``namespace`` label); empty: each one's path or URL.
    namespaces: list[str] = field(default_factory=list)
    #: ``--model-load-on-demand``: start-up loads only the ``--load-model`` names and the pinned
    #: models; the others load on their first request (:mod:`inferd.lifecycle.on_demand`), and
    #: poll loads only new files of models that are loaded.
    on_demand: bool = False
    #: ``--model-pin``: names never evicted (besides those whose config says ``pin``).
    pinned: frozenset[str] = frozenset()


class ModelManager:
    """Owns every model record and applies loads, unloads and repository diffs.

    Models are handled by key (``repository.model_key``: the name, or with namespacing the
    repository and name); a load or unload request names a model, and acts on every key of it.
    """

    def __init__(self, options: LifecycleOptions, table: ModelTable, builder: VersionBuilder) -> None:
        self.options = options
        #: What serves now; the lifecycle is its only writer.
        self.table = table
        table.load_advice = LOAD_ADVICE[options.mode]
        self.builder = builder
        self._load_slots = asyncio.Semaphore(max(1, options.load_threads))
        self._overrides = OverrideDirs()
        #: Models (by key) serving a config from a load request's override, with the files it was
        #: loaded from: a later load without one, the files unchanged, keeps it (Triton reloads nothing).
        self._overridden: dict[str, ModelSource] = {}
        #: Ensembles taken out of serving because a model their steps call changed under them:
        #: what they served, rebuilt when one of those models changes again (:meth:`_refit`).
        self._unfit: dict[str, _Unfit] = {}
        #: Each loaded model's resident footprint (bytes, by key): the process's RSS growth over
        #: its last load (:mod:`inferd.lifecycle.budget`) plus the host bytes its versions report.
        self.footprints: dict[str, int] = {}
        #: The parts of each footprint, and what each model holds on devices (:mod:`inferd.lifecycle.model_memory`).
        self.memory = ModelMemory()
        #: The last footprint each model measured, kept once it unloads (what its next load expects).
        self.last_footprints: dict[str, int] = {}
        #: What each model's last eviction gave back. Where that is more than the growth over its
        #: next load, it grew after its load (memory allocated on requests: onnxruntime's arena,
        #: caches) and that load counts the larger size, so the budget sees what it holds once it serves.
        self.released: dict[str, int] = {}
        #: The loads and evictions under way (whether an eviction's RSS reading is its own).
        self.changes = MemoryChanges()

    @property
    def snapshot(self) -> Snapshot:
        """The repository scan the served models come from."""
        return self.table.snapshot

    # -- start / stop ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load what the control mode says to load at start-up."""
        self.table.snapshot = await asyncio.to_thread(self.rescan, False)
        self._report_duplicates(self.table.snapshot)
        snapshot = self.table.snapshot
        if self.options.on_demand:
            named = [k for name in self.options.startup_models if name != "*" for k in snapshot.keys_of(name)]
            named += [k for k, s in snapshot.models.items() if self.pinned(k, s.config)]
            calls = self._scanned_calls()
            keys = list(dict.fromkeys(dep for k in named for dep in (*composing(calls, k), k)))
        elif self.options.mode is ControlMode.EXPLICIT and "*" not in self.options.startup_models:
            named = [k for name in self.options.startup_models for k in snapshot.keys_of(name)]
            calls = self._scanned_calls()  # as Triton does, with the models their steps call
            keys = list(dict.fromkeys(dep for k in named for dep in (*composing(calls, k), k)))
        else:
            keys = list(snapshot.models)
        await self._load_many(keys)

    async def shutdown(self) -> None:
        """Drain and unload every model."""
        await asyncio.gather(*(self._unload_record(r, UNLOADED) for r in list(self.table.records.values())))
        await asyncio.to_thread(self._overrides.remove)

    def rescan(self, reuse: bool = True) -> Snapshot:
        """Scan the repositories (blocking); with ``reuse``, models whose files did not change
        keep the configs parsed by the last scan."""
        previous = self.table.snapshot if reuse else None
        options = self.options
        return scan(options.repositories, options.config_name, previous, options.namespacing, options.namespaces)

    # -- control --------------------------------------------------------------------------------

    async def load(
        self, name: str, override: cfg.ModelConfig | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load (or reload) one model, in every repository holding it (with namespacing, as
        Triton does); raise if one ends up not ready.

        ``files`` (Triton's ``file:<version>/<name>`` load parameters) replace the model's
        directory with one holding just those files; they need a config ``override``. A model
        loaded with an override and asked again without one keeps it while its files are
        unchanged, as Triton does.
        """
        if files:
            if override is None:
                raise InvalidArgument(f"{poll_failure(name)}: file overrides need a 'config' parameter too")
            namespace = self._override_namespace(name)
            source = await asyncio.to_thread(self._overrides.write, name, files)
            source = dataclasses.replace(source, namespace=namespace)
            await self._load_one(source, override)
            self._overridden[source.key] = source
            self._check_loaded(source.key)
            return
        snapshot = self.table.snapshot = await asyncio.to_thread(self.rescan, False)
        keys = snapshot.keys_of(name)
        if not keys:
            dup = snapshot.duplicates.get(name)
            if dup:
                raise InvalidArgument(f"model '{name}' exists in more than one repository: {', '.join(map(str, dup))}")
            raise unknown_to_load(name, self.table.names())
        for key in keys:
            if key in snapshot.stale:  # only the cached copy of an unreadable store
                raise InvalidArgument(f"{poll_failure(name)}: {snapshot.stale[key]}")
        for key in keys:
            await self._load_key(snapshot.models[key], override)
        for key in keys:
            self._check_loaded(key)

    def pinned(self, key: str, config: cfg.ModelConfig | None = None) -> bool:
        """Whether ``key`` is never evicted: named by ``--model-pin``, or its config has
        ``parameters { key: "pin" value { string_value: "true" } }``."""
        record = self.table.records.get(key)
        name = record.name if record is not None else key.rpartition("::")[2]
        if name in self.options.pinned or key in self.options.pinned:
            return True
        configs = [mv.config for mv in record.serving.values()] if record is not None else []
        if config is not None:
            configs.append(config)
        return any(c.parameters["pin"].string_value.lower() == "true" for c in configs if "pin" in c.parameters)

    async def load_on_demand(self, key: str) -> None:
        """Load ``key`` as the repository's last scan has it, with the models its steps call (a
        request asked for it: :mod:`inferd.lifecycle.on_demand`)."""
        await self._load_key(self.table.snapshot.models[key], None)

    async def evict(self, key: str) -> None:
        """Unload ``key`` to make room under the memory budget: its versions drain and close, their
        statistics are kept for its next load, and the index shows it EVICTED."""
        record = self.table.records.get(key)
        if record is None or not record.serving:
            return
        # (no loop variable: one would hold the last version, and its memory, past the trim below)
        self.builder.kept_stats.update({(key, v): mv.stats for v, mv in record.serving.items()})
        footprint, host, resident = self.memory.rss.get(key, 0), self.memory.host.get(key, 0), rss_bytes()
        refs = references(o for mv in record.serving.values() for o in (mv, mv.model, *mv.runners))
        with self.changes.change() as alone:
            await self._unload_record(record, EVICTED)
            self.footprints.pop(key, None)
            gone = await collected(refs)
            if resident - rss_bytes() < footprint // 2:  # (reclaim's own docstring says when it is worth it)
                await asyncio.to_thread(lowered, reclaim, not gone, alone())
            released = resident - rss_bytes()
            if not alone():  # others' loads and evictions moved the RSS too: it says nothing of this model
                return
        self.released[key] = released
        if released > footprint + LARGE_BLOCK:  # it grew after its load (lazy allocations, an arena)
            self.last_footprints[key] = released + host

    def refresh_footprints(self) -> None:
        """Read again what each loaded model's versions report (``Model.memory_usage``, cheap)."""
        for key, record in self.table.records.items():
            if record.serving and key in self.memory.rss:
                self.footprints[key] = self.memory.read(key, record.serving.values())

    async def _load_key(self, source: ModelSource, override: cfg.ModelConfig | None) -> None:
        """:meth:`load` of one model key, with the models its steps call."""
        key = source.key
        if override is None and self._keeps_override(key, source):
            log.info("model '%s': loaded with a config override and its files are unchanged; nothing to reload", key)
            return
        await self._load_composing(source, override)
        await self._load_one(source, override)
        if override is None:
            self._overridden.pop(key, None)
        else:
            self._overridden[key] = source

    def _override_namespace(self, name: str) -> str:
        """The repository a model loaded from a request's files joins: the one holding ``name``, if
        one does (a name held by several is refused, as a request for it would be)."""
        keys = self.table.keys_of(name)
        if len(keys) > 1:
            raise ambiguous_name(name, len(keys))
        if keys:
            record = self.table.records.get(keys[0])
            return record.namespace if record is not None else self.table.snapshot.models[keys[0]].namespace
        return ""

    def _keeps_override(self, key: str, source: ModelSource) -> bool:
        """Whether ``key`` serves an override loaded from exactly these files."""
        loaded = self._overridden.get(key)
        record = self.table.records.get(key)
        return (
            loaded is not None
            and record is not None
            and bool(record.serving)
            and loaded.path == source.path
            and loaded.fingerprint == source.fingerprint
        )

    async def _load_composing(self, source: ModelSource, override: cfg.ModelConfig | None) -> None:
        """As Triton does, load the models an ensemble's steps call that are not serving yet,
        each after those it calls; a plain model has none."""
        calls = self._scanned_calls()
        if override is not None:
            steps = dict.fromkeys(s.model_name for s in override.ensemble_scheduling.step)
            calls[source.key] = self._step_keys(source.namespace, steps)
        for dep in composing(calls, source.key):
            record = self.table.records.get(dep)
            if record is None or not record.serving:
                await self._load_one(self.table.snapshot.models[dep])

    def _check_loaded(self, key: str) -> None:
        record = self.table.records[key]
        if record.load_error():
            raise InvalidArgument(record.load_failure())

    async def unload(self, name: str, unload_dependents: bool = False, why: Why = Why.UNLOADED) -> None:
        """Unload every version of ``name`` (in every repository holding it) and, as Triton does,
        every ensemble that calls it (they could no longer run). With ``unload_dependents``, an
        ensemble's composing models go too, unless another ensemble still serving calls them.
        Unloading an unknown model succeeds."""
        for key in self.table.keys_of(name):
            await self._unload_key(key, unload_dependents, why)

    async def _unload_key(self, key: str, unload_dependents: bool, why: Why) -> None:
        records = self.table.records
        if key not in records:
            return
        first, *rest = order = unload_order(self._serving_calls(), key, unload_dependents)
        names = {step.model: records[step.model].name for step in order}  # before _forget drops records
        await self._unload_record(records[first.model], VersionState(State.UNAVAILABLE, why))
        await self._forget(first.model)
        for step in rest:
            because = names.get(step.because, step.because)
            final = VersionState(State.UNAVAILABLE, Why.DEPENDENCY, because) if step.because else UNLOADED
            await self._unload_record(records[step.model], final)
            await self._forget(step.model)

    async def _forget(self, key: str) -> None:
        """Drop what an unloaded model's overrides left: a model that exists only through a load
        request's files leaves the index, as in Triton, and its private directory goes."""
        self._unfit.pop(key, None)
        source = self._overridden.pop(key, None)
        scanned = self.table.snapshot.models.get(key)
        if source is not None and (scanned is None or scanned.path != source.path):
            await asyncio.to_thread(self._overrides.discard, source)
        if key not in self.table.snapshot.models:
            self.table.forget(key)

    async def apply(self, snapshot: Snapshot, changes: RepositoryDiff) -> None:
        """Apply a repository diff (poll mode): remove, then load added and modified models.

        Models added here count as added under poll: their failure to load does not make the
        server unready (:mod:`inferd.engine.health`); a WARNING says so where Triton's readiness would flip."""
        self.table.snapshot = snapshot
        self._report_duplicates(snapshot)
        for key in changes.removed:
            self.table.poll_added.discard(key)
            if key in self.table.records:
                await self._unload_key(key, False, Why.REMOVED)
                self.table.forget(key)
        self.table.poll_added.update(changes.added)
        if self.options.on_demand:  # only what serves loads its new files now; the others on their next request
            await self._load_many([k for k in changes.modified if self.table.records.get(k, _NONE).serving])
            return
        await self._load_many(changes.added + changes.modified)
        if self.options.strict_readiness:
            for name in changes.added:
                record = self.table.records.get(name)
                if record is not None and not model_is_ready(record):
                    log.warning(
                        "model '%s' appeared under poll and failed to load: it is UNAVAILABLE (its reason is "
                        "in the repository index) and the server stays ready",
                        name,
                    )

    def _step_keys(self, namespace: str, names: Iterable[str]) -> list[str]:
        """The keys of the models an ensemble of ``namespace`` calls by these names (a name held by
        several other repositories is left out: the ensemble refuses it when it loads)."""
        if not self.options.namespacing:
            return list(names)
        keys = []
        for name in names:
            try:
                keys.append(self.table.step_key(namespace, name))
            except InferdError:
                continue
        return keys

    def _scanned_calls(self) -> dict[str, Sequence[str]]:
        """The models each model's steps call, as its scanned config says."""
        return {k: self._step_keys(s.namespace, s.step_models) for k, s in self.table.snapshot.models.items()}

    def serving_calls(self) -> dict[str, Sequence[str]]:
        """The models (keys) the steps of each serving ensemble call."""
        return self._serving_calls()

    def _serving_calls(self) -> dict[str, Sequence[str]]:
        """The models the steps of each serving model's versions call."""
        return {
            k: self._step_keys(
                r.namespace,
                dict.fromkeys(s.model_name for mv in r.serving.values() for s in mv.config.ensemble_scheduling.step),
            )
            for k, r in self.table.records.items()
            if r.serving
        }

    # -- loading --------------------------------------------------------------------------------

    async def _load_many(self, keys: list[str]) -> None:
        """Load ``keys`` in waves, the models an ensemble calls before the ensemble."""
        known = [k for k in keys if k in self.table.snapshot.models]
        for wave in load_waves(self._scanned_calls(), known):
            await asyncio.gather(*(self._load_one(self.table.snapshot.models[k]) for k in wave))

    async def _load_one(self, source: ModelSource, override: cfg.ModelConfig | None = None) -> None:
        """Build the versions the config picks, then swap them in; failures stay in the record.

        The versions serving keep serving until every version the policy picks is READY: a new
        version that fails leaves the old ones serving (even one whose directory was removed)."""
        record = self.table.record(source)
        async with record.lock, self._load_slots:
            before = interface(record.serving)
            with self.changes.change():  # (its RSS reading: an eviction beside it knows it moved)
                started = time.monotonic()
                resident = rss_bytes()
                try:
                    config, backend, chosen = await asyncio.to_thread(lowered, self._prepare, source, override)
                except Exception as exc:
                    version = exc.version if isinstance(exc, VersionFailed) else None
                    record.fail(failure_reason(exc), list(source.version_dirs()), version)
                    _log_failure(record, source.name, version, failure_reason(exc))
                    return
                record.state = None
                built, failures = await self._build(record, source, config, backend, chosen)
                if set(chosen) - built.keys():  # the replacements are not all READY: what served keeps serving
                    built = {**{v: mv for v, mv in record.serving.items() if v not in chosen}, **built}
                self._swap(record, built)
                record.drop_failed(chosen)
                for v, reason in failures.items():
                    _log_failure(record, source.name, v, reason)
                self.table.traffic.configured(record.name, config, sorted(record.serving))
                if record.serving:
                    grown = max(0, rss_bytes() - resident, self.released.get(source.key, 0))
                    grown = self.memory.loaded(source.key, grown, record.serving.values())
                    self.footprints[source.key] = self.last_footprints[source.key] = grown
                log.info(
                    "model '%s' versions %s ready in %.2f s",
                    source.name,
                    sorted(record.serving) or "none",
                    time.monotonic() - started,
                )
        await self._after_load(source.key, before)

    def _prepare(
        self, source: ModelSource, override: cfg.ModelConfig | None
    ) -> tuple[cfg.ModelConfig, Backend | None, list[int]]:
        return prepare(self.builder, source, override)

    async def _build(
        self,
        record: ModelRecord,
        source: ModelSource,
        config: cfg.ModelConfig,
        backend: Backend | None,
        chosen: list[int],
    ) -> tuple[dict[int, ModelVersion], dict[int, str]]:
        """The versions to serve next (those built, and the old ones whose rebuild failed), and
        the reason of each version that failed."""
        for v in chosen:
            if v not in record.serving:
                record.versions[v] = LOADING
        results = await asyncio.gather(
            *(self.builder.load_version(source, config, backend, v) for v in chosen), return_exceptions=True
        )
        built: dict[int, ModelVersion] = {}
        failures: dict[int, str] = {}
        for v, result in zip(chosen, results, strict=True):
            if isinstance(result, ModelVersion):
                built[v] = result
                record.versions[v] = READY
                continue
            failures[v] = reason = failure_reason(result)
            if v in record.serving:  # a failed reload keeps the old version serving
                built[v] = record.serving[v]
                record.versions[v] = VersionState(State.READY, Why.RELOAD_FAILED, reason)
            else:
                record.versions[v] = VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, reason)
        return built, failures

    def _swap(self, record: ModelRecord, serving: dict[int, ModelVersion]) -> None:
        """New requests reach ``serving`` from now on; the versions it replaces drain and close."""
        old, record.serving = record.serving, serving
        for v in old:
            if v not in serving:
                record.versions[v] = UNLOADED
        retired = [mv for v, mv in old.items() if serving.get(v) is not mv]
        if retired:
            asyncio.get_running_loop().create_task(self._retire(retired))

    # -- unloading ------------------------------------------------------------------------------

    async def _unload_record(self, record: ModelRecord, final: VersionState) -> None:
        """Stop serving every version of ``record``, drain them, and leave them in ``final``."""
        self.footprints.pop(model_key(record.namespace, record.name), None)
        self.memory.forget(model_key(record.namespace, record.name))
        async with record.lock:
            old = record.serving
            record.serving = {}
            self.table.traffic.forget(record.name)
            for v in old:
                record.versions[v] = UNLOADING
            await self._retire(list(old.values()))
            for v, state in record.versions.items():
                if v in old or state.why is Why.STEPS_CHANGED:  # (taken out for a step: it served until then)
                    record.versions[v] = final

    async def _retire(self, versions: list[ModelVersion]) -> None:
        """Let in-flight requests finish, then close instances and unload."""
        gc_settings.thaw()  # a frozen start-up heap would keep the version's cycles forever
        for mv in versions:
            try:
                await mv.stop(self.options.unload_timeout_secs)
                await asyncio.to_thread(lowered, mv.close)
            except Exception:
                log.exception("model '%s' version %d failed to unload cleanly", mv.name, mv.version)

    # -- the ensembles over a model that changed --------------------------------------------------

    async def _after_load(self, key: str, before: Interface) -> None:
        """Right after ``key``'s new versions were swapped in (no loop turn between): if what
        the ensembles calling it rely on changed (its :func:`interface`), :meth:`_refit` each of
        them in the same turn, so none serves a plan made for the old inputs; one whose own load
        is under way is refitted once that load is done."""
        record = self.table.records.get(key)
        if record is None:
            return
        if record.serving:
            self._unfit.pop(key, None)
        if interface(record.serving) == before:
            return
        busy: list[str] = []
        self._refit_callers(key, busy, {key}, bool(before))
        for caller in busy:
            record = self.table.records.get(caller)
            if record is None:
                continue
            async with record.lock:
                before = interface(record.serving)
                self._refit(caller)
            await self._after_load(caller, before)

    def _refit_callers(self, key: str, busy: list[str], seen: set[str], served: bool = True) -> None:
        """:meth:`_refit` the ensembles over ``key`` now, and those over each one that changed;
        those being loaded or unloaded go to ``busy``. ``served``: whether ``key`` served before."""
        for caller in self._callers_of(key, served):
            record = self.table.records.get(caller)
            if record is None or caller in seen:
                continue
            seen.add(caller)
            if record.lock.locked():
                busy.append(caller)
                continue
            before = interface(record.serving)
            self._refit(caller)
            if interface(record.serving) != before:
                self._refit_callers(caller, busy, seen, bool(before))

    def _callers_of(self, key: str, served: bool) -> list[str]:
        """The ensembles to refit when ``key`` changes: those serving over it (only a model that
        ``served`` has some: the first loads of a large repository skip looking), those taken
        out for it, and under poll those of the repository that are not serving (failed to load)."""
        calls: dict[str, Sequence[str]] = self._serving_calls() if served else {}
        calls.update((k, unfit.steps) for k, unfit in self._unfit.items())
        if self.options.mode is ControlMode.POLL:
            scanned = self.table.snapshot.models
            for k, record in self.table.records.items():
                source = scanned.get(k)
                if not record.serving and source is not None and source.step_models:
                    calls.setdefault(k, self._step_keys(source.namespace, source.step_models))
        return callers(calls, key)

    def _refit(self, key: str) -> None:
        """Rebuild the ensemble ``key`` against the models its steps call now (Triton reloads the
        ensembles over a model that reloaded). Under poll, as the repository has it (so a step
        and its ensemble edited together end up serving together); otherwise, or when that
        fails, from the configs it serves (or served, when it was taken out). Versions that no
        longer fit leave serving: UNAVAILABLE, the reason naming the step and the tensor, until
        a later change of a model they call makes them fit, or the ensemble loads anew."""
        record = self.table.records[key]
        source = self.table.snapshot.models.get(key)
        failed = ""
        if self.options.mode is ControlMode.POLL and source is not None and key not in self._overridden:
            try:
                config, backend, chosen = prepare(self.builder, source)
                if backend is None:
                    self._rebuild(record, key, _Unfit(source, dict.fromkeys(chosen, config), []), keep=False)
                    self.table.traffic.configured(record.name, config, sorted(record.serving))
                    return
            except Exception as exc:
                failed = failure_reason(exc)
        served = {v: mv for v, mv in record.serving.items() if mv.model is None}
        unfit = _Unfit.of(self._step_keys, served) if served else self._unfit.get(key)
        if unfit is None:
            if failed:  # a model that had failed to load, tried again
                for v in list(record.versions) or [1]:
                    record.versions[v] = VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, failed)
            return
        try:
            self._rebuild(record, key, unfit)
        except Exception as exc:
            reason = failure_reason(exc)
            self._swap(record, {v: mv for v, mv in record.serving.items() if v not in unfit.configs})
            for v in unfit.configs:
                record.versions[v] = VersionState(State.UNAVAILABLE, Why.STEPS_CHANGED, reason)
            self._unfit[key] = unfit
            log.error("ensemble '%s' is unavailable until it fits the models its steps call: %s", record.name, reason)
            return
        if failed:
            for v in unfit.configs:
                record.versions[v] = VersionState(State.READY, Why.RELOAD_FAILED, failed)

    def _rebuild(self, record: ModelRecord, key: str, unfit: _Unfit, keep: bool = True) -> None:
        """Build ``unfit``'s versions at once and serve them in place of the ones they replace
        (with ``keep``, beside the other versions serving); raise, serving nothing new, when one
        does not build."""
        built = {v: self.builder.build_ensemble(unfit.source, config, v) for v, config in unfit.configs.items()}
        self._swap(record, {**record.serving, **built} if keep else built)
        record.state = None
        for v in built:
            record.versions[v] = READY
        if self._unfit.pop(key, None) is not None:
            log.info(
                "ensemble '%s' fits the models its steps call again: versions %s ready", record.name, sorted(built)
            )
        else:
            log.info("ensemble '%s' versions %s rebuilt over the models its steps call", record.name, sorted(built))

    def _report_duplicates(self, snapshot: Snapshot) -> None:
        for name, paths in snapshot.duplicates.items():
            record = self.table.record(ModelSource(name, paths[0], paths[0].parent, ""))
            record.state = VersionState(
                State.UNAVAILABLE,
                Why.LOAD_FAILED,
                f"model '{name}' exists in more than one repository: {', '.join(map(str, paths))}",
            )


_NONE = ModelRecord("")


def prepare(
    builder: VersionBuilder, source: ModelSource, override: cfg.ModelConfig | None = None
) -> tuple[cfg.ModelConfig, Backend | None, list[int]]:
    """The completed config, its backend and the versions its policy picks (blocking): what a load
    does before building anything (``inferd check`` runs it offline)."""
    config, backend = builder.prepare_config(source, override)
    chosen = cfg.version_policy_select(config, sorted(source.version_dirs()))
    if backend is None:
        return config, backend, chosen or [1]  # an ensemble needs no version directory
    if not chosen:
        raise InvalidArgument(
            f"model '{source.name}': no version directory under {source.path} matches its "
            f"version_policy (at least one numeric version directory is needed)"
        )
    return config, backend, chosen


#: What the ensembles calling a model rely on (:func:`interface`).
Interface = tuple[tuple[object, ...], ...]


def interface(serving: Mapping[int, ModelVersion]) -> Interface:
    """What an ensemble step relies on in the versions of the model it calls: inputs, outputs,
    batching, decoupled and output labels (a reload that keeps them needs no ensemble rebuilt)."""
    return tuple(
        (
            v,
            mv.max_batch_size,
            mv.decoupled,
            tuple(t.SerializeToString(deterministic=True) for t in mv.config.input),
            tuple(t.SerializeToString(deterministic=True) for t in mv.config.output),
            tuple(sorted((name, tuple(labels)) for name, labels in mv.labels().items())),
        )
        for v, mv in sorted(serving.items())
    )


@dataclass(frozen=True)
class _Unfit:
    """An ensemble's versions to build again, from the configs they served with."""

    source: ModelSource
    configs: dict[int, cfg.ModelConfig]
    #: The keys of the models their steps call.
    steps: list[str]

    @classmethod
    def of(cls, step_keys: Callable[[str, Iterable[str]], list[str]], versions: Mapping[int, ModelVersion]) -> _Unfit:
        mv = next(iter(versions.values()))
        path = mv.model_dir or Path(mv.name)  # the builder always sets it
        names = dict.fromkeys(s.model_name for m in versions.values() for s in m.config.ensemble_scheduling.step)
        source = ModelSource(mv.name, path, path.parent, "", namespace=mv.namespace)
        return cls(source, {v: m.config for v, m in versions.items()}, step_keys(mv.namespace, names))


def _log_failure(record: ModelRecord, name: str, version: int | None, reason: str) -> None:
    """Log a failed load: a WARNING naming what keeps serving, an ERROR when nothing of the model does."""
    which = f"model '{name}'" if version is None else f"model '{name}' version {version}"
    if record.serving:
        serving = ", ".join(map(str, sorted(record.serving)))
        plural = "s" if len(record.serving) > 1 else ""
        log.warning("%s failed to load: %s; still serving version%s %s", which, reason, plural, serving)
    else:
        log.error("%s failed to load: %s", which, reason)


def failure_reason(exc: BaseException) -> str:
    """An exception as a load failure's reason (the repository index shows it)."""
    return exc.message if isinstance(exc, InferdError) else f"{type(exc).__name__}: {exc}"
