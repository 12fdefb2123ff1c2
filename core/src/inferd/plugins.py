"""The plugin manager: default plugins, entry points, blocking, and a typed facade over pm.hook.

One :class:`PluginHost` per server, never a module global. Tests build one with
``load_entrypoints=False`` and pass plugin objects in.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from inferd import hookspecs
from inferd.registry import Registry

if TYPE_CHECKING:
    import argparse

    from inferd.backend import Backend
    from inferd.cache import ResponseCache
    from inferd.frontend import Frontend
    from inferd.scheduler import Scheduler
    from inferd.server import Server

log = logging.getLogger(__name__)

ENTRYPOINT_GROUP = "inferd"
DISABLE_ENV = "INFERD_DISABLE_PLUGINS"

#: Built-in plugins: registered exactly as third-party ones are, and blockable by name.
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("http", "inferd.default_plugins.http"),
    ("grpc", "inferd.default_plugins.grpc"),
    ("schedulers", "inferd.default_plugins.schedulers"),
    ("metrics", "inferd.default_plugins.metrics"),
    ("diagnostics", "inferd.default_plugins.diagnostics"),
    ("dynamic_batcher", "inferd.default_plugins.dynamic_batcher"),
    ("sequence_batcher", "inferd.default_plugins.sequence_batcher"),
    ("local_cache", "inferd.default_plugins.local_cache"),
    ("ensemble", "inferd.default_plugins.ensemble"),
)


@dataclass
class PluginInfo:
    """What ``inferd plugins`` shows for one plugin."""

    name: str
    distribution: str = ""
    version: str = ""
    registers: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""


def disabled_from_env() -> set[str]:
    """Plugin names listed in ``INFERD_DISABLE_PLUGINS`` (comma separated)."""
    return {p.strip() for p in os.environ.get(DISABLE_ENV, "").split(",") if p.strip()}


class PluginHost:
    """Owns the pluggy manager and the registries filled from it."""

    def __init__(
        self,
        *,
        load_entrypoints: bool = True,
        plugins: Iterable[Any] = (),
        disabled: Iterable[str] | None = None,
    ) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.blocked = set(disabled_from_env() if disabled is None else disabled)
        self.infos: dict[str, PluginInfo] = {}
        for name in self.blocked:
            self.pm.set_blocked(name)
        for name, module in DEFAULT_PLUGINS:
            if name not in self.blocked:
                self._register(importlib.import_module(module), name, "inferd")
        if load_entrypoints:
            self._load_entrypoints()
        for plugin in plugins:
            self._register(plugin, getattr(plugin, "__name__", None) or type(plugin).__name__, "")
        self.backends: Registry[Callable[[], Backend]] = self._collect("backend", "inferd_register_backends")
        self.schedulers: Registry[Callable[..., Scheduler]] = self._collect(
            "scheduler", "inferd_register_schedulers"
        )
        self.caches: Registry[Callable[..., ResponseCache]] = self._collect("cache", "inferd_register_caches")
        self.frontends: Registry[Callable[..., Frontend | None]] = self._collect(
            "frontend", "inferd_register_frontends"
        )

    # -- registration ---------------------------------------------------------------------------

    def _register(self, plugin: Any, name: str, distribution: str) -> None:
        if name in self.blocked or self.pm.is_blocked(name):
            return
        self.pm.register(plugin, name=name)
        version = ""
        if distribution:
            try:
                version = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                pass
        self.infos[name] = PluginInfo(name, distribution, version)

    def _load_entrypoints(self) -> None:
        for ep in importlib.metadata.entry_points(group=ENTRYPOINT_GROUP):
            if ep.name in self.blocked or self.pm.get_plugin(ep.name) is not None:
                continue
            dist = ep.dist.name if ep.dist is not None else ""
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not take the server down
                log.error("plugin '%s' (%s) failed to import: %s", ep.name, dist, exc)
                self.infos[ep.name] = PluginInfo(
                    ep.name, dist, ep.dist.version if ep.dist else "", error=f"{type(exc).__name__}: {exc}"
                )
                continue
            try:
                self._register(plugin, ep.name, dist)
            except Exception as exc:  # e.g. a hook with a misspelled parameter (pluggy validation)
                log.error("plugin '%s' (%s) cannot be registered: %s", ep.name, dist, exc)
                self.infos[ep.name] = PluginInfo(
                    ep.name, dist, ep.dist.version if ep.dist else "", error=f"{type(exc).__name__}: {exc}"
                )

    def _collect(self, kind: str, hook_name: str) -> Registry[Any]:
        registry: Registry[Any] = Registry(kind)
        hook = getattr(self.pm.hook, hook_name)
        for impl in hook.get_hookimpls():
            plugin_name = impl.plugin_name

            def register(name: str, factory: Callable[..., Any], _plugin: str = plugin_name, **options: Any) -> None:
                registry.add(name, factory, _plugin, **options)
                info = self.infos.setdefault(_plugin, PluginInfo(_plugin))
                info.registers.setdefault(kind, []).append(name)

            try:
                impl.function(register)
            except Exception as exc:
                log.error("plugin '%s' failed in %s: %s", plugin_name, hook_name, exc)
                self.infos.setdefault(plugin_name, PluginInfo(plugin_name)).error = f"{type(exc).__name__}: {exc}"
        return registry

    # -- typed facade over pm.hook ---------------------------------------------------------------

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        self.pm.hook.inferd_add_options(parser=parser)

    def startup(self, server: Server) -> None:
        self.pm.hook.inferd_startup(server=server)

    def shutdown(self, server: Server) -> None:
        self.pm.hook.inferd_shutdown(server=server)

    def plugin_infos(self) -> list[PluginInfo]:
        return sorted(self.infos.values(), key=lambda i: (i.distribution != "inferd", i.name))

    def module_names(self) -> list[str]:
        return [p.__name__ for p in self.pm.get_plugins() if isinstance(p, ModuleType)]
