"""The plugin manager: default plugins, entry points, blocking, and a typed facade over pm.hook.

One :class:`PluginHost` per server, never a module global. Tests build one with
``load_entrypoints=False`` and pass plugin objects in.

A plugin declares the plugin API it was written for beside its hooks (``INFERD_API = (1, 0)``); one
built for another major than :data:`inferd.api.API_VERSION`'s is refused at registration, the way
a broken plugin is (logged at ERROR, listed by ``inferd plugins``, left out).

Start-up order: hook specs, :data:`DEFAULT_PLUGINS`, entry points, plugins passed in, then
``pm.check_pending()`` (a plugin implementing a hook inferd does not have is reported and left
out). The registration hooks run through ``pm.hook`` the first time a registry is used, so that
``INFERD_TRACE_PLUGINS=1`` traces them into the server's configured log.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import pluggy

from inferd.api import API_VERSION
from inferd.contracts import hookspecs
from inferd.contracts.hints import did_you_mean
from inferd.host.hookcalls import call_registration_hook
from inferd.host.registry import Registry

if TYPE_CHECKING:
    import argparse

    from inferd.contracts.backend import Backend
    from inferd.contracts.cache import ResponseCache
    from inferd.contracts.frontend import Frontend
    from inferd.contracts.hookspecs import ServerView
    from inferd.contracts.scheduler import Scheduler

T = TypeVar("T")
log = logging.getLogger(__name__)
trace_log = logging.getLogger("inferd.host.plugins.trace")

ENTRYPOINT_GROUP = "inferd"
DISABLE_ENV = "INFERD_DISABLE_PLUGINS"
TRACE_ENV = "INFERD_TRACE_PLUGINS"
#: The module-level name with which a plugin declares its API: ``INFERD_API = (1, 0)``.
API_DECLARATION = "INFERD_API"

#: Built-in plugins: registered exactly as third-party ones are, and blockable by name.
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("http", "inferd.frontends.http"),
    ("grpc", "inferd.frontends.grpc"),
    ("schedulers", "inferd.schedulers.direct"),
    ("metrics", "inferd.frontends.metrics"),
    ("diagnostics", "inferd.host.diagnostics"),
    ("dynamic_batcher", "inferd.schedulers.dynamic"),
    ("sequence_batcher", "inferd.schedulers.sequence.batcher"),
    ("local_cache", "inferd.caches.local"),
    ("ensemble", "inferd.schedulers.ensemble"),
)


@dataclass
class PluginInfo:
    """What ``inferd plugins`` shows for one plugin."""

    name: str
    distribution: str = ""
    version: str = ""
    #: Names registered, by kind ("backend", "scheduler"...), in registration order.
    registers: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def error(self) -> str:
        """Every error of the plugin, joined ("" when it has none)."""
        return "; ".join(self.errors)


@dataclass(frozen=True)
class Registries:
    """The four registries, filled by the registration hooks."""

    backends: Registry[Backend]
    schedulers: Registry[Scheduler]
    caches: Registry[ResponseCache]
    frontends: Registry[Frontend | None]


def disabled_from_env() -> set[str]:
    """Plugin names listed in ``INFERD_DISABLE_PLUGINS`` (comma separated)."""
    return {p.strip() for p in os.environ.get(DISABLE_ENV, "").split(",") if p.strip()}


def tracing_from_env() -> bool:
    """Whether ``INFERD_TRACE_PLUGINS`` asks for pluggy's hook trace (``1``, ``true``, ``yes``)."""
    return os.environ.get(TRACE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _warn_unknown_disabled(blocked: Iterable[str], known: set[str]) -> None:
    """Warn of each blocked name that is no plugin's (a typo blocks nothing), with the closest one."""
    for name in sorted(set(blocked) - known):
        hint = did_you_mean(name, sorted(known))
        log.warning(
            "%s names '%s', which is not an installed plugin; it blocks nothing%s",
            DISABLE_ENV,
            name,
            f"; {hint}" if hint else f" (plugins: {', '.join(sorted(known))})",
        )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class PluginHost:
    """Owns the pluggy manager and the registries filled from it."""

    def __init__(
        self,
        *,
        load_entrypoints: bool = True,
        plugins: Iterable[object] = (),
        disabled: Iterable[str] | None = None,
        trace: bool | None = None,
    ) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.blocked = set(disabled_from_env() if disabled is None else disabled)
        self._infos: dict[str, PluginInfo] = {}
        self._versions: dict[str, str] = {}
        for name in self.blocked:
            self.pm.set_blocked(name)
        for name, module in DEFAULT_PLUGINS:
            if name not in self.blocked:
                self._register(importlib.import_module(module), name, "inferd")
        known = {name for name, _ in DEFAULT_PLUGINS}
        if load_entrypoints:
            known |= self._load_entrypoints()
        for plugin in plugins:
            name = getattr(plugin, "__name__", None) or type(plugin).__name__
            known.add(name)
            self._register(plugin, name, "")
        if load_entrypoints:
            _warn_unknown_disabled(self.blocked, known)
        self._leave_out_unknown_hooks()
        if tracing_from_env() if trace is None else trace:
            self.pm.trace.root.setwriter(lambda text: trace_log.info("%s", text.rstrip("\n")))
            self.pm.enable_tracing()
        self._lock = threading.Lock()
        self._registries: Registries | None = None

    # -- registration ---------------------------------------------------------------------------

    def _info(self, name: str) -> PluginInfo:
        return self._infos.setdefault(name, PluginInfo(name))

    def _register(self, plugin: object, name: str, distribution: str, version: str | None = None) -> None:
        """Register ``plugin``; ``version`` is its distribution's (looked up once per distribution when not given).
        A plugin declaring an API this host does not provide is left out, with the reason as its error."""
        if name in self.blocked or self.pm.is_blocked(name):
            return
        if version is None:
            version = self._version(distribution)
        refused = api_refusal(name, getattr(plugin, API_DECLARATION, None))
        if refused is not None:
            log.error("%s", refused)
            self._infos[name] = PluginInfo(name, distribution, version, errors=[refused])
            return
        self.pm.register(plugin, name=name)
        self._infos[name] = PluginInfo(name, distribution, version)

    def _version(self, distribution: str) -> str:
        """The installed version of ``distribution`` ("" when none): each lookup searches sys.path
        (about 1 ms), and the default plugins all come from ``inferd``."""
        if distribution not in self._versions:
            version = ""
            if distribution:
                with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                    version = importlib.metadata.version(distribution)
            self._versions[distribution] = version
        return self._versions[distribution]

    def _load_entrypoints(self) -> set[str]:
        """Register the installed plugins (not blocked ones); return every installed plugin's name."""
        names = set()
        for ep in importlib.metadata.entry_points(group=ENTRYPOINT_GROUP):
            names.add(ep.name)
            if ep.name in self.blocked or self.pm.get_plugin(ep.name) is not None:
                continue
            dist = ep.dist.name if ep.dist is not None else ""
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not take the server down
                self._broken(ep, dist, "failed to import", exc)
                continue
            try:
                self._register(plugin, ep.name, dist, ep.dist.version if ep.dist is not None else None)
            except Exception as exc:  # e.g. a hook with a misspelled parameter (pluggy validation)
                self._broken(ep, dist, "cannot be registered", exc)
        return names

    def _broken(self, ep: importlib.metadata.EntryPoint, dist: str, what: str, exc: Exception) -> None:
        log.error("plugin '%s' (%s) %s: %s", ep.name, dist, what, exc)
        version = ep.dist.version if ep.dist is not None else ""
        self._infos[ep.name] = PluginInfo(ep.name, dist, version, errors=[_describe(exc)])

    def _leave_out_unknown_hooks(self) -> None:
        """``pm.check_pending()``: a plugin implementing a hook inferd has no spec for (a misspelled
        name) is logged at ERROR, reported by ``inferd plugins`` and unregistered; the rest go on."""
        while True:
            try:
                self.pm.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin)
                assert name is not None  # a registered plugin has a name
                message = unknown_hooks_message(name, unknown_hooks(self.pm, exc.plugin))
                log.error("%s", message)
                self._info(name).errors.append(message)
                self.pm.unregister(exc.plugin)

    def registries(self) -> Registries:
        """The registries, filled by calling the registration hooks the first time they are used."""
        with self._lock:
            if self._registries is None:
                self._registries = Registries(
                    self._collect(
                        Registry("backend", ("model_filenames", "settings", "single_process")),
                        self.pm.hook.inferd_register_backends,
                    ),
                    self._collect(Registry("scheduler"), self.pm.hook.inferd_register_schedulers),
                    self._collect(Registry("cache"), self.pm.hook.inferd_register_caches),
                    self._collect(Registry("frontend"), self.pm.hook.inferd_register_frontends),
                )
            return self._registries

    def _collect(self, registry: Registry[T], hook: pluggy.HookCaller) -> Registry[T]:
        def failed(plugin: str, exc: Exception) -> None:
            log.error("plugin '%s' failed in %s: %s", plugin, hook.name, exc)
            self._info(plugin).errors.append(_describe(exc))

        for call in call_registration_hook(hook, registry, failed, self.pm.trace.root.get("register")):
            names = self._info(call.plugin).registers.setdefault(registry.kind, [])
            if call.name not in names:
                names.append(call.name)
        return registry

    @property
    def backends(self) -> Registry[Backend]:
        return self.registries().backends

    @property
    def schedulers(self) -> Registry[Scheduler]:
        return self.registries().schedulers

    @property
    def caches(self) -> Registry[ResponseCache]:
        return self.registries().caches

    @property
    def frontends(self) -> Registry[Frontend | None]:
        return self.registries().frontends

    # -- typed facade over pm.hook ---------------------------------------------------------------

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        self.pm.hook.inferd_add_options(parser=parser)

    def startup(self, server: ServerView) -> None:
        self.pm.hook.inferd_startup(server=server)

    def shutdown(self, server: ServerView) -> None:
        self.pm.hook.inferd_shutdown(server=server)

    @property
    def infos(self) -> dict[str, PluginInfo]:
        """Every plugin by name, with what it registered (known once the registration hooks ran)."""
        self.registries()
        return self._infos

    def plugin_infos(self) -> list[PluginInfo]:
        """Every plugin (built-ins first), with what it registered and its errors."""
        return sorted(self.infos.values(), key=lambda i: (i.distribution != "inferd", i.name))


def api_refusal(plugin: str, declared: object) -> str | None:
    """Why a plugin declaring ``INFERD_API = declared`` cannot be registered, or ``None``: it
    declares none, or the major of :data:`~inferd.api.API_VERSION` (a newer minor is logged: the
    plugin may use names this host lacks, which fails its import rather than a request)."""
    if declared is None:
        return None
    host = f"{API_VERSION[0]}.{API_VERSION[1]}"
    if not (isinstance(declared, tuple) and len(declared) == 2 and all(type(part) is int for part in declared)):
        return (
            f"plugin '{plugin}' declares {API_DECLARATION} = {declared!r}; expected (major, minor), the API it "
            f"was written for (this inferd provides API {host}); the plugin is left out"
        )
    major, minor = declared
    if major > API_VERSION[0]:
        return (
            f"plugin '{plugin}' is built for inferd plugin API {major}.{minor}, newer than this inferd's API "
            f"{host}; upgrade inferd or install a release of the plugin for API {API_VERSION[0]}; the plugin "
            "is left out"
        )
    if major < API_VERSION[0]:
        return (
            f"plugin '{plugin}' is built for inferd plugin API {major}.{minor}, which this inferd (API {host}) "
            f"no longer provides; install a release of the plugin for API {API_VERSION[0]}; the plugin is "
            "left out"
        )
    if minor > API_VERSION[1]:
        log.warning(
            "plugin '%s' is built for inferd plugin API %d.%d, newer than this inferd's API %s",
            plugin,
            major,
            minor,
            host,
        )
    return None


def unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """The hooks ``plugin`` implements (not as optional) that have no spec, by name."""
    return sorted(
        caller.name
        for caller in pm.get_hookcallers(plugin) or []
        if not caller.has_spec() and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
    )


def unknown_hooks_message(plugin: str, hooks: Iterable[str]) -> str:
    """The error for a plugin implementing ``hooks``, which have no spec, naming the specs they resemble."""
    known = [name for name in vars(hookspecs) if name.startswith(f"{hookspecs.PROJECT}_")]
    parts = []
    for hook in hooks:
        close = difflib.get_close_matches(hook, known, n=1)
        parts.append(f"'{hook}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return f"plugin '{plugin}' implements unknown hook {', '.join(parts)}; the plugin is left out"
