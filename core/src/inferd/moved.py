"""Old module paths of this release's layout, kept working for one release.

A third-party plugin written against the flat layout (``from inferd.backend import Backend``) still
imports: the old name is an alias of the new module (the same module object, so ``isinstance`` and
monkeypatching agree), and the first import of each old name warns once with a
``DeprecationWarning`` naming the new path. Public names are in :mod:`inferd.api`; new code imports
from there.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: ``{old dotted name: new dotted name}`` for the modules plugins imported before the move.
MOVED = {
    "inferd.errors": "inferd.contracts.errors",
    "inferd.types": "inferd.contracts.types",
    "inferd.hints": "inferd.contracts.hints",
    "inferd.names": "inferd.contracts.names",
    "inferd.flags": "inferd.contracts.flags",
    "inferd.backend": "inferd.contracts.backend",
    "inferd.cache": "inferd.contracts.cache",
    "inferd.scheduler": "inferd.contracts.scheduler",
    "inferd.runner": "inferd.engine.runner",
    "inferd.frontend": "inferd.contracts.frontend",
    "inferd.model_info": "inferd.contracts.model_info",
    "inferd.metric_sources": "inferd.contracts.metric_sources",
    "inferd.hookspecs": "inferd.contracts.hookspecs",
    "inferd.recorder": "inferd.engine.recorder",
    "inferd.stats": "inferd.engine.stats",
    "inferd.validation": "inferd.contracts.validation",
    "inferd.json_depth": "inferd.contracts.json_depth",
    "inferd.trace": "inferd.engine.trace",
    "inferd.gc_settings": "inferd.engine.gc_settings",
    "inferd.traffic": "inferd.engine.traffic",
    "inferd.tls": "inferd.serving.tls",
    "inferd.server": "inferd.host.server",
    "inferd.cli": "inferd.host.cli",
    "inferd.logging_settings": "inferd.host.logging_settings",
}


class MovedModules:
    """Finds an old name of :data:`MOVED` and loads it as the new module (one warning per name): a
    meta path finder and loader by protocol (``importlib.abc`` is not imported: it costs every
    ``import inferd`` ~40 ms, importlib.resources with it)."""

    def find_spec(
        self, fullname: str, path: object, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by protocol

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new} (import it from there, or its names from inferd.api); "
                      "the old path goes in the next release", DeprecationWarning, stacklevel=4)  # fmt: skip
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is the new one, already imported."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
