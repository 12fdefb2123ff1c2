"""The layers of the ``inferd`` package, shared by the import-structure test and the docs test of
docs/architecture.md's layer table."""

from __future__ import annotations

#: The layers of ``inferd``, lowest first (docs/architecture.md's picture): a module imports, at run
#: time, only from its own layer or lower ones (an import under ``if TYPE_CHECKING:`` names a type
#: for an annotation and may point up; it still counts for cycles).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("contracts", ("inferd", "inferd.contracts", "inferd.datatypes")),
    ("config", ("inferd.config",)),
    ("services", ("inferd.auth", "inferd.serving", "inferd.shared_memory", "inferd.repository", "inferd.views")),
    ("engine", ("inferd.engine",)),
    ("lifecycle", ("inferd.lifecycle",)),
    ("dataplane", ("inferd.workers", "inferd.dataplane")),
    # the facade plugins import: the contracts, and the few helpers of the engine it names
    # (``InstancePool``, ``gc_settings``, ``SOURCES``), imported lazily by name (``importlib``, unseen here)
    ("public API", ("inferd.api",)),
    ("built-in plugins", ("inferd.frontends", "inferd.schedulers", "inferd.caches")),
    ("host", ("inferd.host",)),
    ("tools", ("inferd.tools",)),
    ("command line", ("inferd.host.cli", "inferd.host.serve_command", "inferd.host.embedded")),
    ("testing", ("inferd.testing",)),
]
