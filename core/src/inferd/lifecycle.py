"""Model lifecycle: control modes, loading, the load-new-then-swap reload, unloading.

States follow Triton: UNAVAILABLE, LOADING, READY, UNLOADING, each with a reason. A reload
builds the new versions while the old ones keep serving, swaps them in one assignment, then
drains and closes the old ones. A version that fails to load leaves the old one serving and its
reason visible in the repository index; one bad model never blocks the others.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd import config as cfg
from inferd.builder import VersionBuilder
from inferd.errors import InferdError, InvalidArgument, NotFound
from inferd.model import ModelVersion
from inferd.repository import ModelSource, RepositoryDiff, Snapshot, scan

if TYPE_CHECKING:
    from inferd.cache import ResponseCache
    from inferd.plugins import PluginHost

log = logging.getLogger(__name__)


#: Reason prefix of a version that keeps serving after its reload failed.
RELOAD_FAILED = "reload failed, previous version still serving"
#: Reasons of UNAVAILABLE versions that were taken down on purpose, not by a failure.
NOT_FAILURES = ("unloaded", "removed from the repository")


class ControlMode(str, enum.Enum):
    NONE = "none"
    EXPLICIT = "explicit"
    POLL = "poll"


class State(str, enum.Enum):
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"


@dataclass
class VersionState:
    state: State
    reason: str = ""


@dataclass
class ModelRecord:
    """Everything the server knows of one model name."""

    name: str
    serving: dict[int, ModelVersion] = field(default_factory=dict)
    versions: dict[int, VersionState] = field(default_factory=dict)
    #: A failure that concerns the whole model (bad config, no backend), shown with no version.
    state: VersionState | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    load_started: float = 0.0


@dataclass(frozen=True)
class LifecycleOptions:
    repositories: list[Path]
    mode: ControlMode = ControlMode.NONE
    startup_models: list[str] = field(default_factory=list)
    autocomplete: bool = True
    config_name: str | None = None
    load_threads: int = 4


class ModelManager:
    """Owns every model record and applies loads, unloads and repository diffs."""

    @property
    def dataplane(self) -> Any:
        """The DataPlane (set by it), handed to backends and ensembles."""
        return self.builder.dataplane

    @dataplane.setter
    def dataplane(self, value: Any) -> None:
        self.builder.dataplane = value

    @property
    def cache(self) -> ResponseCache | None:
        """The server's response cache, set by the Server before models load."""
        return self.builder.cache

    @cache.setter
    def cache(self, value: ResponseCache | None) -> None:
        self.builder.cache = value

    def __init__(self, host: PluginHost, options: LifecycleOptions) -> None:
        self.host = host
        self.options = options
        self.records: dict[str, ModelRecord] = {}
        self.snapshot = Snapshot()
        self.builder = VersionBuilder(host, options.autocomplete, options.config_name)
        self._load_slots = asyncio.Semaphore(max(1, options.load_threads))
        self._override_root: Path | None = None

    # -- start / stop ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Load what the control mode says to load at start-up."""
        self.snapshot = await asyncio.to_thread(scan, self.options.repositories)
        self._report_duplicates(self.snapshot)
        if self.options.mode is ControlMode.EXPLICIT:
            names = self.options.startup_models
            if "*" in names:
                names = list(self.snapshot.models)
        else:
            names = list(self.snapshot.models)
        await self._load_many(names)

    async def shutdown(self) -> None:
        """Drain and unload every model."""
        await asyncio.gather(*(self._unload_record(r) for r in list(self.records.values())))
        if self._override_root is not None:
            shutil.rmtree(self._override_root, ignore_errors=True)

    def _materialize(self, name: str, files: dict[str, bytes]) -> ModelSource:
        """Write load-request files into a fresh private model directory (blocking)."""
        if self._override_root is None:
            self._override_root = Path(tempfile.mkdtemp(prefix="inferd-overrides-"))
        root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self._override_root))
        model_dir = root / name
        for rel, content in files.items():
            dest = (model_dir / rel).resolve()
            if model_dir.resolve() not in dest.parents:
                raise InvalidArgument(f"load request for '{name}': file path 'file:{rel}' leaves the model directory")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(content)
        return ModelSource(name, model_dir, root, fingerprint="")

    # -- queries --------------------------------------------------------------------------------

    def resolve(self, name: str, version: str = "") -> ModelVersion:
        """The version serving ``name`` (the highest ready one when ``version`` is empty)."""
        record = self.records.get(name)
        serving = record.serving if record is not None else None
        if not serving:
            detail = "is not found" if record is None else "has no available versions"
            raise NotFound(f"Request for unknown model: '{name}' {detail}")
        if not version:
            return serving[max(serving)]
        try:
            number = int(version)
        except ValueError:
            raise InvalidArgument(f"model '{name}': version '{version}' is not a number") from None
        found = serving.get(number)
        if found is None:
            raise NotFound(
                f"Request for unknown model: '{name}' version {version} is not found; "
                f"available versions: {', '.join(str(v) for v in sorted(serving))}"
            )
        return found

    def ready_versions(self, name: str) -> list[int]:
        record = self.records.get(name)
        return sorted(record.serving) if record else []

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: every model in the repositories and every known version."""
        out: list[dict[str, str]] = []
        names = sorted(set(self.snapshot.models) | set(self.records))
        for name in names:
            record = self.records.get(name)
            entries: list[dict[str, str]] = []
            if record is not None:
                for v, st in sorted(record.versions.items()):
                    entries.append(_index_entry(name, str(v), st))
                if not entries and record.state is not None:
                    entries.append(_index_entry(name, "", record.state))
            if not entries:
                entries.append({"name": name})
            if ready_only:
                entries = [e for e in entries if e.get("state") == State.READY.value]
            out.extend(entries)
        return out

    # -- control --------------------------------------------------------------------------------

    async def load(
        self, name: str, override: cfg.ModelConfig | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load (or reload) one model; raise if it ends up not ready.

        ``files`` (Triton's ``file:<version>/<name>`` load parameters) replace the model's
        directory with one holding just those files; they need a config ``override``.
        """
        if files:
            if override is None:
                raise InvalidArgument(f"load request for '{name}': file overrides need a 'config' parameter too")
            source = await asyncio.to_thread(self._materialize, name, files)
            await self._load_one(source, override)
            return self._check_loaded(name)
        self.snapshot = await asyncio.to_thread(scan, self.options.repositories)
        if name not in self.snapshot.models:
            dup = self.snapshot.duplicates.get(name)
            if dup:
                raise InvalidArgument(f"model '{name}' exists in more than one repository: {', '.join(map(str, dup))}")
            raise NotFound(f"failed to load '{name}', failed to poll from model repository")
        await self._load_composing(name, override, set())
        await self._load_one(self.snapshot.models[name], override)
        self._check_loaded(name)

    def _check_loaded(self, name: str) -> None:
        record = self.records[name]
        if not record.serving:
            reason = record.state.reason if record.state else "no version could be loaded"
            failed = [f"version {v}: {s.reason}" for v, s in sorted(record.versions.items()) if s.reason]
            raise InvalidArgument(f"failed to load '{name}': " + ("; ".join(failed) or reason))
        failed = [
            f"version {v}: {s.reason}"
            for v, s in sorted(record.versions.items())
            if s.reason and (s.state is State.UNAVAILABLE and not s.reason.startswith(NOT_FAILURES) or s.reason.startswith(RELOAD_FAILED))
        ]
        if failed:
            raise InvalidArgument(f"failed to load '{name}': " + "; ".join(failed))

    async def unload(self, name: str, unload_dependents: bool = False, reason: str = "unloaded") -> None:
        """Unload every version of ``name`` and, as Triton does, every ensemble that calls it (they
        could no longer run). With ``unload_dependents``, an ensemble's composing models go too,
        unless another ensemble still serving calls them. Unloading an unknown model succeeds."""
        record = self.records.get(name)
        if record is None:
            return
        composing = self._calls(name) if unload_dependents else []
        await self._unload_record(record, reason)
        todo = self._callers(name)
        while todo:
            caller = todo.pop()
            if self.records[caller].serving:
                await self._unload_record(self.records[caller], f"unloaded: it calls '{name}', which was unloaded")
                todo.extend(self._callers(caller))
        for model in composing:
            other = self.records.get(model)
            if other is not None and other.serving and not self._callers(model):
                await self.unload(model, True)

    def _calls(self, model: str) -> list[str]:
        """The models a serving ensemble's steps call."""
        record = self.records.get(model)
        serving = record.serving.values() if record is not None else ()
        return list(dict.fromkeys(s.model_name for mv in serving for s in mv.config.ensemble_scheduling.step))

    def _callers(self, model: str) -> list[str]:
        """Serving ensembles whose steps call ``model``."""
        return [n for n, r in self.records.items() if n != model and r.serving and model in self._calls(n)]

    async def apply(self, snapshot: Snapshot, changes: RepositoryDiff) -> None:
        """Apply a repository diff (poll mode): remove, then load added and modified models."""
        self.snapshot = snapshot
        self._report_duplicates(snapshot)
        for name in changes.removed:
            if name in self.records:
                await self.unload(name, reason="removed from the repository")
                self.records.pop(name, None)
        await self._load_many(changes.added + changes.modified)

    # -- loading --------------------------------------------------------------------------------

    async def _load_many(self, names: list[str]) -> None:
        sources = [self.snapshot.models[n] for n in names if n in self.snapshot.models]
        # Ensembles reference other models, so they load after the plain ones.
        plain = [s for s in sources if not _looks_like_ensemble(s)]
        ensembles = [s for s in sources if _looks_like_ensemble(s)]
        await asyncio.gather(*(self._load_one(s) for s in plain))
        # An ensemble may call another ensemble: load them in waves, the called ones first.
        for wave in await asyncio.to_thread(self._ensemble_waves, ensembles):
            await asyncio.gather(*(self._load_one(s) for s in wave))

    async def _load_composing(self, name: str, override: cfg.ModelConfig | None, seen: set[str]) -> None:
        """As Triton does, load the models an ensemble's steps call that are not serving yet
        (those they call first); a plain model has none."""
        seen.add(name)
        source = self.snapshot.models.get(name)
        if override is not None:
            steps = [s.model_name for s in override.ensemble_scheduling.step]
        else:
            steps = await asyncio.to_thread(self._step_models, source) if source is not None else []
        for dep in dict.fromkeys(steps):
            if dep in seen or dep not in self.snapshot.models:
                continue
            await self._load_composing(dep, None, seen)
            record = self.records.get(dep)
            if record is None or not record.serving:
                await self._load_one(self.snapshot.models[dep])

    def _step_models(self, source: ModelSource) -> list[str]:
        """The models an ensemble's steps call, read from its config (blocking); [] otherwise."""
        if not _looks_like_ensemble(source):
            return []
        try:
            config = cfg.load_config(source.path, self.options.config_name)
        except Exception:
            return []
        return [s.model_name for s in config.ensemble_scheduling.step] if config is not None else []

    def _ensemble_waves(self, sources: list[ModelSource]) -> list[list[ModelSource]]:
        """Ensembles in groups where each group calls only models of earlier groups (blocking)."""
        calls = {s.name: set(self._step_models(s)) - {s.name} for s in sources}
        waves: list[list[ModelSource]] = []
        left = list(sources)
        while left:
            names = {s.name for s in left}
            wave = [s for s in left if not calls[s.name] & names] or left  # a cycle: all at once
            waves.append(wave)
            left = [s for s in left if s not in wave]
        return waves

    async def _load_one(self, source: ModelSource, override: cfg.ModelConfig | None = None) -> None:
        record = self.records.setdefault(source.name, ModelRecord(source.name))
        async with record.lock, self._load_slots:
            started = time.monotonic()
            try:
                config, backend = await asyncio.to_thread(self.builder.prepare_config, source, override)
                chosen = cfg.version_policy_select(config, sorted(source.version_dirs()))
                if not chosen and backend is not None:
                    raise InvalidArgument(
                        f"model '{source.name}': no version directory under {source.path} matches its "
                        f"version_policy (at least one numeric version directory is needed)"
                    )
                if backend is None and not chosen:
                    chosen = [1]  # an ensemble needs no version directory
            except Exception as exc:
                message = exc.message if isinstance(exc, InferdError) else f"{type(exc).__name__}: {exc}"
                log.error("model '%s' failed to load: %s", source.name, message)
                self._record_failure(record, source, message)
                return
            record.state = None
            for v in chosen:
                if v not in record.serving:
                    record.versions[v] = VersionState(State.LOADING)
            results = await asyncio.gather(
                *(self.builder.load_version(source, config, backend, v) for v in chosen), return_exceptions=True
            )
            new_serving: dict[int, ModelVersion] = {}
            for v, result in zip(chosen, results, strict=True):
                if isinstance(result, ModelVersion):
                    new_serving[v] = result
                    record.versions[v] = VersionState(State.READY)
                else:
                    message = result.message if isinstance(result, InferdError) else f"{type(result).__name__}: {result}"
                    log.error("model '%s' version %d failed to load: %s", source.name, v, message)
                    if v in record.serving:  # a failed reload keeps the old version serving
                        new_serving[v] = record.serving[v]
                        record.versions[v] = VersionState(State.READY, f"{RELOAD_FAILED}: {message}")
                    else:
                        record.versions[v] = VersionState(State.UNAVAILABLE, message)
            old = record.serving
            record.serving = new_serving  # the swap: new requests now reach the new versions
            for v in old:
                if v not in new_serving:
                    record.versions[v] = VersionState(State.UNAVAILABLE, "unloaded")
            retired = [mv for v, mv in old.items() if new_serving.get(v) is not mv]
            if retired:
                asyncio.get_running_loop().create_task(self._retire(retired))
            log.info(
                "model '%s' versions %s ready in %.2f s",
                source.name, sorted(new_serving) or "none", time.monotonic() - started,
            )  # fmt: skip

    @staticmethod
    def _record_failure(record: ModelRecord, source: ModelSource, message: str) -> None:
        """A failure before any version loaded: shown on the serving versions (which keep
        serving), else on the version the default policy would load, else on the model."""
        if record.serving:
            for v in record.serving:
                record.versions[v] = VersionState(State.READY, f"{RELOAD_FAILED}: {message}")
            return
        dirs = source.version_dirs()
        record.versions = {max(dirs): VersionState(State.UNAVAILABLE, message)} if dirs else {}
        record.state = None if dirs else VersionState(State.UNAVAILABLE, message)

    # -- unloading ------------------------------------------------------------------------------

    async def _unload_record(self, record: ModelRecord, reason: str = "unloaded") -> None:
        async with record.lock:
            old = record.serving
            record.serving = {}
            for v in old:
                record.versions[v] = VersionState(State.UNLOADING)
            await self._retire(list(old.values()))
            for v in old:
                record.versions[v] = VersionState(State.UNAVAILABLE, reason)

    async def _retire(self, versions: list[ModelVersion]) -> None:
        """Let in-flight requests finish, then close instances and unload."""
        for mv in versions:
            try:
                await mv.stop()
                await asyncio.to_thread(mv.close)
            except Exception:
                log.exception("model '%s' version %d failed to unload cleanly", mv.name, mv.version)

    def _report_duplicates(self, snapshot: Snapshot) -> None:
        for name, paths in snapshot.duplicates.items():
            record = self.records.setdefault(name, ModelRecord(name))
            record.state = VersionState(
                State.UNAVAILABLE, f"model '{name}' exists in more than one repository: {', '.join(map(str, paths))}"
            )


def _index_entry(name: str, version: str, st: VersionState) -> dict[str, str]:
    """One repository-index row; like Triton, empty version and reason are left out."""
    entry = {"name": name}
    if version:
        entry["version"] = version
    entry["state"] = st.state.value
    if st.reason:
        entry["reason"] = st.reason
    return entry


def _looks_like_ensemble(source: ModelSource) -> bool:
    try:
        text = (source.path / "config.pbtxt").read_text(errors="replace")
    except OSError:
        return False
    return "ensemble_scheduling" in text
